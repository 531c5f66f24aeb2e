"""Broken for TPU: a scalar eval metric tensor (no batch axis) (test module)."""

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn

model_fn = make_model_fn(scalar_metric=True)
