"""Two `tfx-tpu-trainer run`s at once on one output root; nothing in /tmp.

Each run reports its own model (read from its own pipeline run's
executions), and a run leaves no file in the system temp directory: the
child processes get TMPDIR pointed at an empty folder, counted before and
after.
"""

import os
import re
import subprocess
import sys

import pytest

from tfx_tpu_trainer_cli import local_runner
from tfx_tpu_trainer_cli import run_temp_dir

from tests import conftest

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _start_cli(data_root, output_root, train_steps, temp_dir, log_path):
  command = [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'run',
             '--data-root', data_root, '--output-root', output_root,
             '--train-steps', str(train_steps), '--eval-steps', '2',
             '--train-batch-size', '16', '--eval-batch-size', '16',
             '--min-accuracy', '0', '--min-balanced-accuracy', '0']
  return subprocess.Popen(
      command, cwd=conftest.REPO_ROOT, env=dict(os.environ, TMPDIR=temp_dir),
      stdout=open(log_path, 'w'), stderr=subprocess.STDOUT)


def _count_files(directory):
  return sum(len(files) + len(dirs) for _, dirs, files in os.walk(directory))


def test_concurrent_runs_report_their_own_model_and_leave_no_temp_files(
    tmp_path):
  data_root = conftest.write_taxi_slice(str(tmp_path / 'data'), rows=200)
  output_root = str(tmp_path / 'out')
  temp_dir = tmp_path / 'system_tmp'
  temp_dir.mkdir()
  assert _count_files(temp_dir) == 0
  steps = (20, 30)
  processes = [
      _start_cli(data_root, output_root, train_steps, str(temp_dir),
                 tmp_path / f'run{train_steps}.log')
      for train_steps in steps]
  codes = [process.wait(timeout=900) for process in processes]
  outputs = {train_steps: (tmp_path / f'run{train_steps}.log').read_text()
             for train_steps in steps}
  assert codes == [0, 0], outputs

  models = set()
  for train_steps, output in outputs.items():
    metrics = re.search(r'Trainer eval metrics: .*', output).group(0)
    assert f'global_step={train_steps},' in metrics, output
    model = re.search(r'Trained model: +(\S+)', output).group(1)
    models.add(model)
  assert len(models) == 2
  logs = {re.search(r'full log: (\S+)', output).group(1)
          for output in outputs.values()}
  assert len(logs) == 2  # Runs started in the same second log apart.

  assert _count_files(temp_dir) == 0, sorted(os.listdir(temp_dir))
  layout = local_runner.OutputLayout(output_root)
  assert not os.path.exists(os.path.join(layout.pipeline_root,
                                         run_temp_dir.TMP_DIR_NAME))
