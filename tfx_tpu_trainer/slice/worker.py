"""`python -m tfx_tpu_trainer.slice.worker`: one host's TPU worker server for a
slice's driver; it ends when the driver is done or gone."""

import argparse
import math
import os
import re
import socket
import sys
import time
from typing import Optional, Sequence

from absl import logging

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.slice import driver

__all__ = ['parser']

EXIT_DRIVER_GONE = 3
EXIT_BAD_ARGUMENTS = 2
# Where a GKE TPU pod and an Indexed Job pod find their index.
TASK_INDEX_ENVS = ('TPU_WORKER_ID', 'JOB_COMPLETION_INDEX')
POLL_SECS = 30
# How long a worker stays after the done signal: its driver closes its
# session here right after sending it, and that close waits out its
# operation timeout (driver.SIGNAL_TIMEOUT_SECS) for a worker already gone.
DONE_LINGER_SECS = 1
# Read by TensorFlow's gRPC runtime: `true` fails a call to an unreachable
# task at once instead of waiting for it (`use_caller`, its default, lets
# the master's device lookup wait).
GRPC_FAIL_FAST_ENV = 'GRPC_FAIL_FAST'


class WorkerArgumentError(errors.TPUTrainerError, ValueError):
  """A worker argument is invalid."""


# ASCII digits only: str.isdigit() takes '²', which int() refuses.
_NUMBER = re.compile(r'^[0-9]+$')


