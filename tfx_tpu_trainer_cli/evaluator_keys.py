"""What the taxi pipeline's Evaluator reads, decided from the trainer module."""

import csv
import dataclasses
import os
import tempfile
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import user_module

TRANSFORM_FEATURES_SIGNATURE = 'transform_features'
SERVING_SIGNATURE = 'serving_default'
# TFMA's default prediction keys, in the order it looks for them
# (tensorflow_model_analysis/metrics/metric_util.py,
# prepare_labels_and_predictions).
TFMA_PREDICTION_KEYS = ('scores', 'outputs', 'predictions', 'logistic',
                        'probabilities', 'logits')
_SAMPLE_ROWS = 200


class EvaluatorKeyError(errors.TPUTrainerError, ValueError):
  """The Evaluator would find no label or no prediction it can read."""


@dataclasses.dataclass(frozen=True)
class EvaluatorKeys:
  """The Evaluator's ModelSpec fields."""
  label_key: str
  prediction_key: Optional[str]  # None: TFMA's own search
  preprocessing_function_names: Tuple[str, ...] = ()
  # The serving_default outputs found, () when not traced.
  serving_outputs: Tuple[str, ...] = ()


def raw_feature_spec(data_root: str) -> Dict[str, Any]:
  """VarLen features of the CSV columns (as SchemaGen infers them here).

  Dtypes from the first rows: integers, floats, else strings.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    found = sorted(tf.io.gfile.glob(os.path.join(data_root, '*.csv')))
    if not found:
      raise EvaluatorKeyError(f'no *.csv file under {data_root}')
    with tf.io.gfile.GFile(found[0]) as f:
      reader = csv.reader(f)
      header = next(reader)
      rows = [row for _, row in zip(range(_SAMPLE_ROWS), reader)]
  except (tf.errors.OpError, OSError, StopIteration, EvaluatorKeyError) as e:
    raise EvaluatorKeyError(
        f'The CSV columns under {data_root} could not be read here '
        f'({type(e).__name__}: {errors.first_line(e)}), so the Evaluator\'s '
        'keys cannot be traced from the modules; pass --eval-label-key and '
        '--eval-prediction-key.') from e

  def dtype(values):
    values = [v for v in values if v != '']
    for kind, convert in ((tf.int64, int), (tf.float32, float)):
      try:
        for v in values:
          convert(v)
        return kind
      except ValueError:
        continue
    return tf.string

  return {name: tf.io.VarLenFeature(dtype([r[i] for r in rows if i < len(r)]))
          for i, name in enumerate(header)}


def _as_transform_calls_it(preprocessing_fn):
  """`preprocessing_fn(inputs)`, its `custom_config` bound as Transform does.

  tfx/components/transform/executor_utils.MaybeBindCustomConfig binds the
  component's custom_config (the taxi pipeline's Transform has none: {}).
  """
  from tfx.components.transform import executor_utils  # pylint: disable=g-import-not-at-top
  from tfx.components.transform import labels  # pylint: disable=g-import-not-at-top
  return executor_utils.MaybeBindCustomConfig(
      {labels.CUSTOM_CONFIG: ['{}']}, preprocessing_fn)


def transformed_features(preprocessing_module_file: str,
                         data_root: str) -> Dict[str, Any]:
  """Name -> traced output tensor of the module's preprocessing_fn."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_transform import impl_helper  # pylint: disable=g-import-not-at-top
  directory = os.path.dirname(os.path.abspath(preprocessing_module_file))
  with user_module.first_on_path(directory), tf.Graph().as_default():
    module = user_module.load_file(preprocessing_module_file,
                                   '_evaluator_keys_preprocessing')
    try:
      _, _, outputs = impl_helper.trace_preprocessing_function(
          _as_transform_calls_it(module.preprocessing_fn),
          raw_feature_spec(data_root), use_tf_compat_v1=True)
    except SystemExit as e:
      raise EvaluatorKeyError(
          f'preprocessing_fn of {preprocessing_module_file} raised '
          f'SystemExit({e.code!r}) (e.g. sys.exit()) while it was traced to '
          'find what the Evaluator reads, before any component ran. Module '
          'code must return or raise an exception, never exit the process.'
      ) from e
    except Exception as e:  # pylint: disable=broad-except
      raise EvaluatorKeyError(
          f'--preprocessing-module-file: preprocessing_fn of '
          f'{preprocessing_module_file} raised {type(e).__name__}: {e} while '
          'it was traced on the CSV columns, before any component ran; '
          'Transform would fail the same way: fix the function.') from e
  return dict(outputs)


