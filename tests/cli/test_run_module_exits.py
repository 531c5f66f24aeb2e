"""`run` exits 1 naming the module when module code exits the process."""

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.conftest import TEST_MODULES_DIR
from tests.conftest import write_taxi_slice


def _run_cli(*argv):
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'run'] + list(argv),
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)


def test_os_exit_at_import_of_the_trainer_module_is_a_usage_error(tmp_path):
  module = os.path.join(TEST_MODULES_DIR, 'os_exit_on_import.py')
  result = _run_cli('--output-root', str(tmp_path / 'out'), '--module-file',
                    module)
  assert result.returncode == 2, (result.stdout, result.stderr)
  assert (f'tfx-tpu-trainer run: error: --module-file: The trainer module '
          f'{module} ended the process that imported it (exit code 0) before '
          'it could be checked') in result.stderr, result.stderr
  assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_sys_exit_in_preprocessing_fn_fails_the_run_naming_it(tmp_path):
  data = write_taxi_slice(str(tmp_path / 'data'), rows=300)
  module = os.path.join(TEST_MODULES_DIR, 'exits_in_preprocessing_fn.py')
  output_root = tmp_path / 'out'
  result = _run_cli('--data-root', data, '--output-root', str(output_root),
                    '--preprocessing-module-file', module, '--train-steps',
                    '5', '--eval-steps', '1', '--train-batch-size', '16',
                    '--eval-batch-size', '16')
  assert result.returncode == 1, (result.stdout, result.stderr)
  assert ('The pipeline failed: ModuleExitError: The pipeline stopped: '
          f'SystemExit(0) was raised while Transform ran (module_file '
          f'{module})') in result.stdout, result.stdout
  assert 'its execution is marked failed' in result.stdout
  database = output_root / 'metadata' / 'taxi_tpu' / 'metadata.db'
  states = sqlite3.connect(str(database)).execute(
      'SELECT last_known_state FROM Execution').fetchall()
  assert (2,) not in states  # No execution left RUNNING (state 2).
