"""The serving input of the exported model: serialized raw `tf.Example`s."""

import os
from typing import Any, Callable, Dict, Optional

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-direct-tensorflow-import
import tensorflow_transform as tft
from tfx.dsl.io import fileio

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.publishing import serving_inputs

__all__ = ['ServingInputReceiverFn', 'make_serving_input_receiver_fn']

# The input name TF Serving's Classify/Regress APIs and TFMA feed.
EXAMPLES_INPUT_KEY = 'examples'
# The signature TFX's penguin Evaluator config names as preprocessing function.
TRANSFORM_FEATURES_SIGNATURE = 'transform_features'
# Graph collection that carries the transform_features SignatureDef from the
# serving input to `add_transform_features_signature` (then removed).
_TRANSFORM_FEATURES_COLLECTION = 'tfx_tpu_trainer_transform_features_signature'
# The optional second argument of a module's serving_input_receiver_fn.
TF_TRANSFORM_OUTPUT_ARG = 'tf_transform_output'

ServingInputReceiverFn = Callable[[], tf_estimator.export.ServingInputReceiver]


class ServingError(errors.TPUTrainerError, ValueError):
  """The serving input or its signatures cannot be built."""


def default_serving_input_receiver_fn(
    schemas: schemas_lib.ExampleSchemas,
    label_key: Optional[str],
    features: Optional[serving_inputs.ServingFeatures] = None
) -> ServingInputReceiverFn:
  """Parses the raw features the model serves on; applies the transform graph.

  Args:
    schemas: the run's schemas.
    label_key: the label (left out of the served features).
    features: what to parse (default: `serving_inputs.find_serving_features`).

  Returns:
    The serving input receiver function.
  """
  if features is None:
    features = serving_inputs.find_serving_features(schemas, label_key)
  expected = None
  if schemas.tf_transform_output is not None:
    expected = set(schemas.tf_transform_output.transformed_feature_spec())
    expected.discard(label_key)

  def serving_input_receiver_fn():
    raw_feature_spec = schemas.raw_feature_spec()
    parse_spec = {name: raw_feature_spec[name] for name in features.parsed}
    serialized = tf.compat.v1.placeholder(
        dtype=tf.string, shape=[None], name='input_example_tensor')
    served = tf.io.parse_example(serialized=serialized, features=parse_spec)
    if schemas.tf_transform_output is not None:
      served = schemas_lib.transform_raw_features(
          schemas.tf_transform_output, served)
      served.pop(label_key, None)
      missing = sorted(expected - set(served))
      if missing:
        raise ServingError(
            f'The serving input parses the raw features {list(parse_spec)} '
            f'but the transform graph needs more for {missing}. Set '
            "custom_config['raw_label_key'] to the raw label, or define "
            'serving_input_receiver_fn(params, tf_transform_output) in the '
            'module.')
      add_transform_features(schemas.tf_transform_output)
    return tf_estimator.export.ServingInputReceiver(
        served, {EXAMPLES_INPUT_KEY: serialized})

  return serving_input_receiver_fn


def make_serving_input_receiver_fn(
    schemas: Optional[schemas_lib.ExampleSchemas],
    label_key: Optional[str],
    params: Dict[str, Any],
    module_fn: Optional[user_module_lib.ModuleFunction] = None,
    features: Optional[serving_inputs.ServingFeatures] = None
) -> ServingInputReceiverFn:
  """The module's `serving_input_receiver_fn`, or the default.

  Args:
    schemas: the run's schemas (None: the preflight CLI without any).
    label_key: the label.
    params: handed to the module's function as `params`.
    module_fn: the module's `serving_input_receiver_fn(params[,
      tf_transform_output])`, or None for the default.
    features: the raw features the default parses (default: found from the
      transform graph).

  Returns:
    The serving input receiver function the export calls.
  """
  if module_fn is None:
    return default_serving_input_receiver_fn(schemas, label_key, features)
  tf_transform_output = schemas.tf_transform_output if schemas else None

  def serving_input_receiver_fn():
    kwargs = {'params': dict(params)}
    if TF_TRANSFORM_OUTPUT_ARG in module_fn.parameters:
      kwargs[TF_TRANSFORM_OUTPUT_ARG] = tf_transform_output
    receiver = module_fn(**kwargs)
    if not isinstance(receiver, (tf_estimator.export.ServingInputReceiver,
                                 tf_estimator.export.TensorServingInputReceiver)):
      raise module_fn.error(
          'must return a tf.estimator.export.ServingInputReceiver, got '
          f'{type(receiver).__name__}.')
    if tf_transform_output is not None:
      add_transform_features(tf_transform_output)
    return receiver

  return serving_input_receiver_fn


