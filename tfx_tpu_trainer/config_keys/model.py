"""The keys of what the model functions receive: params, precision, seed."""

import dataclasses
from typing import Any, Dict, Mapping, Optional

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['RESERVED_PARAMS_KEYS', 'ModelKeys']

# TPUEstimator reserves these (`batch_size`, `context`); `use_tpu` it sets
# itself in every mode, so a user value would be silently overwritten.
RESERVED_PARAMS_KEYS = ('batch_size', 'context', 'use_tpu')


def _params(value: Any) -> Dict[str, Any]:
  """`custom_config['params']`: string keys, none that TPUEstimator sets."""
  if value is None:
    return {}
  if not isinstance(value, Mapping) or not all(
      isinstance(k, str) for k in value):
    raise declare.ConfigError(
        f"custom_config['params'] must be a dict with string keys, got "
        f'{value!r}.')
  reserved = sorted(set(value) & set(RESERVED_PARAMS_KEYS))
  if reserved:
    raise declare.ConfigError(
        f"custom_config['params'] may not set {reserved}: TPUEstimator sets "
        'these itself (batch sizes come from train/eval/predict_batch_size).')
  return dict(value)


@dataclasses.dataclass(frozen=True)
class ModelKeys:
  """What the model functions receive: params, the precision, the seed.

  Attributes:
    params: merged into the `params` of model_fn and input_fn.
    bfloat16: train in bfloat16.
    tf_random_seed: the graph-level random seed.
  """
  params: Mapping[str, Any] = declare.key(
      check=lambda k, v: _params(v), default_factory=dict,
      shown_default='`{}`',
      help='merged into the `params` that model_fn/input_fn receive')
  bfloat16: bool = declare.key(
      False, check=checks.boolean,
      help='true: train in bfloat16 (`params[\'precision\']`); variables '
      'stay float32')
  tf_random_seed: Optional[int] = declare.key(
      None, check=lambda k, v: checks.optional_non_negative_int(
          k, v, 'the graph-level random seed'), shown_default='none',
      help="the graph-level random seed (RunConfig's): same seed, data and "
      'steps, same weights')
