"""The addresses of a slice's workers: `host[:port]` parsed, checked, listed."""

import re
from typing import Any, List, Mapping, Tuple

from tfx_tpu_trainer import errors

__all__ = ['TPU_WORKER_PORT', 'TPU_WORKER_HOSTNAMES_ENV', 'AddressError',
           'hostnames', 'worker_addresses']

# The port of a TPU worker server (driver.py).
TPU_WORKER_PORT = 8470
# The hosts of a multi-host slice, comma-separated (GKE sets it on TPU pods).
TPU_WORKER_HOSTNAMES_ENV = 'TPU_WORKER_HOSTNAMES'
_HOST = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$')
# ASCII digits only: str.isdigit() takes '²' and other digits int() refuses.
_PORT = re.compile(r'^[0-9]{1,5}$')
# What a list of hosts is written with instead of commas.
_SEPARATOR = re.compile(r'[;|\s]+')


class AddressError(errors.TPUTrainerError, ValueError):
  """A worker address is malformed or named twice."""


def hostnames(environ: Mapping[str, str]) -> List[str]:
  """The hosts `TPU_WORKER_HOSTNAMES` names (GKE sets it on TPU pods)."""
  return [h.strip() for h in environ.get(TPU_WORKER_HOSTNAMES_ENV, '').split(',')
          if h.strip()]


def worker_address(text: Any, where: str) -> str:
  """`host` or `host:port` (or `grpc://host:port`) as `host:port`.

  Raises:
    AddressError: naming `where` and the accepted form.
  """
  accepted = ('a worker address is HOST or HOST:PORT (e.g. '
              f'trainer-workers-0.trainer-workers:{TPU_WORKER_PORT}); PORT '
              f'defaults to {TPU_WORKER_PORT}.')
  if not isinstance(text, str):
    raise AddressError(f'{where}: {text!r} is not a string; {accepted}')
  address = text.strip()
  if address.startswith('grpc://'):
    address = address[len('grpc://'):]
  host, sep, port = address.rpartition(':')
  if not sep:
    host, port = address, str(TPU_WORKER_PORT)
  if not _HOST.match(host) or not _PORT.match(port) or not (
      0 < int(port) < 65536):
    separator = _SEPARATOR.search(address)
    hint = (f' Separate the hosts with commas, not {separator.group()!r}.'
            if separator else '')
    raise AddressError(
        f'{where}: {text!r} is not a worker address; {accepted}{hint}')
  return f'{host}:{int(port)}'


def worker_addresses(values: Any, where: str) -> Tuple[str, ...]:
  """Every address parsed (`worker_address`); a repeated one refused.

  Raises:
    AddressError: naming `where` and the bad or repeated address.
  """
  addresses = tuple(worker_address(v, where) for v in values)
  repeated = sorted({a for a in addresses if addresses.count(a) > 1})
  if repeated:
    raise AddressError(f'{where} names {", ".join(repeated)} more than once: '
                       'each host of the slice runs one worker.')
  return addresses
