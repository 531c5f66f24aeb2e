"""Checks a trainer module in a child process, before a pipeline runs.

Importing a user's module runs its code: `os._exit(0)` at import would end
the checking process itself (the CLI `run` exiting 0 before any component),
and a crash or a hang in import-time code would take the caller with it.
`check_trainer_module` imports and checks the module
(`user_module.load_user_module`) in a child Python and reads the verdict it
writes to a file, so an exit of the module is a clear error naming it.
"""

import json
import os
import subprocess
import sys
import tempfile

from tfx_tpu_trainer import user_module as user_module_lib

_CHILD = '''
import json, sys
from tfx_tpu_trainer import user_module
result_path, module_file = sys.argv[1:]
try:
  user_module.load_user_module({"module_file": module_file})
  verdict = {"ok": True}
except user_module.UserModuleError as e:
  verdict = {"ok": False, "error": str(e)}
with open(result_path, "w") as f:
  json.dump(verdict, f)
'''


def check_trainer_module(module_file: str) -> None:
  """Imports and checks `module_file` in a child process.

  Args:
    module_file: the trainer module's path.

  Raises:
    user_module.UserModuleError: the module breaks the contract, or its
      code ended the child process (exit, os._exit, a crash) before the
      check finished.
  """
  descriptor, result_path = tempfile.mkstemp(prefix='tpu-trainer-check-',
                                             suffix='.json')
  os.close(descriptor)
  os.remove(result_path)
  try:
    child = subprocess.run(
        [sys.executable, '-c', _CHILD, result_path, module_file],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        check=False, env=_child_environment())
    if os.path.exists(result_path):
      with open(result_path) as f:
        verdict = json.load(f)
      if not verdict['ok']:
        raise user_module_lib.UserModuleError(verdict['error'])
      return
  finally:
    if os.path.exists(result_path):
      os.remove(result_path)
  last_lines = '\n'.join(child.stderr.strip().splitlines()[-3:])
  raise user_module_lib.UserModuleError(
      f'The trainer module {module_file} ended the process that imported it '
      f'(exit code {child.returncode}) before it could be checked: its '
      'import-time code (or a function the check calls) exits, e.g. '
      'sys.exit() or os._exit() at module level, or crashes. Module code '
      'must define functions and constants, never end the process.'
      + (f' Last output:\n{last_lines}' if last_lines else ''))


def _child_environment():
  """The child finds this package where the parent found it."""
  environment = dict(os.environ)
  package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  environment['PYTHONPATH'] = os.pathsep.join(
      [package_root] + [p for p in [environment.get('PYTHONPATH')] if p])
  return environment
