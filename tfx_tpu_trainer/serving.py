"""The serving input of the exported model: serialized raw `tf.Example`s."""

from typing import Any, Callable, Dict, Optional

import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import schemas as schemas_lib
from tfx_tpu_trainer import user_module as user_module_lib

# The input name TF Serving's Classify/Regress APIs and TFMA feed.
EXAMPLES_INPUT_KEY = 'examples'

ServingInputReceiverFn = Callable[[], tf_estimator.export.ServingInputReceiver]


def default_serving_input_receiver_fn(
    schemas: schemas_lib.ExampleSchemas,
    label_key: Optional[str]) -> ServingInputReceiverFn:
  """Parses serialized raw examples and applies the transform graph if any."""

  def serving_input_receiver_fn():
    raw_feature_spec = schemas.raw_feature_spec()
    raw_feature_spec.pop(label_key, None)
    serialized = tf.compat.v1.placeholder(
        dtype=tf.string, shape=[None], name='input_example_tensor')
    features = tf.io.parse_example(
        serialized=serialized, features=raw_feature_spec)
    if schemas.tf_transform_output is not None:
      features = schemas.tf_transform_output.transform_raw_features(features)
      features.pop(label_key, None)
    return tf_estimator.export.ServingInputReceiver(
        features, {EXAMPLES_INPUT_KEY: serialized})

  return serving_input_receiver_fn


def make_serving_input_receiver_fn(
    schemas: schemas_lib.ExampleSchemas,
    label_key: Optional[str],
    params: Dict[str, Any],
    module_fn: Optional[user_module_lib.ModuleFunction] = None
) -> ServingInputReceiverFn:
  """The module's `serving_input_receiver_fn(params)`, or the default."""
  if module_fn is None:
    return default_serving_input_receiver_fn(schemas, label_key)

  def serving_input_receiver_fn():
    receiver = module_fn(params=dict(params))
    if not isinstance(receiver, (tf_estimator.export.ServingInputReceiver,
                                 tf_estimator.export.TensorServingInputReceiver)):
      raise module_fn.error(
          'must return a tf.estimator.export.ServingInputReceiver, got '
          f'{type(receiver).__name__}.')
    return receiver

  return serving_input_receiver_fn
