"""Broken for TPU: a v1 summary inside the model (test module)."""

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn

model_fn = make_model_fn(summary=True)
