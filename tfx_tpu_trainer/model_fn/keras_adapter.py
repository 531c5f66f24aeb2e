"""A TPU model_fn built from a module's compiled Keras model."""

import concurrent.futures
import contextlib
import dataclasses
from typing import Any, Dict, Iterator, List, Mapping, Optional

import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import checked
from tfx_tpu_trainer.model_fn import keras_compile
from tfx_tpu_trainer.model_fn import sparse_columns

__all__ = ['KerasModelError', 'ModelFn', 'SERVING_SIGNATURE', 'KerasTemplate',
           'BFLOAT16_PARAM', 'MIXED_BFLOAT16', 'bfloat16_policy',
           'build_template', 'conform', 'conform_features',
           'make_keras_model_fn']

KerasModelError = keras_compile.KerasModelError
ModelFn = checked.ModelFn
SERVING_SIGNATURE = 'serving_default'
# The param that asks for bfloat16 (custom_config['bfloat16']), and the Keras
# policy a Keras model is then built under.
BFLOAT16_PARAM = 'use_bfloat16'
MIXED_BFLOAT16 = 'mixed_bfloat16'


@dataclasses.dataclass(frozen=True)
class KerasTemplate:
  """A model built eagerly by build_keras_model, and its compile settings."""
  model: tf.keras.Model
  compile_spec: keras_compile.CompileSpec

  @property
  def input_names(self) -> List[str]:
    return list(self.model.input_names)

  @property
  def output_names(self) -> List[str]:
    return list(self.model.output_names)


def build_template(build_keras_model: user_module_lib.ModuleFunction,
                   params: Mapping[str, Any]) -> KerasTemplate:
  """Calls `build_keras_model(params)` eagerly and reads its compile settings.

  It runs on a helper thread, which executes eagerly whatever graph the
  calling thread is building.

  Args:
    build_keras_model: the module's function.
    params: what the model_fn received.

  Returns:
    The template.

  Raises:
    KerasModelError: when the function fails or returns no usable model.
  """

  def build():
    tf.keras.backend.reset_uids()
    with bfloat16_policy(bool(params.get(BFLOAT16_PARAM))):
      model = build_keras_model(params=dict(params))
    if not isinstance(model, tf.keras.Model):
      raise KerasModelError(
          'must return a compiled tf.keras Model, got '
          f'{type(model).__name__}.')
    if not model.inputs or not model.output_names:
      raise KerasModelError(
          f'the model ({type(model).__name__}) has no symbolic inputs and '
          'outputs (a subclassed model?). The TPU model_fn rebuilds the model '
          'inside the estimator graph with tf.keras.models.clone_model, which '
          'needs a functional or Sequential model with tf.keras.Input layers.')
    return KerasTemplate(model, keras_compile.read_compile_spec(model))

  with build_keras_model.blamed(), concurrent.futures.ThreadPoolExecutor(
      max_workers=1, thread_name_prefix='build_keras_model') as pool:
    return pool.submit(build).result()


@contextlib.contextmanager
def bfloat16_policy(enabled: bool) -> Iterator[None]:
  """Keras layers built in the block compute in bfloat16 when `enabled`.

  The `mixed_bfloat16` policy (variables float32, math bfloat16) is the
  global Keras policy while the block runs; the one before is restored.
  """
  if not enabled:
    yield
    return
  before = tf.keras.mixed_precision.global_policy()
  tf.keras.mixed_precision.set_global_policy(MIXED_BFLOAT16)
  try:
    yield
  finally:
    tf.keras.mixed_precision.set_global_policy(before)


def _float32_outputs(outputs: List[tf.Tensor]) -> List[tf.Tensor]:
  """bfloat16 outputs as float32, for the loss, the metrics and serving."""
  return [tf.cast(output, tf.float32) if output.dtype == tf.bfloat16
          else output for output in outputs]


def _clone_in_graph(template: KerasTemplate) -> tf.keras.Model:
  """Rebuilds the template's architecture in the current graph.

  Outside any control-flow (TPU) context: the clone's `Input` placeholders
  and its symbolic pass stay in the host graph, unused.
  """
  with tf.control_dependencies(None):
    try:
      return tf.keras.models.clone_model(template.model)
    except Exception as e:  # pylint: disable=broad-except
      raise KerasModelError(
          'the model '
          f'({type(template.model).__name__}) cannot be rebuilt with '
          f'tf.keras.models.clone_model: {e} The TPU model_fn rebuilds the '
          'model inside the estimator graph: use a functional or Sequential '
          'model (custom layers need get_config).') from e