def add_transform_features(
    tf_transform_output: tft.TFTransformOutput) -> None:
  """Builds the transform_features branch in the current (export) graph.

  Serialized raw examples (all raw features, as TFX's penguin example's
  `transform_features` parses them) in, every transformed feature out. Its
  SignatureDef waits in a graph collection, which the export saves with the
  meta graph, until `add_transform_features_signature`.

  Args:
    tf_transform_output: the run's transform output.
  """
  with tf.name_scope(TRANSFORM_FEATURES_SIGNATURE):
    serialized = tf.compat.v1.placeholder(
        dtype=tf.string, shape=[None], name='examples')
    raw_features = tf.io.parse_example(
        serialized=serialized, features=tf_transform_output.raw_feature_spec())
    transformed = schemas_lib.transform_raw_features(tf_transform_output,
                                                     raw_features)
  build_info = tf.compat.v1.saved_model.utils.build_tensor_info
  signature = tf.compat.v1.saved_model.signature_def_utils.build_signature_def(
      inputs={EXAMPLES_INPUT_KEY: build_info(serialized)},
      outputs={name: build_info(tensor)
               for name, tensor in transformed.items()},
      method_name=tf.saved_model.PREDICT_METHOD_NAME)
  tf.compat.v1.add_to_collection(_TRANSFORM_FEATURES_COLLECTION,
                                 signature.SerializeToString())


def add_transform_features_signature(saved_model_dir: str) -> bool:
  """Adds `transform_features` to the `{serve}` graph of an exported model.

  Moves the SignatureDef that `add_transform_features` left in the `{serve}`
  meta graph's collections into its signatures, and drops the collection from
  every meta graph (`{serve, tpu}` keeps its signatures unchanged). A model
  whose model_fn already exports `transform_features` keeps its own.

  Args:
    saved_model_dir: the exported SavedModel (before it is moved into place).

  Returns:
    True when the signature was added.
  """
  saved_model = saved_model_utils.read_saved_model(saved_model_dir)
  added = False
  for meta_graph in saved_model.meta_graphs:
    if _TRANSFORM_FEATURES_COLLECTION not in meta_graph.collection_def:
      continue
    values = meta_graph.collection_def[
        _TRANSFORM_FEATURES_COLLECTION].bytes_list.value
    del meta_graph.collection_def[_TRANSFORM_FEATURES_COLLECTION]
    if set(meta_graph.meta_info_def.tags) != {tf.saved_model.SERVING}:
      continue
    if TRANSFORM_FEATURES_SIGNATURE in meta_graph.signature_def:
      logging.warning('The model_fn exports its own %s signature; kept.',
                      TRANSFORM_FEATURES_SIGNATURE)
      continue
    if values:
      meta_graph.signature_def[TRANSFORM_FEATURES_SIGNATURE].ParseFromString(
          values[-1])
      added = True
  with fileio.open(_saved_model_pb(saved_model_dir), 'wb') as f:
    f.write(saved_model.SerializeToString())
  if added:
    logging.info('Added the %s signature to the {serve} graph of %s.',
                 TRANSFORM_FEATURES_SIGNATURE, saved_model_dir)
  return added


def _saved_model_pb(saved_model_dir: str) -> str:
  return os.path.join(saved_model_dir, tf.saved_model.SAVED_MODEL_FILENAME_PB)
