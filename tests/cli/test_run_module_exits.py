"""`run` exits 1 naming the module when module code exits the process."""

import os
import sqlite3

import pytest

from tests.conftest import TEST_MODULES_DIR
from tests.conftest import write_taxi_slice

from tfx_tpu_trainer import errors
from tfx_tpu_trainer_cli import main as cli


def _run(capsys, *argv):
  """`run` in this process, its exit code and standard error.

  Had the module's exit reached this process, pytest (or its xdist worker)
  would have ended instead of reporting a result.
  """
  code = cli.main(['run'] + list(argv))
  return code, capsys.readouterr().err


def test_os_exit_at_import_of_the_trainer_module_is_a_usage_error(
    tmp_path, capsys):
  module = os.path.join(TEST_MODULES_DIR, 'os_exit_on_import.py')
  code, err = _run(capsys, '--output-root', str(tmp_path / 'out'),
                   '--module-file', module)
  assert code == 2, err
  assert (f'tfx-tpu-trainer run: error: --module-file: The trainer module '
          f'{module} ended the process that imported it (exit code 0) before '
          'it could be checked') in err, err
  assert not (tmp_path / 'out').exists()


def test_a_crash_at_import_of_the_trainer_module_is_named_with_its_output(
    tmp_path, capsys):
  module = os.path.join(TEST_MODULES_DIR, 'crashes_on_import.py')
  code, err = _run(capsys, '--output-root', str(tmp_path / 'out'),
                   '--module-file', module)
  assert code == 2, err
  assert (f'--module-file: The trainer module {module} ended the process '
          'that imported it (killed by SIGSEGV) before it could be checked'
          ) in err, err
  assert 'Last output:\nabout to read address 0' in err, err
  assert not (tmp_path / 'out').exists()


def test_sys_exit_in_preprocessing_fn_is_a_usage_error_before_any_component(
    tmp_path, capsys):
  data = write_taxi_slice(str(tmp_path / 'data'), rows=300)
  module = os.path.join(TEST_MODULES_DIR, 'exits_in_preprocessing_fn.py')
  output_root = tmp_path / 'out'
  code, err = _run(capsys, '--data-root', data, '--output-root',
                   str(output_root), '--preprocessing-module-file', module,
                   '--train-steps', '5', '--eval-steps', '1',
                   '--train-batch-size', '16', '--eval-batch-size', '16')
  assert code == 2, err
  assert (f'preprocessing_fn of {module} raised SystemExit(0) (e.g. '
          'sys.exit()) while it was traced to find what the Evaluator reads, '
          'before any component ran') in err, err
  assert not (output_root / 'metadata').exists()


@pytest.mark.slow
def test_sys_exit_in_preprocessing_fn_fails_the_local_run_naming_it(tmp_path):
  """The local runner's own handling, for pipelines run without the CLI."""
  from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
  data = write_taxi_slice(str(tmp_path / 'data'), rows=300)
  module = os.path.join(TEST_MODULES_DIR, 'exits_in_preprocessing_fn.py')
  output_root = tmp_path / 'out'
  options = local_runner.local_options(
      str(output_root), data_root=data, preprocessing_module_file=module,
      train_steps=5, eval_steps=1,
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16})
  with pytest.raises(errors.ModuleExitError) as error:
    local_runner.run(options, printer=lambda *_, **__: None)
  message = str(error.value)
  assert ('The pipeline stopped: SystemExit(0) was raised while Transform '
          f'ran (module_file {module})') in message, message
  assert 'its execution is marked failed' in message
  database = output_root / 'metadata' / 'taxi_tpu' / 'metadata.db'
  states = sqlite3.connect(str(database)).execute(
      'SELECT last_known_state FROM Execution').fetchall()
  assert (2,) not in states  # No execution left RUNNING (state 2).
