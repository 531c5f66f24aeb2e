"""Broken for TPU: the optimizer is not wrapped in CrossShardOptimizer."""

from preflight_base import LABEL_KEY  # pylint: disable=unused-import
from preflight_base import make_model_fn

model_fn = make_model_fn(cross_shard=False)
