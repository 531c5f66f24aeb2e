"""A multi-host TPU slice driven from this process: its workers, the wait, the
heartbeats, the done signal (docs/guide/tpu_slices.md, "Multi-host slices")."""

import contextlib
import ctypes
import math
import os
import re
import socket
import threading
import time
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Protocol, Sequence, Set, Tuple)

from absl import logging

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.slice import addresses as addresses_lib
from tfx_tpu_trainer.slice import cluster as cluster_lib
from tfx_tpu_trainer.slice import driver_exit

__all__ = ['WAIT_SECS_ENV', 'worker_addresses', 'is_local_path', 'check_driver',
           'run_config_args', 'driving']

DEFAULT_PORT = addresses_lib.TPU_WORKER_PORT
JOB_NAME = 'worker'
HOSTNAMES_ENV = addresses_lib.TPU_WORKER_HOSTNAMES_ENV
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
# Once a lost worker is raised into the training thread: how long that
# thread may take to get it before the process is ended (driver_exit.py).
STUCK_GRACE_SECS = 30
# How often the wait for the workers says whom it still waits for.
PROGRESS_SECS = 30
SIGNAL_QUEUE_NAME = 'tfx_tpu_trainer_driver_signals'
SIGNAL_QUEUE_CAPACITY = 1000
ALIVE, DONE = b'alive', b'done'
LOCAL_HOSTS = ('localhost', '127.0.0.1', '::1', '[::1]')
# A path with a scheme (gs://, s3://, ...): config.is_uri's test, written
# here because config.py imports this folder (addresses.py).
_URI = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*://')
_TASK_IN_ERROR = re.compile(r'/job:' + JOB_NAME + r'/replica:\d+/task:(\d+)')


class SliceError(errors.TPUTrainerError, ValueError):
  """The slice's workers cannot be used as given."""


class WorkerLostError(SliceError):
  """A worker of the slice stopped answering."""


class SliceConfig(Protocol):
  """What the driver reads of a `config.TrainerConfig`."""

  @property
  def tpu_workers(self) -> Sequence[str]:
    """`custom_config['tpu_workers']`, parsed; () when not given."""


# Lines of a TensorFlow error that say where, not what: the graph-mode
# header, gRPC's details; and the node's traceback, from `Detected at node`
# to `Node:`.
_NOT_A_REASON = re.compile(
    r'^(Graph execution error:|Additional GRPC error information|'
    r':?\{"created")')
_TRACEBACK_START, _TRACEBACK_END = 'Detected at node', 'Node:'


def describe_error(error: BaseException) -> str:
  """`Type: what happened`, one line, for a worker's error.

  TensorFlow 2.15's session errors start with `Graph execution error:`;
  the first line that says what happened is further down.
  """
  if isinstance(error, _deadline_error()):
    return (f'{type(error).__name__}: no answer within '
            f'{SIGNAL_TIMEOUT_SECS} s (the worker took the connection: is '
            'its process stopped or overloaded?)')
  text = getattr(error, 'message', None) or str(error)
  in_traceback = False
  for line in text.splitlines():
    line = line.strip()
    if line.startswith(_TRACEBACK_START):
      in_traceback = True
    elif in_traceback:
      in_traceback = not line.startswith(_TRACEBACK_END)
    elif line and not _NOT_A_REASON.match(line):
      return f'{type(error).__name__}: {line}'
  return type(error).__name__


def _deadline_error():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.errors.DeadlineExceededError


def parse_addresses(values: Sequence[Any], where: str) -> Tuple[str, ...]:
  """Every `host[:port]` as `host:port`; duplicates refused.

  Raises:
    SliceError: naming `where` and the bad or repeated address.
  """
  try:
    return addresses_lib.worker_addresses(values, where)
  except addresses_lib.AddressError as e:
    raise SliceError(str(e)) from e


