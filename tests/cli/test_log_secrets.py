"""Secrets given to the CLI never reach its output or its logs (issue 50,
item 9): Beam args in the run log (TFX's deployment-config dump), a
connection string's key, a refused option's value. A whole taxi run given
SECRET_BEAM_ARGS: tests/test_pipeline_e2e.py's bundled run. The two commands
in fresh processes are the ones tests/cli/test_start_up_output.py reads too,
run once (tests/fixtures/cli_processes.py)."""

import glob
import os

import pytest

from tests.fixtures import cli_exit
from tests.fixtures import cli_processes



def assert_no_secret(*texts):
  for text in texts:
    assert (cli_processes.S3_SECRET not in text and
            cli_processes.AZURE_KEY not in text), text[-5000:]


def _run_log(output_root):
  [log_path] = glob.glob(os.path.join(output_root, 'logs', 'run-*.log'))
  with open(log_path) as f:
    return f.read()


@pytest.mark.slow
@pytest.mark.heavy
def test_a_run_log_masks_secret_beam_args(penguin_run_without_data):
  # A user pipeline without data: it fails at its first component, after
  # TFX has logged its deployment config (the Beam args of every Beam
  # component, twice each).
  result = penguin_run_without_data
  assert result.returncode == 1, result.stderr
  log = _run_log(os.path.join(result.folder, 'out'))
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
  code = cli_exit.exit_code(['run', '--output-root', str(tmp_path / 'out'), *argv])
  assert code == 2
  out, err = capsys.readouterr()
  assert 'TOKEN-VALUE' not in out + err, err
  assert 'token=***' in err, err


@pytest.mark.slow
@pytest.mark.heavy
def test_compile_masks_and_warns_of_a_connection_string_key(
    taxi_compile_with_a_secret):
  result = taxi_compile_with_a_secret
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