def serving_outputs(trainer_module, features: Mapping[str, Any],
                    params: Mapping[str, Any]) -> Tuple[str, ...]:
  """The output keys of the model's `serving_default` export signature.

  Args:
    trainer_module: the loaded `user_module.UserModule` (model_fn or Keras).
    features: transformed features (traced tensors: dtype and shape).
    params: the model_fn's params.

  Returns:
    The output names, or () when the module exports no serving_default.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.model_fn import estimator_spec_adapter  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.model_fn import dispatch  # pylint: disable=g-import-not-at-top
  model_fn = dispatch.model_fn_for_module(trainer_module)
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    placeholders = {}
    for name, tensor in features.items():
      if isinstance(tensor, tf.SparseTensor):
        placeholders[name] = tf.compat.v1.sparse_placeholder(
            tensor.dtype, name=name)
      else:
        placeholders[name] = tf.compat.v1.placeholder(
            tensor.dtype, shape=[None] + tensor.shape.as_list()[1:],
            name=name)
    with tempfile.TemporaryDirectory(prefix='evaluator-keys-') as tmp:
      config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=tmp)
      spec = estimator_spec_adapter.call_model_fn(
          model_fn, placeholders, None, tf.estimator.ModeKeys.PREDICT,
          dict(params, use_tpu=False), config)
  export_outputs = getattr(spec, 'export_outputs', None) or {}
  output = export_outputs.get(SERVING_SIGNATURE)
  if output is None and len(export_outputs) == 1:
    output = list(export_outputs.values())[0]
  if output is None:
    predictions = getattr(spec, 'predictions', None)
    if isinstance(predictions, Mapping):
      return tuple(sorted(predictions))
    return ('output',) if predictions is not None else ()
  return tuple(sorted(output.outputs))


def prediction_key(outputs: Sequence[str], override: Optional[str],
                   module_file: str) -> Optional[str]:
  """The key the Evaluator reads: the override, else TFMA's first.

  Raises:
    EvaluatorKeyError: naming the module's outputs.
  """
  if override is not None:
    if outputs and override not in outputs:
      raise EvaluatorKeyError(
          f'--eval-prediction-key {override!r} is not an output of the '
          f"{SERVING_SIGNATURE} signature of {module_file} (outputs: "
          f'{list(outputs)}).')
    return override
  for key in TFMA_PREDICTION_KEYS:
    if key in outputs:
      return key
  if len(outputs) == 1:
    return outputs[0]
  raise EvaluatorKeyError(
      f'The {SERVING_SIGNATURE} signature of {module_file} has the outputs '
      f'{list(outputs)}, none of which the Evaluator (TFMA) reads by itself '
      f'({", ".join(TFMA_PREDICTION_KEYS)}), so the run would fail at the '
      'Evaluator after training. Name the model\'s prediction with '
      '--eval-prediction-key (e.g. --eval-prediction-key '
      f'{outputs[0] if outputs else "probabilities"}), or rename the output '
      'to probabilities (the Keras output layer\'s name, or the key in '
      'model_fn\'s predictions / export_outputs).')


def evaluator_options(trainer_module_file: str,
                      preprocessing_module_file: str, data_root: str,
                      custom_config: Mapping[str, Any],
                      label_override: Optional[str] = None,
                      prediction_override: Optional[str] = None
                     ) -> Dict[str, Any]:
  """The taxi pipeline's Evaluator options for these modules (run, compile).

  Both keys given: taken as they are, nothing traced. Else traced from the
  modules (`evaluator_keys`).

  Returns:
    `TaxiPipelineOptions` fields: eval_label_key, eval_prediction_key,
    eval_preprocessing_function_names.

  Raises:
    EvaluatorKeyError: as `evaluator_keys`, or the data cannot be read.
    TPUTrainerError: a module fails to load or to build.
  """
  if label_override and prediction_override:
    keys = EvaluatorKeys(
        label_key=label_override, prediction_key=prediction_override,
        preprocessing_function_names=(TRANSFORM_FEATURES_SIGNATURE,))
  else:
    keys = evaluator_keys(trainer_module_file, preprocessing_module_file,
                          data_root, custom_config, label_override,
                          prediction_override)
  return dict(eval_label_key=keys.label_key,
              eval_prediction_key=keys.prediction_key,
              eval_preprocessing_function_names=(
                  keys.preprocessing_function_names))


def evaluator_keys(trainer_module_file: str, preprocessing_module_file: str,
                   data_root: str, custom_config: Mapping[str, Any],
                   label_override: Optional[str] = None,
                   prediction_override: Optional[str] = None
                  ) -> EvaluatorKeys:
  """The Evaluator's label and prediction keys for a trainer module.

  Raises:
    EvaluatorKeyError: no label key, a label the transform does not
      produce, or no prediction TFMA can read.
    TPUTrainerError: the module fails to load or to build.
  """
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import prepare  # pylint: disable=g-import-not-at-top
  module = user_module.load_user_module({'module_file': trainer_module_file})
  features = transformed_features(preprocessing_module_file, data_root)
  label = prepare.label_key_for(
      label_override or custom_config.get('label_key'), module, features)
  if label is None:
    raise EvaluatorKeyError(
        f'No label key for the Evaluator: {trainer_module_file} has no '
        "LABEL_KEY; pass --eval-label-key (the transformed label, one of "
        f'{sorted(features)}).')
  if label not in features:
    raise EvaluatorKeyError(
        f'The Evaluator\'s label {label!r} is not an output of the '
        f'preprocessing_fn of {preprocessing_module_file} (outputs: '
        f'{sorted(features)}); pass --eval-label-key.')
  if module.trainer_fn is not None or module.run_fn is not None:
    outputs = ()
    key = prediction_override
  else:
    config = config_lib.TrainerConfig.from_custom_config(
        {k: v for k, v in custom_config.items() if k != 'use_tpu'},
        environ={})
    params = prepare.build_params(config, None)
    outputs = serving_outputs(module, {k: v for k, v in features.items()
                                       if k != label}, params)
    key = prediction_key(outputs, prediction_override, trainer_module_file)
  return EvaluatorKeys(
      label_key=label, prediction_key=key,
      preprocessing_function_names=(TRANSFORM_FEATURES_SIGNATURE,),
      serving_outputs=outputs)
