"""Trains like linear_module, but its serving input fails (test module)."""

from linear_module import LABEL_KEY  # pylint: disable=unused-import
from linear_module import model_fn  # pylint: disable=unused-import


def serving_input_receiver_fn(params):
  del params
  raise RuntimeError('the serving signature cannot be built')