def worker_addresses(config: SliceConfig,
                     environ: Optional[Mapping[str, str]] = None
                    ) -> Tuple[str, ...]:
  """The slice's workers as `host:port`, in task order; () for one host.

  `custom_config['tpu_workers']` first, else `TPU_WORKER_HOSTNAMES` when it
  names more than one host (one host is the TPU attached to this VM).

  Raises:
    SliceError: a `TPU_WORKER_HOSTNAMES` entry that is no address (one host
      too: `h0;h1` is not two hosts).
  """
  if config.tpu_workers:
    return tuple(config.tpu_workers)
  environ = os.environ if environ is None else environ
  hosts = [h for h in environ.get(HOSTNAMES_ENV, '').split(',') if h.strip()]
  addresses = parse_addresses(hosts, HOSTNAMES_ENV)
  return addresses if len(addresses) > 1 else ()


def grpc_list(addresses: Sequence[str]) -> str:
  """`grpc://h0:8470,grpc://h1:8470`: the TPU name TPUClusterResolver parses."""
  return ','.join(f'grpc://{a}' for a in addresses)


def all_on_this_machine(addresses: Sequence[str]) -> bool:
  """True when every worker runs on this machine (the CPU rehearsal)."""
  return all(a.rpartition(':')[0] in LOCAL_HOSTS for a in addresses)


def is_local_path(path: str) -> bool:
  """A path only this machine sees: no scheme, or `file://`."""
  return not _URI.match(path) or path.startswith('file://')


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


