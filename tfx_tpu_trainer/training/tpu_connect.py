"""A named TPU answers, and has TPU devices, before anything is built."""

import os
import time
from typing import List, Optional

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors

__all__ = ['TPUUnreachableError', 'wait_for_tpu']

# The longest single ListDevices call of the wait: a TPU that takes longer
# to answer is asked again, until the wait ends.
_ATTEMPT_SECS = 15
# Between two attempts, after a fast failure (a closed port).
_RETRY_PAUSE_SECS = 1


class TPUUnreachableError(errors.TPUTrainerError, ConnectionError):
  """The named TPU did not answer, or answered with no TPU device."""


def tpu_devices(master: str, timeout_secs: float) -> List[str]:
  """The TPU devices the TensorFlow server at `master` lists.

  Raises:
    tf.errors.OpError: the server did not answer within `timeout_secs`
      (or answered with an error).
  """
  session_config = tf.compat.v1.ConfigProto(
      operation_timeout_in_ms=max(1, int(timeout_secs * 1000)))
  with tf.compat.v1.Session(master, graph=tf.Graph(),
                            config=session_config) as session:
    devices = session.list_devices()
  return [d.name for d in devices if d.device_type == 'TPU']


def wait_for_tpu(config: config_lib.TrainerConfig) -> Optional[str]:
  """Waits, at most `tpu_wait_secs`, until the named TPU lists TPU devices.

  Only a TPU reached over gRPC is asked (`grpc://` names, and Cloud TPU
  names once resolved); a TPU VM's own chips (`local`) and a multi-host
  slice (slice/driver.py) are checked where they are used.

  Args:
    config: the run's validated config.

  Returns:
    The master address that answered, or None when nothing was asked.

  Raises:
    TPUUnreachableError: naming the TPU, its address and what to do.
  """
  if not config.use_tpu or config.tpu is None or config.tpu_workers:
    return None
  name = config.tpu.name
  if name == 'local':
    return None
  # The variable that named the TPU, if it came from the environment.
  variable = next((v for v in (config_lib.TPU_NAME_ENV,
                               config_lib.GKE_TPU_ENDPOINTS_ENV)
                   if os.environ.get(v) == name), None)
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=name, zone=config.tpu.zone, project=config.tpu.project)
    master = resolver.master()
  except Exception as e:  # pylint: disable=broad-except
    raise TPUUnreachableError(
        f'Could not resolve TPU {name!r} (zone {config.tpu.zone!r}, project '
        f'{config.tpu.project!r}): {type(e).__name__}: {e}. '
        f'{_advice(name, variable)}') from e
  if not master.startswith('grpc://'):
    return None
  tpu = f'TPU {master}' if master == name else f'TPU {name!r} at {master}'
  deadline = time.monotonic() + config.tpu_wait_secs
  attempts = 0
  while True:
    attempts += 1
    remaining = deadline - time.monotonic()
    try:
      devices = tpu_devices(master, min(_ATTEMPT_SECS, max(remaining, 1)))
    except tf.errors.OpError as e:
      error = e
    else:
      if devices:
        logging.info('%s answered with %d TPU devices.', tpu, len(devices))
        return master
      raise TPUUnreachableError(
          f'{tpu} answers, but lists no TPU device: it '
          'is a TensorFlow server without a TPU. '
          f'{_advice(name, variable)}')
    if time.monotonic() + _RETRY_PAUSE_SECS >= deadline:
      break
    time.sleep(_RETRY_PAUSE_SECS)
  message = (error.message or str(error)).strip().splitlines()[0]
  raise TPUUnreachableError(
      f'{tpu} did not answer within '
      f"custom_config['tpu_wait_secs']={config.tpu_wait_secs:g} s "
      f'({attempts} attempt(s); last: {type(error).__name__}: {message}), so '
      f'training did not start. {_advice(name, variable)} A TPU '
      "that takes longer to come up: raise custom_config['tpu_wait_secs'].")


def _advice(name: str, variable: Optional[str]) -> str:
  """What to do about a TPU that cannot be used."""
  source = (f'{variable}={name} in the environment' if variable
            else "custom_config['tpu']")
  return (f'The TPU comes from {source}. Check that the TPU is READY '
          '(`gcloud compute tpus describe NAME --zone ZONE`) and that this '
          'machine reaches its address; to train without it, '
          + (f'unset {variable} or ' if variable else '') +
          "set custom_config['use_tpu']=False (`run --no-use-tpu`).")