def _positive(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not math.isfinite(value) or value <= 0:
    raise argparse.ArgumentTypeError(
        f'{text!r} is not a positive, finite number of seconds')
  return value


def _port(text: str) -> int:
  if not _NUMBER.match(text) or not 0 < int(text) < 65536:
    raise argparse.ArgumentTypeError(f'{text!r} is not a port (1-65535)')
  return int(text)


def parser() -> argparse.ArgumentParser:
  """The worker's arguments."""
  result = argparse.ArgumentParser(
      prog='python -m tfx_tpu_trainer.slice.worker',
      description='Runs this host\'s TPU worker server for a driver of a '
      'multi-host slice; ends when the driver says it is done or is gone.')
  result.add_argument(
      '--port', type=_port, default=driver.DEFAULT_PORT,
      help=f'the gRPC port the driver calls (default {driver.DEFAULT_PORT})')
  result.add_argument(
      '--task-index', type=int, default=None,
      help='this host\'s index in the slice, for the log (default: '
      f'{" or ".join(TASK_INDEX_ENVS)})')
  result.add_argument(
      '--driver-timeout', type=_positive,
      default=driver.DEFAULT_DRIVER_TIMEOUT_SECS, metavar='SECONDS',
      help='once the driver has been heard from, end when it has sent '
      f'nothing for this long (default {driver.DEFAULT_DRIVER_TIMEOUT_SECS}'
      f'; the driver sends a heartbeat every {driver.HEARTBEAT_SECS} s '
      'while it trains)')
  result.add_argument(
      '--driver-start-timeout', type=_positive, default=None,
      metavar='SECONDS',
      help='end when no driver has been heard from this long after this '
      'worker started (default: wait until a driver comes, however long '
      'the pipeline takes to reach its trainer)')
  return result


def task_index(given: Optional[int], environ=None) -> Optional[int]:
  """`--task-index`, else the pod's index from its environment.

  Raises:
    WorkerArgumentError: a negative or non-integer index.
  """
  environ = os.environ if environ is None else environ
  if given is None:
    for name in TASK_INDEX_ENVS:
      text = environ.get(name)
      if text is not None:
        if not _NUMBER.match(text.strip()):
          raise WorkerArgumentError(
              f'{name}={text!r} is not a task index (an integer >= 0).')
        return int(text)
    return None
  if given < 0:
    raise WorkerArgumentError(
        f'--task-index {given} is negative; the first host is 0.')
  return given


def serve(port: int, driver_timeout: float, task: Optional[int],
          driver_start_timeout: Optional[float] = None) -> int:
  """Runs the server until the driver is done (0) or gone.

  `driver_timeout` counts from the driver's last word, once there was one;
  before it, the worker waits `driver_start_timeout` from its own start
  (None: for ever), so a driver that reaches its trainer late still finds
  its workers.

  The server boots standalone (job `localhost`); the driver's cluster def
  names it `/job:worker/task:<i>`. TensorFlow refuses a session whose
  cluster def names the job and task a server booted with ("The
  ClusterSpec names the job and task index to be the same names that were
  provided when the server booted"). The driver's signals arrive on a queue
  of this server (`driver.signal_queue`).
  """
  # Worker 0 is the driver's master: without this, a session it creates
  # while another worker is gone waits for that worker forever (its device
  # lookup waits for a gRPC channel to be ready); with it, the session fails
  # with UnavailableError and the driver names the lost worker.
  os.environ.setdefault(GRPC_FAIL_FAST_ENV, 'true')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  name = 'worker' + (f' {task}' if task is not None else '')
  try:
    server = tf.distribute.Server(
        tf.train.ClusterSpec({'localhost': [f'localhost:{port}']}),
        job_name='localhost', task_index=0, protocol='grpc', start=True)
  except tf.errors.OpError as e:
    logging.error('TPU %s: could not start the gRPC server on port %d (%s); '
                  'is the port taken?', name, port, errors.first_line(e))
    return 1
  logging.info('TPU %s serving at %s:%d (%s); the driver names it '
               'grpc://<this host>:%d. It waits for a driver %s.', name,
               socket.getfqdn(), port, server.target, port,
               f'{driver_start_timeout:.0f} s (--driver-start-timeout)'
               if driver_start_timeout else 'however long it takes')
  graph = tf.Graph()
  with graph.as_default():
    receive = driver.signal_queue(tf).dequeue()
  session = tf.compat.v1.Session(server.target, graph=graph)
  started = time.monotonic()
  last_heard = None
  while True:
    limit = driver_timeout if last_heard else driver_start_timeout
    poll = min(POLL_SECS, limit) if limit else POLL_SECS
    try:
      message = session.run(receive, options=tf.compat.v1.RunOptions(
          timeout_in_ms=int(poll * 1000)))
    except tf.errors.DeadlineExceededError:
      silent = time.monotonic() - (last_heard or started)
      if limit and silent >= limit:
        _log_driver_gone(name, silent, last_heard is not None, limit)
        return EXIT_DRIVER_GONE
      continue
    if last_heard is None:
      logging.info('TPU %s: the driver is here; it ends this worker by its '
                   'done signal, or by %.0f s without a word '
                   '(--driver-timeout).', name, driver_timeout)
    last_heard = time.monotonic()
    if message == driver.DONE:
      logging.info('TPU %s: the driver is done; ending.', name)
      time.sleep(DONE_LINGER_SECS)
      return 0


def _log_driver_gone(name: str, silent: float, heard: bool,
                     limit: float) -> None:
  if heard:
    logging.error('TPU %s: no word from the driver for %.0f s '
                  '(--driver-timeout %.0f): the driver is gone; ending.',
                  name, silent, limit)
  else:
    logging.error('TPU %s: no driver came within %.0f s of this worker\'s '
                  'start (--driver-start-timeout %.0f); ending.', name,
                  silent, limit)


def main(argv: Optional[Sequence[str]] = None) -> None:
  """Parses the arguments, serves, and ends the process with the status."""
  args = parser().parse_args(argv)
  logging.set_verbosity(logging.INFO)
  logging.use_absl_handler()
  try:
    task = task_index(args.task_index)
  except WorkerArgumentError as e:
    print(f'python -m tfx_tpu_trainer.slice.worker: {e}', file=sys.stderr)
    sys.exit(EXIT_BAD_ARGUMENTS)
  status = serve(args.port, args.driver_timeout, task,
                 args.driver_start_timeout)
  sys.stdout.flush()
  sys.stderr.flush()
  # The gRPC server cannot be stopped (TensorFlow's Server has no stop):
  # end the process without waiting for it.
  os._exit(status)  # pylint: disable=protected-access


if __name__ == '__main__':
  main()
