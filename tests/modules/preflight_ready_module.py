"""The preflight base model as it is: TPU-ready (test module)."""

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn

model_fn = make_model_fn()
