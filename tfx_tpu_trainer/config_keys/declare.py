"""How a `custom_config` key is declared: a dataclass field with its check."""

import dataclasses
import json
from typing import Any, Callable, Optional

from tfx_tpu_trainer import errors

__all__ = ['ConfigError', 'CHECK', 'HELP', 'SHOWN_DEFAULT']

CHECK = 'check'  # f(key, raw value) -> the typed value, or raises ConfigError.
HELP = 'help'  # What the key does, one line (docs/reference/ shows it).
SHOWN_DEFAULT = 'shown_default'  # The default as users read it.


class ConfigError(errors.TPUTrainerError, ValueError):
  """A `custom_config` entry is unknown or has an invalid value."""


def key(default: Any = None, *, check: Callable[[str, Any], Any],
        help: str,  # pylint: disable=redefined-builtin
        shown_default: Optional[str] = None,
        default_factory: Optional[Callable[[], Any]] = None) -> Any:
  """Declares one `custom_config` key: a field of a group of keys.

  Args:
    default: the value when the key is absent (also `TrainerConfig()`'s).
    check: validates a raw value given for the key: `check(key, value)`
      returns the typed value or raises `ConfigError` naming the key.
    help: what the key does, one line (the reference table; the longer
      story goes in docs/reference/custom_config.md).
    shown_default: the default as the docs state it (default: `default`
      rendered as code).
    default_factory: for mutable defaults, instead of `default`.

  Returns:
    A `dataclasses.field` carrying the check and the help.
  """
  metadata = {CHECK: check, HELP: help,
              SHOWN_DEFAULT: shown_default if shown_default is not None
              else f'`{_as_written(default)}`'}
  if default_factory is not None:
    return dataclasses.field(default_factory=default_factory,
                             metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def _as_written(value: Any) -> str:
  """A default as a user writes it in custom_config (JSON, strings bare)."""
  return value if isinstance(value, str) else json.dumps(value)
