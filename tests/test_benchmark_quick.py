"""`python -m benchmarks.run_benchmark --quick` end to end (about 2.5 min)."""

import glob
import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASUREMENTS = ('stock_trainer@40', 'tpu_trainer@40', 'input@40',
                'tpu_trainer@512', 'input@512', 'trainer_input@512')


@pytest.mark.slow
def test_quick_benchmark_measures_everything(tmp_path):
  output_dir = tmp_path / 'results'
  completed = subprocess.run(
      [sys.executable, '-m', 'benchmarks.run_benchmark', '--quick',
       f'--output_dir={output_dir}', f'--work_dir={tmp_path / "work"}'],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
      check=False)
  assert completed.returncode == 0, completed.stdout[-3000:] + (
      completed.stderr[-3000:])
  assert 'Targets:' in completed.stdout

  [path] = glob.glob(str(output_dir / '*.json'))
  with open(path) as f:
    results = json.load(f)
  assert results['settings']['repeats'] == 1
  assert results['data']['rows'] == 3000
  for name in MEASUREMENTS:
    entry = results['summary'][name]
    assert entry['runs'] == 1 and entry['failed'] == 0, name
    assert entry['examples_per_sec'] > 0, name
    assert entry['max_rss_kb'] > 100_000, name
  for name in ('stock_trainer@40', 'tpu_trainer@40', 'tpu_trainer@512'):
    entry = results['summary'][name]
    assert 0 < entry['do_seconds'] < entry['process_seconds'], name
    assert {'before_first_step_seconds', 'training_loop_seconds',
            'after_last_step_seconds', 'last_step_to_eval_end_seconds',
            'eval_end_to_do_end_seconds'} <= set(entry['phases']), name
  # Both trainers exported where TFX's Evaluator and Pusher look.
  for run in ('stock_trainer-b40-r0', 'tpu_trainer-b40-r0'):
    assert glob.glob(str(tmp_path / 'work' / 'runs' / run / 'output' /
                         'model' / 'Format-Serving' / '*.pb*')), run
  assert all(entry['ratio_of_medians'] > 0
             for entry in results['ratios'].values())
  assert [t['verdict'] for t in results['targets']
         ] and all(t['verdict'] in ('PASS', 'FAIL')
                   for t in results['targets'])
