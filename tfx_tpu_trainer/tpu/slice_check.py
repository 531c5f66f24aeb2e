"""`tpu-check` for a multi-host slice: every host's worker answers and lists its
TPU, the TPU system initialises across them, or the host is named."""

import dataclasses
import time
from typing import Callable, Dict, List, Optional, Sequence

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


def list_hosts(addresses: Sequence[str],
               timeout_secs: float = tpu_slice.SIGNAL_TIMEOUT_SECS * 6
              ) -> List[HostReport]:
  """Every worker's devices, seen from one session of the slice."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  args = tpu_slice.run_config_args(True, addresses)
  config = args['session_config']
  config.operation_timeout_in_ms = int(timeout_secs * 1000)
  with tf.compat.v1.Session(args['master'], graph=tf.Graph(),
                            config=config) as session:
    devices = [d.name for d in session.list_devices()]
  return [HostReport(task, address,
                     [d for d in devices if f'/job:{JOB}/replica:0/task:{task}/'
                      in d + '/'])
          for task, address in enumerate(addresses)]


def initialize_tpu_system(addresses: Sequence[str],
                          timeout_secs: float) -> str:
  """Initialises the TPU system across the slice; returns its topology line."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  args = tpu_slice.run_config_args(True, addresses)
  graph = tf.Graph()
  with graph.as_default():
    init = tf.compat.v1.tpu.initialize_system()
  config = args['session_config']
  config.operation_timeout_in_ms = int(timeout_secs * 1000)
  with tf.compat.v1.Session(args['master'], graph=graph,
                            config=config) as session:
    serialized = session.run(init)
  topology = tf.tpu.experimental.Topology(serialized=serialized)
  return (f'TPU system: {topology.num_tasks} hosts x '
          f'{topology.num_tpus_per_task} TPU devices, mesh '
          f'{list(topology.mesh_shape)}')


def _silent_hosts(links: Sequence[tpu_slice.WorkerLink]) -> str:
  """`; worker i (...): why` for each worker that does not answer now."""
  silent = [(link, link.send(tpu_slice.ALIVE)) for link in links]
  return ''.join(f'; {link.describe()} does not answer: {reason}'
                 for link, reason in silent if reason)


def _across_the_slice(what: str, links: Sequence[tpu_slice.WorkerLink],
                      run: Callable[[], object]):
  """`run()`; an error names the step and the workers that stopped answering."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    return run()
  except tf.errors.OpError as e:
    raise SliceCheckError(
        f'tpu-check of the slice: {what} failed '
        f'({tpu_slice.describe_error(e)}){_silent_hosts(links)}.') from e


def check_slice(addresses: Sequence[str], wait_secs: float,
                require_tpu: bool = True,
                report: Optional[Callable[[str], None]] = None,
                wait_set_by: str = '--timeout') -> List[str]:
  """Runs the checks; returns one line per host (and the TPU system).

  The wait for the workers says whom it waits for and until when
  (`report`); a host name that does not resolve fails at once.

  Raises:
    SliceCheckError: naming the host that did not answer or has no TPU.
  """
  start = time.monotonic()
  links = [tpu_slice.WorkerLink(t, a) for t, a in enumerate(addresses)]
  try:
    tpu_slice.wait_for_workers(links, wait_secs, wait_set_by=wait_set_by,
                               report=report or (lambda line: None),
                               names_must_resolve=True)
    hosts = _across_the_slice('listing the devices of the slice', links,
                              lambda: list_hosts(addresses))
    lines = _host_lines(hosts, require_tpu)
    if require_tpu:
      lines.append(_across_the_slice(
          'initialising the TPU system', links,
          lambda: initialize_tpu_system(addresses, wait_secs)))
  except tpu_slice.SliceError as e:
    raise SliceCheckError(f'tpu-check of the slice: {e}') from e
  finally:
    for link in links:
      link.close()
  lines.append(f'{len(hosts)} hosts answered in '
               f'{time.monotonic() - start:.1f} s')
  return lines


def _host_lines(hosts: Sequence[HostReport], require_tpu: bool) -> List[str]:
  silent = [h for h in hosts if not h.devices]
  if silent:
    raise SliceCheckError(
        'tpu-check of the slice: ' + '; '.join(
            f'worker {h.task} ({h.address}) listed no devices' for h in silent)
        + ' in the slice\'s session: is each address its own worker?')
  if require_tpu:
    without = [h for h in hosts if not h.tpu_devices]
    if without:
      raise SliceCheckError(
          'tpu-check of the slice: no TPU on ' + '; '.join(
              h.line() for h in without) + '. The worker pod must run on the '
          'slice\'s TPU node in the TPU image.')
  return [h.line() for h in hosts]
