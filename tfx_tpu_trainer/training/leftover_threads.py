"""Ends a finished process that user code's threads would keep alive."""

import os
import sys
import threading
import time
import traceback
from typing import Collection, List, Optional

from absl import logging

__all__ = ['non_daemon_threads', 'end_process_if_threads_left', 'run_then_end']

# How long finished work waits for other threads to end on their own.
GRACE_SECS = 5.0


# Worker threads that interpreter shutdown itself ends (ThreadPoolExecutor's
# exit hook tells them to stop and joins them).
_ENDED_AT_EXIT = ('concurrent.futures.',)


def non_daemon_threads(
    existing: Collection[threading.Thread] = ()) -> List[threading.Thread]:
  """Live non-daemon threads that would keep the process from exiting.

  Not the main thread or the caller, nor those in `existing` (running before
  the work began: not the work's), nor the workers of thread pools that
  interpreter shutdown ends itself.
  """
  return [thread for thread in threading.enumerate()
          if thread is not threading.main_thread() and
          thread is not threading.current_thread() and not thread.daemon and
          thread.is_alive() and thread not in existing and
          not (_target_module(thread) or '').startswith(_ENDED_AT_EXIT)]


def _target_module(thread: threading.Thread) -> str:
  target = getattr(thread, '_target', None) or type(thread).run
  return getattr(target, '__module__', '') or ''


def _describe(thread: threading.Thread) -> str:
  target = getattr(thread, '_target', None) or type(thread).run
  where = getattr(target, '__module__', None)
  name = getattr(target, '__qualname__', repr(target))
  return f'{thread.name!r} ({where}.{name})' if where else repr(thread.name)


def end_process_if_threads_left(
    exit_code: int, what: str, grace_secs: Optional[float] = None,
    existing: Collection[threading.Thread] = ()) -> None:
  """Ends the process now if non-daemon threads outlive `grace_secs`.

  Args:
    exit_code: the code the process exits with.
    what: what finished, for the message ('The pipeline').
    grace_secs: how long the threads may take to end on their own
      (default `GRACE_SECS`).
    existing: threads that ran before the work began, left alone (a
      command run in-process, as the tests do, is not the process's only
      work).
  """
  deadline = time.monotonic() + (GRACE_SECS if grace_secs is None
                                 else grace_secs)
  for thread in non_daemon_threads(existing):
    thread.join(max(0.0, deadline - time.monotonic()))
  left = non_daemon_threads(existing)
  if not left:
    return
  message = (
      f'{what} is done, but non-daemon thread(s) '
      f'{", ".join(_describe(thread) for thread in left)} started by module '
      f'code are still running; ending the process with exit code '
      f'{exit_code} instead of waiting for them forever. Start such threads '
      'with daemon=True, or stop and join them before your function returns.')
  logging.warning(message)
  print(message, file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(exit_code)  # pylint: disable=protected-access


def run_then_end(function, what: str,
                 grace_secs: Optional[float] = None) -> None:
  """Runs `function()`, then ends the process even if threads are left.

  A failure prints its traceback and exits 1; success exits 0 (as Python
  would, without waiting for threads that never end).

  Args:
    function: the process's work.
    what: what it is, for the message ('The TPUTrainer step').
    grace_secs: how long left threads may take to end on their own
      (default `GRACE_SECS`).
  """
  try:
    function()
  except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    end_process_if_threads_left(code, what, grace_secs)
    raise
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    end_process_if_threads_left(1, what, grace_secs)
    raise
  end_process_if_threads_left(0, what, grace_secs)
