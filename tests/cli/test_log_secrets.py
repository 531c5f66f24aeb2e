"""Secrets given to the CLI never reach its output or its logs (issue 50,
item 9): Beam args in the run log (TFX's deployment-config dump), a
connection string's key, a refused option's value. A whole taxi run given
SECRET_BEAM_ARGS: tests/test_pipeline_e2e.py's bundled run."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

from tests import conftest
from tests.cli import test_run_command as run_command_tests
EXAMPLE_DIR = os.path.join(conftest.REPO_ROOT, 'examples', 'penguin_tpu')
S3_SECRET = 'S3-SECRET-VALUE'
AZURE_KEY = 'AZURE-KEY-VALUE=='
SECRET_BEAM_ARGS = (
    f'--beam-arg=--s3_secret_access_key={S3_SECRET}',
    '--beam-arg=--azure_connection_string=DefaultEndpointsProtocol=https;'
    f'AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net')


_exit_code = run_command_tests._exit_code  # pylint: disable=protected-access


def _cli(args, cwd, env=None):
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', *args], cwd=cwd,
      capture_output=True, text=True, env=env, check=False)


def assert_no_secret(*texts):
  for text in texts:
    assert S3_SECRET not in text and AZURE_KEY not in text, text[-5000:]


def _run_log(output_root):
  [log_path] = glob.glob(os.path.join(output_root, 'logs', 'run-*.log'))
  with open(log_path) as f:
    return f.read()


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_log_masks_secret_beam_args(tmp_path):
  # A user pipeline without data: it fails at its first component, after
  # TFX has logged its deployment config (the Beam args of every Beam
  # component, twice each).
  shutil.copytree(EXAMPLE_DIR, tmp_path / 'my_pipeline')
  (tmp_path / 'no_data').mkdir()
  env = dict(os.environ, PENGUIN_DATA_ROOT=str(tmp_path / 'no_data'),
             PENGUIN_PIPELINE_ROOT=str(tmp_path / 'run_root'))
  result = _cli(['run', '--pipeline',
                 f'{tmp_path / "my_pipeline" / "penguin_pipeline.py"}'
                 ':create_pipeline', '--output-root', str(tmp_path / 'out'),
                 *SECRET_BEAM_ARGS], cwd=str(tmp_path), env=env)
  assert result.returncode == 1, result.stderr
  log = _run_log(tmp_path / 'out')
  assert_no_secret(result.stdout, result.stderr, log)
  assert 'beam_pipeline_args: "--s3_secret_access_key=***"' in log, log
  assert 'AccountKey=***;EndpointSuffix' in log, log


@pytest.mark.parametrize('argv', [
    ['--beam-arg=--some_token=TOKEN-VALUE'],  # Not a Beam option.
    ['--some_token=TOKEN-VALUE'],  # Not a CLI option.
    ['--beam-arg=--some-token=TOKEN-VALUE'],  # Beam would discard dashes.
])
def test_a_refused_secret_option_is_named_not_echoed(tmp_path, capsys,
                                                    argv):
  code = _exit_code(['run', '--output-root', str(tmp_path / 'out'), *argv])
  assert code == 2
  out, err = capsys.readouterr()
  assert 'TOKEN-VALUE' not in out + err, err
  assert 'token=***' in err, err


@pytest.mark.slow
@pytest.mark.heavy
def test_compile_masks_and_warns_of_a_connection_string_key(tmp_path):
  result = _cli(['compile', '--pipeline-root', 'gs://bucket/root',
                 '--data-root', 'gs://bucket/data', '--output-dir',
                 str(tmp_path), SECRET_BEAM_ARGS[1]], cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr
  assert_no_secret(result.stdout, result.stderr)
  assert ('Warning: the compiled file carries the secret(s) '
          '--azure_connection_string=DefaultEndpointsProtocol=https;'
          'AccountName=acct;AccountKey=***;EndpointSuffix=core.windows.net in '
          'plain text') in result.stdout, result.stdout
  [log_line] = [line for line in result.stdout.splitlines()
                if line.startswith('  Full log:')]
  with open(log_line.split()[-1]) as f:
    assert_no_secret(f.read())