def _castable(dtype: tf.DType) -> bool:
  return dtype.is_floating or dtype.is_integer or dtype.is_bool


def conform(tensor: tf.Tensor, shape: tf.TensorShape, dtype: tf.DType,
            what: str) -> tf.Tensor:
  """`tensor` reshaped ([batch] <-> [batch, 1]) and cast to shape/dtype.

  Args:
    tensor: a feature (or label) tensor.
    shape: the Keras input's shape.
    dtype: the Keras input's dtype.
    what: how errors name the tensor (e.g. "Feature 'fare'").

  Returns:
    The tensor as the input takes it.

  Raises:
    KerasModelError: a sparse tensor, or a shape or dtype that cannot fit.
  """
  if isinstance(tensor, (tf.sparse.SparseTensor, tf.RaggedTensor)):
    raise KerasModelError(
        f'{what} is a {type(tensor).__name__}; the Keras TPU model_fn takes '
        f'dense features. Densify it in the preprocessing_fn.')
  rank, expected = tensor.shape.rank, shape.rank
  if rank is not None and expected is not None and rank != expected:
    if rank + 1 == expected and shape[-1] == 1:
      tensor = tf.expand_dims(tensor, -1)
    elif rank == expected + 1 and tensor.shape[-1] == 1:
      tensor = tf.squeeze(tensor, -1)
    else:
      raise KerasModelError(
          f'{what} has shape {tensor.shape}, which does not fit the model '
          f'input shape {shape}.')
  if (rank is not None and expected is not None and
      not tensor.shape[1:].is_compatible_with(shape[1:])):
    raise KerasModelError(
        f'{what} has shape {tensor.shape}, which does not fit the model '
        f'input shape {shape}.')
  if tensor.dtype != dtype:
    if not (_castable(tensor.dtype) and _castable(dtype)):
      raise KerasModelError(
          f'{what} has dtype {tensor.dtype.name}, the model input takes '
          f'{dtype.name}.')
    tensor = tf.cast(tensor, dtype)
  return tensor


def conform_features(model: tf.keras.Model,
                     features: Mapping[str, Any]) -> Dict[str, tf.Tensor]:
  """Each model input's feature, conformed to the input (`conform`)."""
  return {name: conform(tf.convert_to_tensor(features[name]),
                        keras_input.shape, keras_input.dtype,
                        f'Feature {name!r}')
          for name, keras_input in zip(model.input_names, model.inputs)}


def _model_inputs(template: KerasTemplate, features: Any):
  """The features in the order of the model's inputs."""
  model = template.model
  if not isinstance(features, Mapping):
    if len(model.inputs) != 1:
      raise KerasModelError(
          'the input gives one feature tensor, but the Keras model '
          f'has inputs {template.input_names}; give a dict of '
          'features named like the inputs.')
    features = {template.input_names[0]: features}
  inputs = []
  for name, keras_input in zip(template.input_names, model.inputs):
    if name not in features:
      raise KerasModelError(
          f'the Keras model has input '
          f'{name!r}, which is not a feature (features: {sorted(features)}). '
          'Name each tf.keras.Input after the feature it reads.')
    inputs.append(
        conform(features[name], keras_input.shape, keras_input.dtype,
                f'Feature {name!r}'))
  return inputs[0] if len(inputs) == 1 else inputs


