"""Broken for TPU: a data-dependent shape (tf.unique) in the model.

XLA on CPU compiles tf.unique (with a bounded shape); the preflight names it.
"""

import tensorflow as tf

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn


def _add_distinct_fares(logits, features):
  distinct_fares, _ = tf.unique(tf.reshape(features['fare_xf'], [-1]))
  return logits + tf.reduce_sum(distinct_fares)


model_fn = make_model_fn(forward=_add_distinct_fares)
