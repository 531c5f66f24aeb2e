"""A multi-host TPU slice driven from this process: its workers, the wait, the
heartbeats, the done signal (docs/guide/tpu_slices.md, "Multi-host slices")."""

import contextlib
import ctypes
import os
import re
import socket
import threading
import time
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Sequence, Set, Tuple)

from absl import logging

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import cluster as cluster_lib

__all__ = ['DEFAULT_PORT', 'JOB_NAME', 'HOSTNAMES_ENV', 'WAIT_SECS_ENV',
           'DEFAULT_WAIT_SECS', 'LOST_SECS_ENV', 'DEFAULT_LOST_SECS',
           'HEARTBEAT_SECS', 'DEFAULT_DRIVER_TIMEOUT_SECS',
           'SIGNAL_TIMEOUT_SECS', 'SIGNAL_QUEUE_NAME', 'SIGNAL_QUEUE_CAPACITY',
           'LOCAL_HOSTS', 'SliceError', 'WorkerLostError', 'parse_addresses',
           'worker_addresses', 'grpc_list', 'all_on_this_machine',
           'is_local_path', 'check_shared_paths', 'check_driver',
           'check_cluster_spec', 'resolver_for', 'run_config_args',
           'signal_queue', 'WorkerLink', 'wait_for_workers', 'Heartbeats',
           'lost_workers', 'wait_secs', 'lost_secs', 'driving']

DEFAULT_PORT = config_lib.TPU_WORKER_PORT
JOB_NAME = 'worker'
HOSTNAMES_ENV = config_lib.TPU_WORKER_HOSTNAMES_ENV
# How long the driver waits for every worker to answer before training.
WAIT_SECS_ENV = 'TFX_TPU_TRAINER_WORKER_WAIT_SECS'
DEFAULT_WAIT_SECS = 600
# A worker that takes no heartbeat for this long is lost.
LOST_SECS_ENV = 'TFX_TPU_TRAINER_WORKER_LOST_SECS'
DEFAULT_LOST_SECS = 60
# The driver's heartbeat period; a worker's default driver timeout.
HEARTBEAT_SECS = 5
DEFAULT_DRIVER_TIMEOUT_SECS = 600
# One probe or signal: how long a worker may take to take it.
SIGNAL_TIMEOUT_SECS = 10
SIGNAL_QUEUE_NAME = 'tfx_tpu_trainer_driver_signals'
SIGNAL_QUEUE_CAPACITY = 1000
ALIVE, DONE = b'alive', b'done'
LOCAL_HOSTS = ('localhost', '127.0.0.1', '::1', '[::1]')
_TASK_IN_ERROR = re.compile(r'/job:' + JOB_NAME + r'/replica:\d+/task:(\d+)')


class SliceError(errors.TPUTrainerError, ValueError):
  """The slice's workers cannot be used as given."""


class WorkerLostError(SliceError):
  """A worker of the slice stopped answering."""


def parse_addresses(values: Sequence[Any], where: str) -> Tuple[str, ...]:
  """Every `host[:port]` as `host:port`; duplicates refused.

  Raises:
    SliceError: naming `where` and the bad or repeated address.
  """
  try:
    return config_lib.worker_addresses(values, where)
  except config_lib.ConfigError as e:
    raise SliceError(str(e)) from e


def worker_addresses(config: config_lib.TrainerConfig,
                     environ: Optional[Mapping[str, str]] = None
                    ) -> Tuple[str, ...]:
  """The slice's workers as `host:port`, in task order; () for one host.

  `custom_config['tpu_workers']` first, else `TPU_WORKER_HOSTNAMES` when it
  names more than one host (one host is the TPU attached to this VM).
  """
  if config.tpu_workers:
    return tuple(config.tpu_workers)
  environ = os.environ if environ is None else environ
  hosts = [h for h in environ.get(HOSTNAMES_ENV, '').split(',') if h.strip()]
  if len(hosts) < 2:
    return ()
  return parse_addresses(hosts, HOSTNAMES_ENV)


def grpc_list(addresses: Sequence[str]) -> str:
  """`grpc://h0:8470,grpc://h1:8470`: the TPU name TPUClusterResolver parses."""
  return ','.join(f'grpc://{a}' for a in addresses)


def all_on_this_machine(addresses: Sequence[str]) -> bool:
  """True when every worker runs on this machine (the CPU rehearsal)."""
  return all(a.rpartition(':')[0] in LOCAL_HOSTS for a in addresses)


def is_local_path(path: str) -> bool:
  """A path only this machine sees: no scheme, or `file://`."""
  return not config_lib.is_uri(path) or path.startswith('file://')


