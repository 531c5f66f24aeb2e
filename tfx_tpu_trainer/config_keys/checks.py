"""The checks of `custom_config` values: each returns the typed value or
raises `ConfigError` naming the key and what it accepts."""

import math
import re
from typing import Any, Optional

from tfx_tpu_trainer.config_keys import declare

__all__ = ['MAX_INT64', 'is_uri']

# The largest value of a TensorFlow int64 (step counters, batch sizes).
MAX_INT64 = 2**63 - 1


def boolean(key: str, value: Any) -> bool:
  """`value` if true or false."""
  if not isinstance(value, bool):
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be true or false, got {value!r}.')
  return value


def positive_int(key: str, value: Any,
                  accepted: str = 'a positive integer') -> int:
  """`value` if a positive int64, else an error saying what is `accepted`."""
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be {accepted}, got {value!r}.')
  check_int64(key, value)
  return value


def check_int64(key: str, value: int) -> None:
  """Raises unless `value` fits TensorFlow's int64."""
  # TensorFlow holds sizes and steps in int64; a larger Python int passes
  # every other check and fails deep inside TensorFlow instead.
  if value > MAX_INT64:
    raise declare.ConfigError(
        f'custom_config[{key!r}]={value} is too large: TensorFlow holds it '
        f'in a 64-bit integer, so it must be at most {MAX_INT64}.')


def optional_positive_int(key: str, value: Any) -> Optional[int]:
  """None, or a positive int64."""
  return None if value is None else positive_int(key, value)


def optional_positive_number(key: str, value: Any) -> Optional[float]:
  """None, or a finite number > 0 as a float."""
  if value is None:
    return None
  if (isinstance(value, bool) or not isinstance(value, (int, float)) or
      not math.isfinite(value) or value <= 0):
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be a positive number, got {value!r}.')
  return float(value)


def optional_non_negative_int(key: str, value: Any,
                               meaning: str = '0: keep all') -> Optional[int]:
  """None, or an int64 >= 0 (`meaning`: what 0 means, for the error)."""
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be an integer >= 0 ({meaning}), got '
        f'{value!r}.')
  check_int64(key, value)
  return value


def optional_str(key: str, value: Any) -> Optional[str]:
  """None, or a non-empty string."""
  if value is not None and (not isinstance(value, str) or not value):
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be a non-empty string, got {value!r}.')
  return value


def choice(key: str, value: Any, accepted: tuple) -> Any:  # pylint: disable=g-bare-generic
  """`value` if one of `accepted`."""
  if isinstance(value, bool) or value not in accepted:
    raise declare.ConfigError(
        f'custom_config[{key!r}]={value!r} is not accepted; use one of '
        f'{list(accepted)}.')
  return value


def is_uri(path: str) -> bool:
  """True for `scheme://...` paths (gs://, s3://, hdfs://, ...)."""
  return re.match(r'^[A-Za-z][A-Za-z0-9+.-]*://', path) is not None
