"""Broken for TPU: a string op on the device (test module)."""

import tensorflow as tf

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn


def _round_trip_through_strings(logits, features):
  del features
  return logits + 0.0 * tf.strings.to_number(tf.strings.as_string(logits))


model_fn = make_model_fn(forward=_round_trip_through_strings)
