"""Broken for TPU: a float64 tensor in the model (test module).

XLA on CPU compiles float64; a TPU has none.
"""

import tensorflow as tf

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn


def _scale_in_float64(logits, features):
  del features
  return tf.cast(tf.cast(logits, tf.float64) * 0.5, tf.float32)


model_fn = make_model_fn(forward=_scale_in_float64)
