"""The Kubernetes API as a slice's driver uses it: the client, and what an
API failure says (a 403 is RBAC; a 404 or 422 is not)."""

import json
from typing import Any, Optional

from tfx_tpu_trainer import errors

__all__ = ['FORBIDDEN', 'NOT_FOUND', 'INVALID', 'KubeApiError', 'api_client',
           'status', 'describe_failure']

FORBIDDEN, NOT_FOUND, INVALID = 403, 404, 422


class KubeApiError(errors.TPUTrainerError, RuntimeError):
  """No Kubernetes API can be reached from here."""


def api_client() -> Any:
  """A client of this pod's cluster (its service account), else kubeconfig's.

  Raises:
    KubeApiError: neither a pod's service account nor a kubeconfig.
  """
  from kubernetes import client, config  # pylint: disable=g-import-not-at-top
  try:
    config.load_incluster_config()
    return client.ApiClient()
  except config.ConfigException as in_pod:
    try:
      return config.new_client_from_config()
    except (config.ConfigException, OSError) as from_file:
      raise KubeApiError(
          'No Kubernetes API to talk to: not in a pod with a service account '
          f'token ({in_pod}), and no kubeconfig ({from_file}).') from from_file


def status(error: BaseException) -> Optional[int]:
  """The HTTP status of an API failure (None: it never got an answer)."""
  value = getattr(error, 'status', None)
  return value if isinstance(value, int) else None


def describe_failure(error: BaseException) -> str:
  """What the API server said: `403 Forbidden: jobs.batch is forbidden: ...`.

  An error without an HTTP answer (no connection) is described by its type
  and first line.
  """
  code = status(error)
  if code is None:
    return f'{type(error).__name__}: {errors.first_line(error)}'
  message = None
  try:
    message = json.loads(getattr(error, 'body', None) or '{}').get('message')
  except (ValueError, AttributeError):
    pass
  reason = getattr(error, 'reason', None) or ''
  return f'{code} {reason}'.strip() + (f': {message}' if message else '')