def check_driver(config: SliceConfig,
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
    # The session's operation timeout also bounds its close
    # (GrpcSession::Close): without one, a close waits for ever for a
    # worker that does not answer.
    self._config = tf.compat.v1.ConfigProto(
        operation_timeout_in_ms=SIGNAL_TIMEOUT_SECS * 1000)
    self._session = None
    self._lock = threading.Lock()

  def describe(self) -> str:
    return f'worker {self.task} ({self.address})'

  def unresolved(self) -> Optional[str]:
    """Why the host's name does not resolve from here, or None."""
    host, _, port = self.address.rpartition(':')
    try:
      socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
      return None
    except socket.gaierror as e:
      return f'the name {host!r} does not resolve from here ({e})'

  def send(self, message: bytes) -> Optional[str]:
    """Sends `message`; None when the worker took it, else why not."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    host, _, port = self.address.rpartition(':')
    try:
      socket.create_connection((host, int(port)),
                               timeout=SIGNAL_TIMEOUT_SECS).close()
    except socket.gaierror as e:
      return f'the name {host!r} does not resolve ({e})'
    except OSError as e:
      return f'{type(e).__name__}: {e}'
    with self._lock:
      try:
        self._run(self._send, {self._message: message})
        return None
      except tf.errors.OpError as e:
        self._close()
        return describe_error(e)

  def identity(self) -> Optional[frozenset]:
    """The worker process's device incarnations (random per process start).

    Two addresses of one server give the same; None when it did not answer.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with self._lock:
      try:
        self._open()
        return frozenset(d.incarnation for d in self._session.list_devices())
      except tf.errors.OpError:
        self._close()
        return None

  def _open(self) -> None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if self._session is None:
      self._session = tf.compat.v1.Session(
          f'grpc://{self.address}', graph=self._graph, config=self._config)

  def _run(self, fetches, feed_dict) -> Any:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self._open()
    return self._session.run(
        fetches, feed_dict, options=tf.compat.v1.RunOptions(
            timeout_in_ms=SIGNAL_TIMEOUT_SECS * 1000))

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


def _clock(seconds_from_now: float) -> str:
  return time.strftime('%H:%M:%S', time.localtime(time.time() +
                                                  seconds_from_now))


def _refuse_unresolved(links: Sequence[WorkerLink]) -> None:
  unresolved = [(link, link.unresolved()) for link in links]
  unresolved = [(link, why) for link, why in unresolved if why]
  if unresolved:
    raise SliceError(
        '; '.join(f'{link.describe()}: {why}' for link, why in unresolved) +
        '. Check the name (on GKE a worker pod\'s name, '
        '<group>-<i>.<group>.<namespace>.svc, resolves while its pod exists).')


def _refuse_one_worker_twice(links: Sequence[WorkerLink]) -> None:
  """Two addresses of one worker process make a slice that never trains."""
  seen: Dict[frozenset, WorkerLink] = {}
  for link in links:
    identity = link.identity()
    if not identity:
      continue
    if identity in seen:
      raise SliceError(
          f'{seen[identity].describe()} and {link.describe()} are one worker '
          'process (the same TensorFlow server answers at both addresses): '
          'each host of the slice runs its own worker; name each worker '
          'once.')
    seen[identity] = link


class _Failures:
  """Why a worker did not answer: the first reason and the last."""

  def __init__(self):
    self.first = self.last = None

  def add(self, reason: str) -> None:
    self.first = self.first or reason
    self.last = reason

  def __str__(self) -> str:
    if self.last is None:
      return 'no answer yet'
    if self.first == self.last:
      return self.last
    return f'{self.last} (first: {self.first})'


def wait_for_workers(links: Sequence[WorkerLink], wait_secs: float,
                     poll_secs: float = 2.0, *,
                     wait_set_by: str = WAIT_SECS_ENV,
                     report: Callable[[str], None] = logging.info,
                     names_must_resolve: bool = False) -> None:
  """Returns once every worker took a probe; else names the missing ones.

  Every worker is probed on every round, those that answered already too:
  a probe is also their heartbeat while the others start (a worker ends
  after its driver timeout without one), and one that stops answering is
  missing again. `report` gets whom it waits for and until when, each
  answer, and every `PROGRESS_SECS` whom it still waits for.

  Args:
    links: the workers.
    wait_secs: how long to wait for all of them.
    poll_secs: the pause between rounds.
    wait_set_by: what set `wait_secs`, as the messages name it.
    report: where the progress lines go.
    names_must_resolve: fail at once on a host name that does not resolve
      (a check of running workers; a driver waits for pods to appear).

  Raises:
    SliceError: a name that does not resolve (`names_must_resolve`); after
      `wait_secs`, each worker that did not answer and its last error; two
      addresses of one worker process.
  """
  start = time.monotonic()
  if names_must_resolve:
    _refuse_unresolved(links)
  report(f'Waiting up to {wait_secs:.0f} s (until {_clock(wait_secs)}; '
         f'{wait_set_by} sets it) for the {len(links)} TPU workers of the '
         f'slice: {", ".join(link.describe() for link in links)}.')
  missing = {link.task: _Failures() for link in links}
  last_report = start
  while True:
    for link in links:
      reason = link.send(ALIVE)
      if reason is None and link.task in missing:
        del missing[link.task]
        report(f'TPU {link.describe()} answered after '
               f'{time.monotonic() - start:.1f} s.')
      elif reason is not None:
        missing.setdefault(link.task, _Failures()).add(reason)
    if not missing:
      break
    waited = time.monotonic() - start
    if waited >= wait_secs:
      names = '; '.join(f'{links[t].describe()}: {reason}'
                        for t, reason in sorted(missing.items()))
      raise SliceError(
          f'{len(missing)} of the {len(links)} TPU workers of the slice did '
          f'not answer within {wait_secs:.0f} s: {names}. Each host must run '
          '`python -m tfx_tpu_trainer.slice.worker` on the port given, and its '
          'name must resolve from here (on GKE: the worker pods are '
          'scheduled and the headless Service exists; `kubectl get pods` '
          f'shows why a pod is pending). {wait_set_by} sets the wait.')
    if time.monotonic() - last_report >= PROGRESS_SECS:
      last_report = time.monotonic()
      report('Still waiting for ' + '; '.join(
          f'{links[t].describe()} ({reason})'
          for t, reason in sorted(missing.items())) +
             f'; until {_clock(wait_secs - waited)}.')
    time.sleep(poll_secs)
  _refuse_one_worker_twice(links)


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
  which `driving` turns into a `WorkerLostError` naming the worker. A
  thread blocked inside TensorFlow gets it only when TensorFlow returns,
  which for a stopped (not dead) worker is never: if it has not got it
  `STUCK_GRACE_SECS` later, `on_stuck(lost)` is called (it ends the
  process: driver_exit.py).
  """

  def __init__(self, links: Sequence[WorkerLink], lost_secs: float,
               period_secs: float = HEARTBEAT_SECS,
               on_stuck: Optional[Callable[[Dict[int, str]], None]] = None):
    self._links = list(links)
    self._period = period_secs
    self._lost_secs = lost_secs
    self._on_stuck = on_stuck
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
        if self._beat(link):
          self._interrupt_driver()
          if not self._stop.wait(STUCK_GRACE_SECS) and self._on_stuck:
            self._on_stuck(dict(self.lost))
          return

  def _beat(self, link: WorkerLink) -> bool:
    """Sends one heartbeat; True when `link`'s worker is now lost."""
    reason = link.send(ALIVE)
    if reason is None:
      self.failures.pop(link.task, None)
      self._failing_since.pop(link.task, None)
      return False
    if link.task not in self.failures:
      logging.warning('TPU %s did not take a heartbeat: %s',
                      link.describe(), reason)
    self.failures[link.task] = reason
    silent = time.monotonic() - self._failing_since.setdefault(
        link.task, time.monotonic())
    if silent < self._lost_secs or self.lost:
      return False
    self.lost = {link.task: reason}
    logging.error('TPU %s took no heartbeat for %.0f s (%s): it is lost; '
                  'stopping the training.', link.describe(), silent,
                  LOST_SECS_ENV)
    return True

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
    value = math.nan
  if not math.isfinite(value) or value <= 0:
    raise SliceError(f'{name}={text!r} is not a positive, finite number of '
                     'seconds.')
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
  checkpoint a retry resumes from; when the training thread is blocked in
  TensorFlow and cannot get it, the process ends with that message
  (driver_exit.py). From here on, the process ends at most
  `driver_exit.EXIT_GRACE_SECS` after it starts exiting.

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
  driver_exit.bound_exit()
  links = [WorkerLink(task, address) for task, address in enumerate(addresses)]
  logging.info('Driving a %d-host TPU slice: %s.', len(links),
               grpc_list(addresses))
  step = lambda: latest_step(model_dir) if latest_step else None

  def lost_error(lost: Mapping[int, str]) -> WorkerLostError:
    return _lost_error([(links[t], reason) for t, reason in lost.items()],
                       f'no heartbeat for {lost_secs():.0f} s', model_dir,
                       step())

  def end_stuck(lost: Mapping[int, str]) -> None:
    error = lost_error(lost)
    _send_done(links, skip=lost)
    driver_exit.end_process(f'{type(error).__name__}: {error}')

  heartbeats = None
  try:
    wait_for_workers(links, wait_secs())
    heartbeats = Heartbeats(links, lost_secs(), on_stuck=end_stuck)
    heartbeats.start()
    try:
      yield
    except BaseException as e:  # pylint: disable=broad-except
      _stop(heartbeats)
      driver_exit.bound_exit(failed=True)
      if heartbeats.lost:
        # Raised into this thread, maybe inside TensorFlow's code, where
        # pybind11 reports it as a "MISMATCH" of exception types: the
        # chain says nothing the message does not.
        raise lost_error(heartbeats.lost) from None
      cause = e if isinstance(e, _unavailable_errors()) else e.__cause__
      if not isinstance(cause, _unavailable_errors()):
        raise
      lost = lost_workers(cause, links, dict(heartbeats.failures))
      if not lost:
        raise
      raise _lost_error(lost, describe_error(cause), model_dir,
                        step()) from e
  finally:
    if heartbeats is not None:
      _stop(heartbeats)
    _send_done(links, skip=heartbeats.lost if heartbeats else {})


def _send_done(links: Sequence[WorkerLink], skip: Mapping[int, str]) -> None:
  """Tells every worker but the lost ones that the driver is done.

  All workers at once: each ends on the signal, and the close of a session
  on a worker that has ended waits out its operation timeout
  (`SIGNAL_TIMEOUT_SECS`), which one after the other would add up.
  """
  threads = [threading.Thread(target=_end_link, args=(link, link.task not in
                                                     skip),
                              daemon=True, name=f'tpu-slice-done-{link.task}')
             for link in links]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()


def _end_link(link: WorkerLink, send_done: bool) -> None:
  if send_done:
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
