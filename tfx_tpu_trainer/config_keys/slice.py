"""The keys of a multi-host TPU slice: the worker of each host."""

import dataclasses
from typing import Any, Tuple

from tfx_tpu_trainer.config_keys import declare
from tfx_tpu_trainer.slice import addresses

__all__ = ['SliceKeys']


def _tpu_workers(key: str, value: Any) -> Tuple[str, ...]:
  """A list of `host[:port]` worker addresses (slice/addresses.py)."""
  if value is None:
    return ()
  if not isinstance(value, (list, tuple)) or not value:
    raise declare.ConfigError(
        f'custom_config[{key!r}] must be a non-empty list of worker '
        f'addresses HOST or HOST:PORT (one per host of the slice), got '
        f'{value!r}.')
  try:
    return addresses.worker_addresses(value, f'custom_config[{key!r}]')
  except addresses.AddressError as e:
    raise declare.ConfigError(str(e)) from e


@dataclasses.dataclass(frozen=True)
class SliceKeys:
  """A multi-host TPU slice: the worker of each host.

  Attributes:
    tpu_workers: each host's TPU worker, `host:port`, in task order.
  """
  tpu_workers: Tuple[str, ...] = declare.key(
      (), check=_tpu_workers,
      shown_default='`TPU_WORKER_HOSTNAMES` when it names several hosts, '
      'else none',
      help='a multi-host slice: each host\'s TPU worker, `HOST` or '
      '`HOST:PORT`, in task order')