def check_shared_paths(addresses: Sequence[str],
                       paths: Mapping[str, Sequence[str]]) -> None:
  """Refuses local paths the remote workers would have to read or write.

  Args:
    addresses: the slice's workers.
    paths: what each path is (e.g. `train data`) -> its paths.

  Raises:
    SliceError: naming the first local path, what it is, and what to do.
  """
  if not addresses or all_on_this_machine(addresses):
    return
  for what, values in paths.items():
    for path in values:
      if path and is_local_path(path):
        raise SliceError(
            f'{what} {path!r} is a local path, but the TPU workers of this '
            f'{len(addresses)}-host slice ({", ".join(addresses)}) read the '
            'input and write the checkpoints themselves, on their own hosts, '
            'where it does not exist ("File system scheme \'[local]\' not '
            'implemented", tensorflow/tensorflow#32651). Put the pipeline '
            'root, the examples and custom_config[\'checkpoint_dir\'] on '
            'storage every host reaches (gs://...).')


def check_driver(config: config_lib.TrainerConfig,
                 paths: Mapping[str, Sequence[str]],
                 environ: Optional[Mapping[str, str]] = None) -> None:
  """Before training: a slice's driver is the only task, its paths shared.

  Args:
    config: the trainer config.
    paths: what each path is (e.g. `train data`) -> its paths.
    environ: where TF_CONFIG and TPU_WORKER_HOSTNAMES are read.

  Raises:
    SliceError: a TF_CONFIG cluster beside a slice, or a local path.
  """
  environ = os.environ if environ is None else environ
  addresses = worker_addresses(config, environ)
  if not addresses:
    return
  cluster = (cluster_lib.tf_config(environ).get('cluster') or {})
  if cluster:
    raise SliceError(
        f'TF_CONFIG names a cluster ({sorted(cluster)}) and the trainer '
        f'drives a {len(addresses)}-host TPU slice ({", ".join(addresses)}): '
        'the driver of a slice is one process. Unset TF_CONFIG for the '
        'trainer step.')
  check_shared_paths(addresses, paths)


def check_cluster_spec(resolver: Any, addresses: Sequence[str]) -> None:
  """The resolver's master is worker 0 and its `worker` job every worker."""
  spec = resolver.cluster_spec().as_dict()
  if spec.get(JOB_NAME) != list(addresses) or resolver.master() != (
      f'grpc://{addresses[0]}'):
    raise SliceError(
        f'TPUClusterResolver resolved {grpc_list(addresses)!r} to master '
        f'{resolver.master()!r} and cluster {spec}, not the slice\'s workers '
        'in order; this TensorFlow parses the worker list differently.')


