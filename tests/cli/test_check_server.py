"""The trainer module check's child processes and the server they fork from."""

import os
import subprocess
import sys

import pytest

from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer_cli import check_server

from tests.conftest import REPO_ROOT
from tests.conftest import TEST_MODULES_DIR

NEEDS_ENV = os.path.join(TEST_MODULES_DIR, 'needs_env_at_import.py')
LINEAR = os.path.join(TEST_MODULES_DIR, 'linear_module.py')


def test_each_check_sees_the_callers_environment_and_folder(
    monkeypatch, tmp_path):
  monkeypatch.delenv('TPU_TRAINER_TEST_SETTING', raising=False)
  with pytest.raises(user_module.UserModuleError,
                     match='TPU_TRAINER_TEST_SETTING is not "on"'):
    check_server.check_in_child(NEEDS_ENV)
  # The same server (started above), the environment of this call.
  monkeypatch.setenv('TPU_TRAINER_TEST_SETTING', 'on')
  check_server.check_in_child(NEEDS_ENV)
  # A relative path is the caller's working folder's.
  monkeypatch.chdir(TEST_MODULES_DIR)
  check_server.check_in_child('linear_module.py')
  monkeypatch.chdir(tmp_path)
  with pytest.raises(user_module.UserModuleError, match='linear_module.py'):
    check_server.check_in_child('linear_module.py')


def test_a_server_that_ended_is_started_again():
  check_server.start_server()
  check_server._server.kill()  # pylint: disable=protected-access
  check_server._server.wait()  # pylint: disable=protected-access
  check_server.check_in_child(LINEAR)


_UNGUARDED_SCRIPT = (
    'from tfx_tpu_trainer_cli import check_server\n'
    'import sys\n'
    'for _ in range(2):\n'
    '  check_server.check_in_child(sys.argv[1])\n'
    '  print("checked", flush=True)\n')


@pytest.mark.slow
def test_a_script_without_a_main_guard_checks_twice(tmp_path):
  """Unlike multiprocessing's fork server, which re-runs such a script."""
  script = tmp_path / 'check_twice.py'
  script.write_text(_UNGUARDED_SCRIPT)
  result = subprocess.run([sys.executable, str(script), LINEAR], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.splitlines() == ['checked', 'checked']


def test_run_ends_the_check_server_once_the_checks_are_done(tmp_path, capsys):
  """Item 12 of issue 38: the server (about 0.8 GB) no longer lives as long
  as the pipeline; here the run fails fast at ExampleGen (no data)."""
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  example_dir = os.path.join(
      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
          __file__)))), 'examples', 'penguin_tpu')
  (tmp_path / 'data').mkdir()
  path = tmp_path / 'my_pipeline.py'
  path.write_text(
      f'import sys\nsys.path.insert(0, {example_dir!r})\n'
      'import penguin_pipeline\n\n'
      'def create_pipeline():\n'
      '  return penguin_pipeline.create_pipeline(\n'
      f'      data_root={str(tmp_path / "data")!r},\n'
      f'      pipeline_root={str(tmp_path / "root")!r})\n')
  code = cli.main(['run', '--pipeline', f'{path}:create_pipeline',
                   '--output-root', str(tmp_path / 'out')])
  captured = capsys.readouterr()
  assert code == 1, captured.err
  assert 'does not match any files' in captured.out + captured.err
  # The module was checked in the server's child, then the server ended.
  assert check_server._server is None  # pylint: disable=protected-access


@pytest.mark.parametrize('bundled', [True, False])
def test_only_a_trainer_module_not_bundled_starts_the_server(
    tmp_path, monkeypatch, bundled):
  """A bundled module never ends the process: `run` of the bundled pipeline
  checks it in its own process and starts no server (a process importing
  TensorFlow and TFX); a user's module starts it."""
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import run as run_command  # pylint: disable=g-import-not-at-top
  check_server.stop_server()
  starts = []
  running_server = check_server._running_server  # pylint: disable=protected-access
  monkeypatch.setattr(check_server, '_running_server',
                      lambda: starts.append(1) or running_server())
  module = paths.TRAINER_MODULE_FILE if bundled else LINEAR
  assert paths.is_bundled_module(module) == bundled
  args = cli.build_parser().parse_args(
      ['run', '--output-root', str(tmp_path / 'out'), '--module-file', module])
  try:
    _, checked = run_command._checked_taxi_pipeline(  # pylint: disable=protected-access
        args, str(tmp_path / 'out'))
  finally:
    check_server.stop_server()
  assert checked == module
  assert bool(starts) != bundled
