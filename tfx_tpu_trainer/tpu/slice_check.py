"""`tpu-check` for a multi-host slice: every host's worker answers and lists its
TPU, the TPU system initialises across them, or the host is named."""

import dataclasses
import time
from typing import Dict, List, Sequence

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import tpu_slice

__all__ = ['JOB', 'SliceCheckError', 'HostReport', 'list_hosts',
           'initialize_tpu_system', 'check_slice']

JOB = tpu_slice.JOB_NAME


class SliceCheckError(errors.TPUTrainerError, RuntimeError):
  """A host of the slice did not answer, or has no TPU."""


@dataclasses.dataclass(frozen=True)
class HostReport:
  """What one worker of the slice showed."""
  task: int
  address: str
  devices: List[str]

  @property
  def tpu_devices(self) -> List[str]:
    return [d for d in self.devices if '/device:TPU:' in d]

  def line(self) -> str:
    kinds: Dict[str, int] = {}
    for device in self.devices:
      kind = device.split('/device:')[-1].split(':')[0]
      kinds[kind] = kinds.get(kind, 0) + 1
    listed = ', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))
    return f'worker {self.task} ({self.address}): {listed}'


def list_hosts(addresses: Sequence[str]) -> List[HostReport]:
  """Every worker's devices, seen from one session of the slice."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  args = tpu_slice.run_config_args(True, addresses)
  config = args['session_config']
  config.operation_timeout_in_ms = tpu_slice.SIGNAL_TIMEOUT_SECS * 1000 * 6
  with tf.compat.v1.Session(args['master'], graph=tf.Graph(),
                            config=config) as session:
    devices = [d.name for d in session.list_devices()]
  return [HostReport(task, address,
                     [d for d in devices if f'/job:{JOB}/replica:0/task:{task}/'
                      in d + '/'])
          for task, address in enumerate(addresses)]


def initialize_tpu_system(addresses: Sequence[str]) -> str:
  """Initialises the TPU system across the slice; returns its topology line."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  args = tpu_slice.run_config_args(True, addresses)
  graph = tf.Graph()
  with graph.as_default():
    init = tf.compat.v1.tpu.initialize_system()
  with tf.compat.v1.Session(args['master'], graph=graph,
                            config=args['session_config']) as session:
    serialized = session.run(init)
  topology = tf.tpu.experimental.Topology(serialized=serialized)
  return (f'TPU system: {topology.num_tasks} hosts x '
          f'{topology.num_tpus_per_task} TPU devices, mesh '
          f'{list(topology.mesh_shape)}')


def check_slice(addresses: Sequence[str], wait_secs: float,
                require_tpu: bool = True) -> List[str]:
  """Runs the checks; returns one line per host (and the TPU system).

  Raises:
    SliceCheckError: naming the host that did not answer or has no TPU.
  """
  start = time.monotonic()
  links = [tpu_slice.WorkerLink(t, a) for t, a in enumerate(addresses)]
  try:
    tpu_slice.wait_for_workers(links, wait_secs)
  except tpu_slice.SliceError as e:
    raise SliceCheckError(f'tpu-check of the slice: {e}') from e
  finally:
    for link in links:
      link.close()
  hosts = list_hosts(addresses)
  silent = [h for h in hosts if not h.devices]
  if silent:
    raise SliceCheckError(
        'tpu-check of the slice: ' + '; '.join(
            f'worker {h.task} ({h.address}) listed no devices' for h in silent)
        + ' in the slice\'s session: is each address its own worker?')
  lines = [h.line() for h in hosts]
  if require_tpu:
    without = [h for h in hosts if not h.tpu_devices]
    if without:
      raise SliceCheckError(
          'tpu-check of the slice: no TPU on ' + '; '.join(
              h.line() for h in without) + '. The worker pod must run on the '
          'slice\'s TPU node in the TPU image.')
    lines.append(initialize_tpu_system(addresses))
  lines.append(f'{len(hosts)} hosts answered in '
               f'{time.monotonic() - start:.1f} s')
  return lines
