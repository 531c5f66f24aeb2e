"""`make bench`'s progress-off row: TPUTrainer at batch 40, progress on vs off."""

import json

from benchmarks import report
from benchmarks import run_benchmark


def test_progress_row_follows_the_tpu_trainer_at_batch_40():
  with_row = run_benchmark._measurements(512, progress_row=True)  # pylint: disable=protected-access
  without = run_benchmark._measurements(512)  # pylint: disable=protected-access
  assert [m for m in with_row if m not in without] == [
      (report.TPU_NO_PROGRESS, 40)]
  position = with_row.index((report.TPU, 40))
  assert with_row[position + 1] == (report.TPU_NO_PROGRESS, 40)


def test_progress_row_runs_the_tpu_trainer_with_progress_off():
  config = json.dumps({'host_iterations_per_loop': 100})
  args = run_benchmark._measure_args(report.TPU_NO_PROGRESS, 100, config)  # pylint: disable=protected-access
  assert args[:2] == ['--kind=tpu_trainer', '--module=tpu']
  assert json.loads(args[2][len('--tpu_trainer_config='):]) == {
      'host_iterations_per_loop': 100, 'show_progress': False}
  # The progress-on run keeps the default (show_progress unset: true).
  on = run_benchmark._measure_args(report.TPU, 100, config)  # pylint: disable=protected-access
  assert on[2] == f'--tpu_trainer_config={config}'
  steps = {'steps': 1, 'large_batch_steps': 2, 'fast_steps': 3,
           'fast_large_batch_steps': 4}
  assert run_benchmark.long_steps(report.TPU_NO_PROGRESS, 40, steps) == 3
  assert ('tpu_trainer@40', 'tpu_no_progress@40') in (
      run_benchmark._ratio_pairs(512))  # pylint: disable=protected-access
