"""How a slice's driver ends where TensorFlow would wait for ever (a stuck
step, a session close at exit); docs/architecture.md has the story."""

import atexit
import contextlib
import faulthandler
import logging as python_logging
import os
import sys
import threading
from typing import Callable, Iterator, List

from absl import logging

__all__ = ['EXIT_GRACE_SECS', 'CLEANUP_SECS', 'EXIT_STATUS',
           'cleanup_on_hard_exit', 'end_process', 'bound_exit']

# How long the interpreter may take to exit once a slice was driven.
EXIT_GRACE_SECS = 60
# How long each clean-up may take when the process is ended.
CLEANUP_SECS = 30
EXIT_STATUS = 1

_cleanups: List[Callable[[], None]] = []
_armed = threading.Event()
_failed = threading.Event()


@contextlib.contextmanager
def cleanup_on_hard_exit(cleanup: Callable[[], None]) -> Iterator[None]:
  """Inside, `end_process` runs `cleanup` before ending the process."""
  _cleanups.append(cleanup)
  try:
    yield
  finally:
    _cleanups.remove(cleanup)


def _run_bounded(cleanup: Callable[[], None]) -> None:
  def run():
    try:
      cleanup()
    except Exception as e:  # pylint: disable=broad-except
      logging.error('Clean-up before ending the process failed: %s: %s',
                    type(e).__name__, e)

  thread = threading.Thread(target=run, daemon=True, name='slice-cleanup')
  thread.start()
  thread.join(CLEANUP_SECS)
  if thread.is_alive():
    logging.error('A clean-up before ending the process took more than %d s; '
                  'ending without it.', CLEANUP_SECS)


def _flush() -> None:
  for handler in python_logging.getLogger().handlers + python_logging.getLogger(
      'absl').handlers:
    with contextlib.suppress(Exception):
      handler.flush()
  for stream in (sys.stdout, sys.stderr):
    with contextlib.suppress(Exception):
      stream.flush()


def end_process(message: str) -> None:
  """Logs `message`, runs the clean-ups, flushes and ends with status 1."""
  logging.error('%s', message)
  for cleanup in list(reversed(_cleanups)):
    _run_bounded(cleanup)
  logging.error('Ending the process (status %d): its training thread is '
                'blocked inside TensorFlow, which waits without a deadline '
                'for a worker that does not answer.', EXIT_STATUS)
  _flush()
  os._exit(EXIT_STATUS)  # pylint: disable=protected-access


def _arm_at_exit() -> None:
  if _failed.is_set():
    sys.stderr.write(
        'tfx-tpu-trainer: the TPU slice\'s training failed; this process '
        f'ends within {EXIT_GRACE_SECS} s even if TensorFlow\'s session '
        'close waits for a worker that does not answer '
        '(GrpcSession::Close).\n')
  _flush()
  faulthandler.dump_traceback_later(EXIT_GRACE_SECS, exit=True,
                                    file=sys.stderr)


def bound_exit(failed: bool = False) -> None:
  """From the interpreter's exit on, the process has `EXIT_GRACE_SECS`.

  Args:
    failed: the slice's training failed (the exit then says it is bounded,
      the likeliest time for a close to wait).
  """
  if failed:
    _failed.set()
  if not _armed.is_set():
    _armed.set()
    atexit.register(_arm_at_exit)
