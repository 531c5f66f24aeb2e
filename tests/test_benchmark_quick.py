"""`python -m benchmarks.run_benchmark --quick` end to end: `make bench-smoke`.

Not part of `make test`: it starts 28 trainer and measurement processes,
several minutes on a quiet 2-core machine and far longer on a loaded one.
It runs with TFX_TPU_TRAINER_BENCH_SMOKE=1 (what `make bench-smoke` sets),
with no wall-clock limit: a slow machine makes it slow, never failing.
"""

import glob
import json
import os
import subprocess
import sys

import pytest

from benchmarks import report

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE_ENV = 'TFX_TPU_TRAINER_BENCH_SMOKE'
TRAINERS = tuple(report.name(kind, batch) for batch in (40, 512)
                 for kind in report.TRAINERS)
# TPU embeddings at the large batch: one run each under --quick.
EMBEDDINGS = tuple(report.name(kind, 512) for kind in report.EMBEDDING_KINDS)
TEN_MILLION = report.name(report.EMBEDDING_10M, 512)
MEASUREMENTS = TRAINERS + tuple(
    report.name(kind, batch) for batch in (40, 512)
    for kind in (report.LIMIT, report.LIMIT_MODEL_FN, report.INPUT)) + (
        'trainer_input@512',) + EMBEDDINGS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.environ.get(SMOKE_ENV),
                       reason=f'benchmark smoke run: make bench-smoke (sets '
                       f'{SMOKE_ENV}=1)'),
]


def test_quick_benchmark_measures_everything(tmp_path):
  output_dir = tmp_path / 'results'
  completed = subprocess.run(
      [sys.executable, '-m', 'benchmarks.run_benchmark', '--quick',
       f'--output_dir={output_dir}', f'--work_dir={tmp_path / "work"}'],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)
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
    assert entry['max_rss_kb'] > 100_000, name
  for name in set(MEASUREMENTS) - set(TRAINERS) - {TEN_MILLION}:
    assert results['summary'][name]['rate'] > 0, name
  # The 10-million-row table (float32, 8 wide): the checkpoint holds it and
  # its Adagrad slot, the export the table alone; the process held both.
  table_bytes = report.EMBEDDING_10M_ROWS * 8 * 4
  ten_million = results['summary'][TEN_MILLION]
  assert ten_million['checkpoint_bytes'] > 2 * table_bytes
  assert table_bytes < ten_million['export_bytes'] < 2 * table_bytes
  assert ten_million['max_rss_kb'] * 1024 > 2 * table_bytes
  for name in EMBEDDINGS + ('tpu_trainer@512',):
    assert 0 <= results['summary'][name]['final_metrics']['accuracy'] <= 1
  assert 'tpu_embedding@512/tpu_keras_embedding@512' in results['ratios']
  assert 'TPU embeddings on CPU at batch 512' in completed.stdout
  for name in TRAINERS:
    # A trainer's rate is the extra examples over the extra wall time of its
    # long Do(): on a busy machine a quick pair's long run can come out no
    # slower, and then (only then) the pair has no rate.
    entry = results['summary'][name]
    assert 0 < entry['short_do_seconds'], name
    assert entry['do_seconds'] < entry['process_seconds'], name
    if entry['do_seconds'] > entry['short_do_seconds']:
      assert entry['external_examples_per_sec'] > 0, name
      assert entry['rate'] == entry['external_examples_per_sec'], name
    else:
      assert entry['rate'] is None, name
  for name in ('stock_trainer@40', 'tpu_trainer@40', 'tpu_keras@512'):
    # The estimators' own step rates and phases, beside the external ones.
    entry = results['summary'][name]
    assert entry['examples_per_sec'] > 0, name
    assert {'before_first_step_seconds', 'training_loop_seconds',
            'after_last_step_seconds'} <= set(entry['phases']), name
  # Every trainer exported where TFX's Evaluator and Pusher look.
  for run in ('stock_trainer-b40-r0', 'tpu_trainer-b40-r0',
              'tpu_keras-b40-r0', 'keras_fit_spe-b40-r0'):
    assert glob.glob(str(tmp_path / 'work' / 'runs' / run / 'output' /
                         'model' / 'Format-Serving' / '*.pb*')), run
  for key, entry in results['ratios'].items():
    top, bottom = key.split('/')
    rates = (results['summary'][top]['rate'],
             results['summary'][bottom]['rate'])
    if None in rates:
      assert entry['ratio_of_medians'] is None, key
    else:
      assert entry['ratio_of_medians'] == pytest.approx(rates[0] / rates[1])
  assert results['targets']
  # The scale run: x1 and x3 of the training split, with the table, the
  # disk cache and streaming; one table and issue 33's targets, printed and
  # in the results.
  # Each factor also drains the streamed input alone (no model): its rate only.
  all_rows = results['scale']['rows']
  assert [(row['factor'], row['cache']) for row in all_rows] == [
      (1, 'parsed'), (1, 'disk'), (1, 'none'), (1, 'stream_input'),
      (3, 'parsed'), (3, 'disk'), (3, 'none'), (3, 'stream_input')]
  for row in all_rows[3::4]:
    assert 'error' not in row and row['rate'] > 0, row
  scale_rows = [row for row in all_rows if row['cache'] != 'stream_input']
  for row in scale_rows:
    assert 'error' not in row and row['max_rss_kb'] > 100_000, row
    assert row['first_step_seconds'] > 0, row
  assert scale_rows[3]['rows'] == 3 * scale_rows[0]['rows']
  # The disk cache's pair trains one more epoch in both runs.
  assert scale_rows[4]['first_epoch_steps'] == -(-scale_rows[3]['rows'] //
                                                 512)
  assert 'Scale run' in completed.stdout and 'Scale targets' in (
      completed.stdout)
  scale_targets = results['scale']['targets']
  assert [target['target'].split(',')[0] for target in scale_targets] == [
      'x3 rate', 'x3 streamed input alone', 'x3 rate', 'stream rate x3 / x1',
      'stream peak RSS x3 / x1', 'disk rate x3 / x1', 'disk peak RSS x3 / x1',
      'table time to the first step x3 / x1']
  assert scale_targets[1]['verdict'] == 'INFO'
  for target in scale_targets:
    assert target['verdict'] in ('PASS', 'FAIL', 'N/A', 'INFO'), target
    assert (target['verdict'] == 'N/A') == (target['value'] is None), target
    assert f'[{target["verdict"]:<4}] {target["target"]}' in completed.stdout
  assert '--only=scale' in results['scale']['command']
  for target in results['targets']:
    # N/A exactly where a figure of the target is missing.
    top, bottom = target['figures']
    if top is None or not bottom:
      assert target['verdict'] == 'N/A' and target['value'] is None, target
    else:
      assert target['verdict'] in ('PASS', 'FAIL'), target
      assert target['value'] == pytest.approx(top / bottom), target
