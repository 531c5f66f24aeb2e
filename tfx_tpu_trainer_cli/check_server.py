"""Checks a trainer module in a child process, before a pipeline runs."""

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Any, Dict, Optional

_SERVE = 'from tfx_tpu_trainer_cli import check_server; check_server.serve()'
_LAST_LINES = 3

_server: Optional[subprocess.Popen] = None
_server_lock = threading.Lock()


def check_in_child(module_file: str,
                   function_location: Optional[Any] = None) -> None:
  """Imports and checks `module_file` in a child process.

  Args:
    module_file: the trainer module's path.
    function_location: for `run_fn=`/`trainer_fn=`, where the import path
      leads (`function_paths.FunctionLocation`): the module is imported by
      name, its package's folder first on sys.path, as the executor does.

  Raises:
    user_module.UserModuleError: the module breaks the contract, or its
      code ended the child process (exit, os._exit, a crash) before the
      check finished.
  """
  from tfx_tpu_trainer.user_code import user_module as user_module_lib  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory(prefix='tpu-trainer-check-') as scratch:
    request = {
        'module_file': os.path.abspath(module_file),
        'function': (None if function_location is None else {
            'key': function_location.argument,
            'path': function_location.path,
            'import_root': function_location.import_root}),
        'verdict_path': os.path.join(scratch, 'verdict.json'),
        'stderr_path': os.path.join(scratch, 'stderr.txt'),
        'cwd': os.getcwd(),
        'environment': dict(os.environ),
    }
    exit_code = _run_in_child(request)
    if os.path.exists(request['verdict_path']):
      with open(request['verdict_path']) as f:
        verdict = json.load(f)
      if not verdict['ok']:
        raise user_module_lib.UserModuleError(verdict['error'])
      return
    last_lines = _last_lines(request['stderr_path'])
  raise user_module_lib.UserModuleError(
      f'The trainer module {module_file} ended the process that imported it '
      f'({_how_it_ended(exit_code)}) before it could be checked: its '
      'import-time code (or a function the check calls) exits, e.g. '
      'sys.exit() or os._exit() at module level, or crashes. Module code '
      'must define functions and constants, never end the process.'
      + (f' Last output:\n{last_lines}' if last_lines else ''))


def start_server() -> None:
  """Starts the check server now (it imports TensorFlow and TFX)."""
  with _server_lock:
    _running_server()


def stop_server() -> None:
  """Ends the check server (about 0.8 GB) once the checks are done."""
  with _server_lock:
    _stop_server()


def _run_in_child(request: Dict[str, Any]) -> int:
  """Has the server fork a child for `request`; the child's exit code."""
  with _server_lock:
    for _ in range(2):  # A server that ended is started again, once.
      server = _running_server()
      try:
        server.stdin.write(json.dumps(request) + '\n')
        server.stdin.flush()
        reply = server.stdout.readline()
      except BrokenPipeError:
        reply = ''
      if reply:
        return json.loads(reply)['exit_code']
      _stop_server()
  raise RuntimeError(
      'The module check server ended before it could check '
      f'{request["module_file"]}: run `{sys.executable} -c "{_SERVE}"` to '
      'see why (the installation of tfx_tpu_trainer may be broken).')


def _running_server() -> subprocess.Popen:
  global _server
  if _server is None or _server.poll() is not None:
    # Its imports would print again what this process printed as it
    # imported the same libraries; each child writes to its own file.
    _server = subprocess.Popen(
        [sys.executable, '-c', _SERVE], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=_server_environment())
  return _server


@atexit.register
def _stop_server() -> None:
  global _server
  if _server is not None:
    _server.terminate()  # It may still be importing; nothing is lost.
    _server.wait()
    _server.stdin.close()
    _server.stdout.close()
    _server = None


def _server_environment() -> Dict[str, str]:
  """The server finds this package where this process found it."""
  environment = dict(os.environ)
  package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  environment['PYTHONPATH'] = os.pathsep.join(
      [package_root] + [p for p in [environment.get('PYTHONPATH')] if p])
  return environment


def serve() -> None:
  """The server: one JSON request a line in, one child's exit code out."""
  # What load_user_module imports (TFX, and TensorFlow with it), once, before
  # any fork: a check then costs the module's own import.
  # pylint: disable=g-import-not-at-top,unused-import
  from tfx.components.util import udf_utils
  from tfx.types import standard_component_specs
  from tfx.utils import io_utils
  from tfx_tpu_trainer.user_code import user_module
  # pylint: enable=g-import-not-at-top,unused-import
  for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
      _check_in_child(request)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({'exit_code': os.waitstatus_to_exitcode(status)}),
          flush=True)


def _check_in_child(request: Dict[str, Any]) -> None:
  """The forked child: loads the module, writes the verdict, exits."""
  from tfx_tpu_trainer.user_code import user_module as user_module_lib  # pylint: disable=g-import-not-at-top
  try:
    with open(os.devnull, 'r+') as devnull:
      os.dup2(devnull.fileno(), 0)
      os.dup2(devnull.fileno(), 1)
    with open(request['stderr_path'], 'w') as stderr:
      os.dup2(stderr.fileno(), 2)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['environment'])
    try:
      function = request.get('function')
      if function:
        with user_module_lib.first_on_path(function['import_root']):
          user_module_lib.load_user_module({
              function['key']: function['path'],
              user_module_lib.USER_MODULE_FILE_KEY: request['module_file']})
      else:
        user_module_lib.load_user_module(
            {'module_file': request['module_file']})
      verdict = {'ok': True}
    except user_module_lib.UserModuleError as e:
      verdict = {'ok': False, 'error': str(e)}
    with open(request['verdict_path'], 'w') as f:
      json.dump(verdict, f)
  except BaseException:  # pylint: disable=broad-except
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(1)  # pylint: disable=protected-access
  sys.stderr.flush()
  os._exit(0)  # pylint: disable=protected-access


def _how_it_ended(exit_code: int) -> str:
  if exit_code >= 0:
    return f'exit code {exit_code}'
  try:
    return f'killed by {signal.Signals(-exit_code).name}'
  except ValueError:
    return f'killed by signal {-exit_code}'


def _last_lines(path: str) -> str:
  if not os.path.exists(path):
    return ''
  with open(path, errors='replace') as f:
    return '\n'.join(f.read().strip().splitlines()[-_LAST_LINES:])