def _labels_by_output(
    labels: Any, predictions: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """One label tensor per model output, shaped like the output."""
  if labels is None:
    raise KerasModelError(
        'the input gives no labels; training the Keras model '
        "needs them (set LABEL_KEY or custom_config['label_key']).")
  names = list(predictions)
  if isinstance(labels, Mapping):
    missing = [name for name in names if name not in labels]
    if len(names) == 1 and missing and len(labels) == 1:
      labels = {names[0]: next(iter(labels.values()))}
    elif missing:
      raise KerasModelError(
          f'The labels {sorted(labels)} do not name the Keras model outputs '
          f'{missing}; key the labels by output name.')
  elif len(names) == 1:
    labels = {names[0]: labels}
  else:
    raise KerasModelError(
        f'the Keras model has outputs {names} but the input '
        'gives one label tensor; give a dict of labels keyed by output name.')
  conformed = {}
  for name in names:
    label, prediction = labels[name], predictions[name]
    if (label.shape.rank is not None and prediction.shape.rank is not None and
        label.shape.rank + 1 == prediction.shape.rank and
        prediction.shape[-1] == 1):
      label = tf.expand_dims(label, -1)
    conformed[name] = label
  return conformed


def _eval_metrics(metrics, labels: Mapping[str, tf.Tensor],
                  predictions: Mapping[str, tf.Tensor]):
  """`(metric_fn, tensors)`: the compiled metrics, computed on the host."""
  if not metrics:
    return None
  tensors = {}
  keys = {}
  for index, name in enumerate(predictions):
    if any(spec.output_name == name for spec in metrics):
      keys[name] = (f'label_{index}', f'prediction_{index}')
      tensors[keys[name][0]] = labels[name]
      tensors[keys[name][1]] = predictions[name]

  def metric_fn(**host_tensors):
    return {
        spec.name: spec.build(host_tensors[keys[spec.output_name][0]],
                              host_tensors[keys[spec.output_name][1]])
        for spec in metrics
    }

  return metric_fn, tensors


def _created_after(items, ops_before) -> list:  # pylint: disable=g-bare-generic
  """The tensors/ops in `items` created after the `ops_before` snapshot."""
  return [
      item for item in items
      if (item if isinstance(item, tf.Operation) else item.op) not in ops_before
  ]


def make_keras_model_fn(
    build_keras_model: user_module_lib.ModuleFunction,
    prediction_keys: Optional[Mapping[str, str]] = None) -> ModelFn:
  """Builds the TPU model_fn of a module's `build_keras_model(params)`.

  Args:
    build_keras_model: returns a compiled functional or Sequential tf.keras
      model; it gets the model_fn's params (batch_size, use_tpu, ...).
    prediction_keys: the served name of a model output, by output name
      (default: the output's own name).

  Returns:
    `model_fn(features, labels, mode, params)` returning TPUEstimatorSpec.
  """

  templates = {}

  def model_fn(features, labels, mode, params):
    with build_keras_model.blamed():
      key = _params_key(params)
      if key not in templates:
        templates[key] = build_template(build_keras_model, params)
      if params.get('use_tpu'):
        _check_for_tpu(templates[key])
      return _keras_model_fn(templates[key], features, labels, mode, params,
                             prediction_keys or {})

  return model_fn


def _check_for_tpu(template: KerasTemplate) -> None:
  """Names the DenseFeatures columns a TPU cannot run, as the root cause."""
  columns = sparse_columns.dense_features_columns(template.model)
  if columns:
    raise KerasModelError(sparse_columns.dense_features_message(columns))


def _params_key(params: Mapping[str, Any]) -> tuple:  # pylint: disable=g-bare-generic
  """Equal for params that give build_keras_model the same values."""
  return tuple(sorted((str(name), repr(value))
                      for name, value in params.items()))


def _keras_model_fn(template: KerasTemplate, features, labels, mode, params,
                    prediction_keys: Mapping[str, str]):
  """The TPUEstimatorSpec of one estimator graph (see make_keras_model_fn)."""
  model = _clone_in_graph(template)
  inputs = _model_inputs(template, features)
  ops_before = set(tf.compat.v1.get_default_graph().get_operations())
  try:
    outputs = model(inputs, training=mode == tf_estimator.ModeKeys.TRAIN)
  except Exception as e:  # pylint: disable=broad-except
    raise KerasModelError(
        'calling the Keras model on the features failed in '
        f'mode {mode!r}: {type(e).__name__}: {e}') from e
  if not isinstance(outputs, (list, tuple)):
    outputs = [outputs]
  predictions = dict(zip(template.output_names, _float32_outputs(outputs)))

  if mode == tf_estimator.ModeKeys.PREDICT:
    served = {prediction_keys.get(name, name): tensor
              for name, tensor in predictions.items()}
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode,
        predictions=served,
        export_outputs={
            SERVING_SIGNATURE: tf_estimator.export.PredictOutput(served)
        })

  compile_spec = template.compile_spec
  if compile_spec.loss is None:
    raise KerasModelError(
        'returned a model that is not compiled; call model.compile('
        'optimizer=..., loss=..., metrics=...) before returning it.')
  label_map = _labels_by_output(labels, predictions)
  loss = compile_spec.loss.build(label_map, predictions)
  regularization = _created_after(model.losses, ops_before)
  if regularization:
    loss += tf.add_n([tf.cast(r, loss.dtype) for r in regularization])

  if mode == tf_estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode,
        loss=loss,
        eval_metrics=_eval_metrics(compile_spec.metrics, label_map,
                                   predictions))

  global_step = tf.compat.v1.train.get_or_create_global_step()
  optimizer = compile_spec.optimizer.build(global_step)
  if params.get('use_tpu'):
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  updates = _created_after(model.updates, ops_before)
  with tf.control_dependencies(updates):
    train_op = optimizer.minimize(
        loss, global_step=global_step, var_list=model.trainable_weights)
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op)
