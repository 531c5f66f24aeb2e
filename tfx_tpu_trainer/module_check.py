"""Checks a trainer module in a child process, before a pipeline runs.

Importing a user's module runs its code: `os._exit(0)` at import would end
the checking process itself (the CLI `run` exiting 0 before any component),
and a crash in import-time code would take the caller with it.
`check_trainer_module` imports and checks the module
(`user_module.load_user_module`) in a child process and reads the verdict it
writes to a file, so an exit of the module is a clear error naming it.

The children fork from a multiprocessing fork server that imported
TensorFlow and TFX once (with `user_module`): a check then costs the
module's own import, not a fresh interpreter loading TensorFlow and TFX
(about 7 s each). The server has run no TensorFlow op, so forking it is
safe; it lasts as long as this process.
"""

import json
import multiprocessing
from multiprocessing import forkserver
import os
import sys
import tempfile

from tfx_tpu_trainer import user_module as user_module_lib

# What the fork server imports once, before any check forks from it.
_SERVER_PRELOAD = ['tfx_tpu_trainer.user_module']
_LAST_LINES = 3


def check_trainer_module(module_file: str) -> None:
  """Imports and checks `module_file` in a child process.

  Args:
    module_file: the trainer module's path.

  Raises:
    user_module.UserModuleError: the module breaks the contract, or its
      code ended the child process (exit, os._exit, a crash) before the
      check finished.
  """
  with tempfile.TemporaryDirectory(prefix='tpu-trainer-check-') as scratch:
    verdict_path = os.path.join(scratch, 'verdict.json')
    stderr_path = os.path.join(scratch, 'stderr.txt')
    child = _context().Process(
        target=_check_in_child, name='tpu-trainer-module-check',
        args=(module_file, verdict_path, stderr_path))
    child.start()
    child.join()
    if os.path.exists(verdict_path):
      with open(verdict_path) as f:
        verdict = json.load(f)
      if not verdict['ok']:
        raise user_module_lib.UserModuleError(verdict['error'])
      return
    last_lines = _last_lines(stderr_path)
  raise user_module_lib.UserModuleError(
      f'The trainer module {module_file} ended the process that imported it '
      f'(exit code {child.exitcode}) before it could be checked: its '
      'import-time code (or a function the check calls) exits, e.g. '
      'sys.exit() or os._exit() at module level, or crashes. Module code '
      'must define functions and constants, never end the process.'
      + (f' Last output:\n{last_lines}' if last_lines else ''))


def _context() -> multiprocessing.context.BaseContext:
  """The fork server's context (spawn where there is no fork)."""
  if 'forkserver' not in multiprocessing.get_all_start_methods():
    return multiprocessing.get_context('spawn')
  context = multiprocessing.get_context('forkserver')
  # Only read when the server starts: the first check of this process.
  context.set_forkserver_preload(_SERVER_PRELOAD)
  _ensure_quiet_server()
  return context


def _ensure_quiet_server() -> None:
  """Starts the fork server (if not running) with its output muted.

  Its imports would print again what this process printed as it imported
  the same libraries (TensorFlow's log lines, library warnings); each
  check's child writes its own output to a file.
  """
  sys.stdout.flush()
  sys.stderr.flush()
  saved = [os.dup(1), os.dup(2)]
  try:
    with open(os.devnull, 'w') as devnull:
      os.dup2(devnull.fileno(), 1)
      os.dup2(devnull.fileno(), 2)
    forkserver.ensure_running()
  finally:
    for fd, saved_fd in zip((1, 2), saved):
      os.dup2(saved_fd, fd)
      os.close(saved_fd)


def _check_in_child(module_file: str, verdict_path: str,
                    stderr_path: str) -> None:
  """The child: loads the module, writes the verdict; output to a file."""
  with open(os.devnull, 'w') as devnull:
    os.dup2(devnull.fileno(), 1)
  with open(stderr_path, 'w') as stderr:
    os.dup2(stderr.fileno(), 2)
  try:
    user_module_lib.load_user_module({'module_file': module_file})
    verdict = {'ok': True}
  except user_module_lib.UserModuleError as e:
    verdict = {'ok': False, 'error': str(e)}
  with open(verdict_path, 'w') as f:
    json.dump(verdict, f)


def _last_lines(path: str) -> str:
  if not os.path.exists(path):
    return ''
  with open(path, errors='replace') as f:
    return '\n'.join(f.read().strip().splitlines()[-_LAST_LINES:])