def resolver_for(addresses: Sequence[str]) -> Any:
  """The TPUClusterResolver of the slice (no Cloud TPU API: a grpc list)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu=grpc_list(addresses))
  check_cluster_spec(resolver, addresses)
  return resolver


def run_config_args(use_tpu: bool,
                    addresses: Sequence[str]) -> Dict[str, Any]:
  """RunConfig arguments that drive the slice from this process.

  {} without a slice (no addresses). Else `master` (worker 0, where the
  session runs), `session_config` (the
  cluster def of every worker, each named `/job:worker/task:i`) and, off
  TPU, `device_fn` (variables over every worker, the rest on worker 0). A
  TPUClusterResolver is never passed as `cluster=`: `train_and_evaluate`
  would then take its distributed branch and never evaluate
  (tensorflow/tpu#606).
  """
  if not addresses:
    return {}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  resolver = resolver_for(addresses)
  session_config = tf.compat.v1.ConfigProto(
      allow_soft_placement=True, isolate_session_state=True)
  session_config.cluster_def.CopyFrom(resolver.cluster_spec().as_cluster_def())
  args = {'master': resolver.master(), 'session_config': session_config}
  if not use_tpu:
    args['device_fn'] = tf.compat.v1.train.replica_device_setter(
        ps_tasks=len(addresses), ps_device=f'/job:{JOB_NAME}',
        worker_device=f'/job:{JOB_NAME}/task:0', merge_devices=True,
        cluster=resolver.cluster_spec())
  return args


def signal_queue(tf: Any) -> Any:
  """The queue, on the server a session runs on, that carries the signals.

  The driver's and the worker's sessions both build it on the worker's
  server (no device: the session's own task); `shared_name` makes them one.
  """
  return tf.queue.FIFOQueue(SIGNAL_QUEUE_CAPACITY, [tf.string], shapes=[[]],
                            shared_name=SIGNAL_QUEUE_NAME,
                            name='driver_signals')


class WorkerLink:
  """The driver's own session on one worker: probes and signals it."""

  def __init__(self, task: int, address: str):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.task = task
    self.address = address
    self._graph = tf.Graph()
    with self._graph.as_default():
      self._message = tf.compat.v1.placeholder(tf.string, [])
      self._send = signal_queue(tf).enqueue([self._message])
    self._config = tf.compat.v1.ConfigProto(
        operation_timeout_in_ms=SIGNAL_TIMEOUT_SECS * 1000)
    self._session = None
    self._lock = threading.Lock()

  def describe(self) -> str:
    return f'worker {self.task} ({self.address})'

  def send(self, message: bytes) -> Optional[str]:
    """Sends `message`; None when the worker took it, else why not."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    host, _, port = self.address.rpartition(':')
    try:
      socket.create_connection((host, int(port)),
                               timeout=SIGNAL_TIMEOUT_SECS).close()
    except OSError as e:
      return f'{type(e).__name__}: {e}'
    with self._lock:
      try:
        if self._session is None:
          self._session = tf.compat.v1.Session(
              f'grpc://{self.address}', graph=self._graph, config=self._config)
        self._session.run(
            self._send, {self._message: message},
            options=tf.compat.v1.RunOptions(
                timeout_in_ms=SIGNAL_TIMEOUT_SECS * 1000))
        return None
      except tf.errors.OpError as e:
        self._close()
        return f'{type(e).__name__}: {errors.first_line(e)}'

  def _close(self) -> None:
    if self._session is not None:
      try:
        self._session.close()
      except Exception:  # pylint: disable=broad-except
        pass
      self._session = None

  def close(self) -> None:
    with self._lock:
      self._close()


def wait_for_workers(links: Sequence[WorkerLink], wait_secs: float,
                     poll_secs: float = 2.0) -> None:
  """Returns once every worker took a probe; else names the missing ones.

  Every worker is probed on every round, those that answered already too:
  a probe is also their heartbeat while the others start (a worker ends
  after its driver timeout without one), and one that stops answering is
  missing again.

  Raises:
    SliceError: after `wait_secs`, naming each worker that did not answer
      and its last error.
  """
  start = time.monotonic()
  missing = {link.task: 'no answer yet' for link in links}
  while True:
    for link in links:
      reason = link.send(ALIVE)
      if reason is None and link.task in missing:
        del missing[link.task]
        logging.info('TPU %s answered after %.1f s.', link.describe(),
                     time.monotonic() - start)
      elif reason is not None:
        missing[link.task] = reason
    if not missing:
      return
    if time.monotonic() - start >= wait_secs:
      names = '; '.join(f'{links[t].describe()}: {reason}'
                        for t, reason in sorted(missing.items()))
      raise SliceError(
          f'{len(missing)} of the {len(links)} TPU workers of the slice did '
          f'not answer within {wait_secs:.0f} s: {names}. Each host must run '
          '`python -m tfx_tpu_trainer.tpu.worker` on the port given, and its '
          'name must resolve from here (on GKE: the worker pods are '
          'scheduled and the headless Service exists; `kubectl get pods` '
          f'shows why a pod is pending). {WAIT_SECS_ENV} sets the wait.')
    time.sleep(poll_secs)


class _WorkerLost(BaseException):
  """Raised into the driving thread when a worker stays lost.

  A BaseException, so that no `except Exception` on the way swallows it.
  """


class Heartbeats:
  """Sends `ALIVE` to every worker while the driver drives the slice.

  A worker that takes no heartbeat for `lost_secs` is lost: training cannot
  go on without it, and TensorFlow's monitored sessions would retry the
  step for as long as it is gone (they take UnavailableError for a
  preemption). The driving thread then gets `_WorkerLost` raised into it,
  which `driving` turns into a `WorkerLostError` naming the worker.
  """

  def __init__(self, links: Sequence[WorkerLink], lost_secs: float,
               period_secs: float = HEARTBEAT_SECS):
    self._links = list(links)
    self._period = period_secs
    self._lost_secs = lost_secs
    self._stop = threading.Event()
    self._interrupt_lock = threading.Lock()
    self._driving_thread = threading.get_ident()
    self._failing_since: Dict[int, float] = {}
    self.failures: Dict[int, str] = {}
    self.lost: Dict[int, str] = {}
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name='tpu-slice-heartbeats')

  def start(self) -> None:
    self._thread.start()

  def _run(self) -> None:
    while not self._stop.wait(self._period):
      for link in self._links:
        reason = link.send(ALIVE)
        if reason is None:
          self.failures.pop(link.task, None)
          self._failing_since.pop(link.task, None)
          continue
        if link.task not in self.failures:
          logging.warning('TPU %s did not take a heartbeat: %s',
                          link.describe(), reason)
        self.failures[link.task] = reason
        since = self._failing_since.setdefault(link.task, time.monotonic())
        if time.monotonic() - since >= self._lost_secs and not self.lost:
          self.lost = {link.task: reason}
          self._interrupt_driver()
          return

  def _interrupt_driver(self) -> None:
    """Raises `_WorkerLost` in the driving thread (at its next bytecode)."""
    with self._interrupt_lock:
      if not self._stop.is_set():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(self._driving_thread),
            ctypes.py_object(_WorkerLost))

  def stop(self) -> None:
    """No interrupt is raised once this returns."""
    with self._interrupt_lock:
      self._stop.set()
    if self._thread.is_alive():
      self._thread.join()


def lost_workers(error: BaseException, links: Sequence[WorkerLink],
                 known: Mapping[int, str]) -> List[Tuple[WorkerLink, str]]:
  """The workers behind a training error: named in it, or not answering."""
  named: Set[int] = {int(t) for t in _TASK_IN_ERROR.findall(str(error))}
  lost = []
  for link in links:
    reason = known.get(link.task) or link.send(ALIVE)
    if reason is not None:
      lost.append((link, reason))
    elif link.task in named and isinstance(error, _unavailable_errors()):
      lost.append((link, 'named by the failed step'))
  return lost


def _unavailable_errors():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return (tf.errors.UnavailableError, tf.errors.AbortedError,
          tf.errors.DeadlineExceededError, tf.errors.CancelledError)


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
  text = environ.get(name)
  if text is None:
    return default
  try:
    value = float(text)
  except ValueError:
    value = -1
  if value <= 0:
    raise SliceError(f'{name}={text!r} is not a positive number of seconds.')
  return value


def wait_secs(environ: Optional[Mapping[str, str]] = None) -> float:
  """How long the driver waits for the workers (`WAIT_SECS_ENV`)."""
  return _seconds(os.environ if environ is None else environ, WAIT_SECS_ENV,
                  DEFAULT_WAIT_SECS)


def lost_secs(environ: Optional[Mapping[str, str]] = None) -> float:
  """How long a worker may miss heartbeats before it is lost."""
  return _seconds(os.environ if environ is None else environ, LOST_SECS_ENV,
                  DEFAULT_LOST_SECS)


def _lost_error(lost: Sequence[Tuple[WorkerLink, str]], cause: str,
                model_dir: str, step: Optional[int]) -> WorkerLostError:
  names = '; '.join(f'{link.describe()}: {reason}' for link, reason in lost)
  return WorkerLostError(
      f'The TPU slice lost {names}, so training stopped ({cause}). A retry '
      'of this step (with every worker running again) resumes from the last '
      f'checkpoint in {model_dir}'
      f'{f" (step {step})" if step is not None else ""}.')


@contextlib.contextmanager
def driving(addresses: Sequence[str], model_dir: str,
            latest_step: Optional[Callable[[str], int]] = None
           ) -> Iterator[None]:
  """Waits for every worker, keeps them alive, ends them when done.

  A worker lost during training (an error naming it, or no heartbeat for
  `lost_secs`) becomes a `WorkerLostError` naming the worker and the
  checkpoint a retry resumes from.

  Args:
    addresses: the slice's workers (none: nothing to do).
    model_dir: the checkpoints' directory (named in a lost worker's error).
    latest_step: `f(model_dir)` -> the last checkpoint's step.

  Yields:
    Once every worker answered.
  """
  if not addresses:
    yield
    return
  links = [WorkerLink(task, address) for task, address in enumerate(addresses)]
  logging.info('Driving a %d-host TPU slice: %s.', len(links),
               grpc_list(addresses))
  step = lambda: latest_step(model_dir) if latest_step else None
  heartbeats = None
  try:
    wait_for_workers(links, wait_secs())
    heartbeats = Heartbeats(links, lost_secs())
    heartbeats.start()
    try:
      yield
    except BaseException as e:  # pylint: disable=broad-except
      _stop(heartbeats)
      if heartbeats.lost:  # Raised into this thread, maybe inside TF's code.
        lost = [(links[t], reason) for t, reason in heartbeats.lost.items()]
        raise _lost_error(lost, f'no heartbeat for {lost_secs():.0f} s',
                          model_dir, step()) from e
      cause = e if isinstance(e, _unavailable_errors()) else e.__cause__
      if not isinstance(cause, _unavailable_errors()):
        raise
      lost = lost_workers(cause, links, dict(heartbeats.failures))
      if not lost:
        raise
      raise _lost_error(lost, f'{type(cause).__name__}: '
                        f'{errors.first_line(cause)}', model_dir,
                        step()) from e
  finally:
    if heartbeats is not None:
      _stop(heartbeats)
    for link in links:
      reason = link.send(DONE)
      if reason is not None:
        logging.info('TPU %s did not take the done signal: %s',
                     link.describe(), reason)
      link.close()


def _stop(heartbeats: Heartbeats) -> None:
  """Stops the heartbeats; an interrupt they raised lands here at the latest."""
  while True:
    try:
      heartbeats.stop()
      return
    except _WorkerLost:
      continue
