"""Broken for TPU: an input with a dynamic batch axis (test module).

Its input_fn makes its own data (no files) and batches without
drop_remainder, so the batch axis of every feature is None.
"""

import tensorflow as tf

from preflight_base import FLOAT_FEATURES
from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn

model_fn = make_model_fn()


def input_fn(file_pattern, data_accessor, schema, params):
  del file_pattern, data_accessor, schema
  examples = 20
  features = {name: tf.random.uniform([examples]) for name in FLOAT_FEATURES}
  labels = tf.zeros([examples], tf.int64)
  return tf.data.Dataset.from_tensor_slices((features, labels)).batch(
      params['batch_size'])
