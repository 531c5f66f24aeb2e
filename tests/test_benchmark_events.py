"""Event reading, step-rate windows, ratios and targets of the benchmark."""

import os
import sys

import pytest
import tensorflow as tf

from benchmarks import events
from benchmarks import launch
from benchmarks import report


def _write_v1_rates(directory, step_rates, extra_tag='loss'):
  """Writes `global_step/sec` as estimator hooks do (v1 simple_value)."""
  _write_v1(directory, [(step, {events.STEP_RATE_TAG: rate, extra_tag: 0.5})
                        for step, rate in step_rates])


def _write_v1(directory, steps_and_values):
  with tf.Graph().as_default():
    writer = tf.compat.v1.summary.FileWriter(directory)
    for step, values in steps_and_values:
      writer.add_summary(
          tf.compat.v1.Summary(value=[
              tf.compat.v1.Summary.Value(tag=tag, simple_value=value)
              for tag, value in values.items()
          ]), step)
    writer.close()


def test_reads_v1_and_v2_scalars(tmp_path):
  _write_v1_rates(str(tmp_path / 'v1'), [(101, 600.0), (201, 650.0)])
  writer = tf.summary.create_file_writer(str(tmp_path / 'v2'))
  with writer.as_default():
    tf.summary.scalar(events.STEP_RATE_TAG, 700.0, step=101)
    tf.summary.scalar('loss', 0.25, step=101)
    # Evaluations also write a string tensor (the checkpoint path).
    tf.summary.text('checkpoint_path', 'model.ckpt-101', step=101)
  writer.close()

  [v1_file] = events.event_files(str(tmp_path / 'v1'))
  [v2_file] = events.event_files(str(tmp_path / 'v2'))
  v1 = events.read_scalars(v1_file, events.STEP_RATE_TAG)
  v2 = events.read_scalars(v2_file)
  assert [(s.step, s.value) for s in v1] == [(101, 600.0), (201, 650.0)]
  assert sorted((s.step, s.value) for s in v2) == [(101, 0.25), (101, 700.0)]


def test_step_rates_searches_subdirectories_and_skips_other_tags(tmp_path):
  model_dir = tmp_path / 'model_run'
  _write_v1_rates(str(model_dir / 'Format-Serving'),
                  [(101, 500.0), (201, 510.0), (301, 520.0)])
  _write_v1(str(model_dir / 'eval'), [(301, {'accuracy': 0.9})])

  samples = events.step_rates(str(model_dir))
  assert [s.value for s in samples] == [500.0, 510.0, 520.0]
  first, last = events.training_window(str(model_dir))
  assert first <= last
  assert events.training_window(str(tmp_path / 'empty')) is None


def test_windows_make_per_step_and_per_100_step_samples_agree():
  # TPUEstimator on CPU: a sample after every step (steps 2..301), at
  # 1000 steps/s, except a slow step 150 (10 steps/s).
  per_step = [
      events.ScalarEvent('f', step, 0.0, 10.0 if step == 150 else 1000.0)
      for step in range(2, 302)
  ]
  # StepCounterHook: one sample per 100 steps, same steps and times.
  slow_window_rate = 100 / (99 / 1000.0 + 1 / 10.0)
  per_100 = [
      events.ScalarEvent('f', 101, 0.0, 1000.0),
      events.ScalarEvent('f', 201, 0.0, slow_window_rate),
      events.ScalarEvent('f', 301, 0.0, 1000.0),
  ]
  assert events.window_rates(per_step) == pytest.approx(
      events.window_rates(per_100))
  assert events.window_rates(per_100) == pytest.approx(
      [1000.0, slow_window_rate, 1000.0])
  # The warm-up window goes; the median ignores one slow window.
  assert events.median_after_warmup(
      events.window_rates(per_step)) == pytest.approx(
          (slow_window_rate + 1000.0) / 2)


def test_windows_of_too_few_steps_keep_one_partial_window():
  samples = [events.ScalarEvent('f', step, 0.0, 500.0) for step in (2, 3, 4)]
  assert events.window_rates(samples) == pytest.approx([500.0])
  assert events.window_rates([]) == []


def test_median_after_warmup():
  assert events.median_after_warmup([1.0, 10.0, 30.0, 20.0]) == 20.0
  assert events.median_after_warmup([7.0]) == 7.0
  with pytest.raises(ValueError):
    events.median_after_warmup([])
  assert events.median([None, 3.0, 1.0]) == 2.0
  assert events.median([]) is None


def _run(examples_per_sec, overhead=3.0, rss=800_000, external=None,
         external_overhead=None):
  return {'examples_per_sec': examples_per_sec, 'overhead_seconds': overhead,
          'external_examples_per_sec': external,
          'external_overhead_seconds': external_overhead,
          'max_rss_kb': rss, 'phases': {'training_loop_seconds': 4.0}}


def test_external_rate_and_overhead_from_two_step_counts():
  short = {'train_steps': 500, 'do_seconds': 6.0}
  long = {'train_steps': 12500, 'do_seconds': 18.0}
  figures = report.external_figures(short, long, batch_size=40)
  # 12,000 extra steps of 40 examples in 12 extra seconds.
  assert figures['external_examples_per_sec'] == pytest.approx(40_000)
  assert figures['external_overhead_seconds'] == pytest.approx(5.5)
  assert figures['short_do_seconds'] == 6.0
  # A long run that was not slower gives no rate rather than a wrong one,
  # and its event-file rate does not stand in for it.
  failed = dict(long, **report.external_figures(long, long, 40),
                examples_per_sec=30_000.0)
  assert failed['external_examples_per_sec'] is None
  assert report.run_rate(failed) is None
  assert report.run_rate({'examples_per_sec': 5.0}) == 5.0  # input runs


def test_summary_ratios_and_targets():
  stock, tpu = report.name(report.STOCK, 40), report.name(report.TPU, 40)
  runs = {
      stock: [_run(20000, external=19000, external_overhead=9.0),
              _run(22000, external=21000, external_overhead=9.0),
              {'error': 'exit code 1'}],
      tpu: [_run(32000, external=63000, external_overhead=4.0),
            _run(34000, overhead=12.0, external=66000, external_overhead=4.0),
            _run(33000, external=64000, external_overhead=4.0)],
      report.INPUT_40: [_run(100000)],
  }
  summary = {name: report.summarize_runs(results)
             for name, results in runs.items()}
  assert summary[stock]['runs'] == 2
  assert summary[stock]['failed'] == 1
  assert summary[stock]['examples_per_sec'] == 21000
  # Ratios use the external rate where there is one, else the own rate.
  assert summary[stock]['rate'] == 20000
  assert summary[report.INPUT_40]['rate'] == 100000
  assert summary[tpu]['overhead_seconds'] == 3.0
  assert summary[tpu]['phases']['training_loop_seconds'] == 4.0

  assert report.ratio(summary, tpu, stock) == pytest.approx(64000 / 20000)
  assert report.ratio(summary, tpu, stock, 'examples_per_sec') == (
      pytest.approx(33000 / 21000))
  assert report.paired_ratios(runs, tpu, stock) == pytest.approx(
      [63000 / 19000, 66000 / 21000])
  assert report.ratio(summary, tpu, 'missing@1') is None

  verdicts = {v['target']: v['verdict'] for v in report.evaluate(summary, 512)}
  assert verdicts['TPUTrainer (model_fn module) / stock Trainer at batch 40 '
                  '>= 3'] == 'PASS'
  assert verdicts['TPUTrainer (Keras module) / stock Trainer at batch 40 '
                  '>= 3'] == 'N/A'
  summary[report.name(report.KERAS_FIT, 40)] = report.summarize_runs(
      [_run(None, external=9000, external_overhead=3.5)])
  verdicts = {v['target']: v for v in report.evaluate(summary, 512)}
  overhead = verdicts['TPUTrainer (model_fn module) overhead / keras_fit '
                      'overhead at batch 40 <= 1']
  assert overhead['verdict'] == 'FAIL'
  assert overhead['figures'] == [4.0, 3.5]
  assert len(report.targets(512)) == 20

  table = report.format_table(summary)
  assert '64,000' in table and '33,000' in table and stock in table
  assert '4.0' in report.format_phase_table(summary)
  lines = report.format_verdicts(report.evaluate(summary, 512))
  assert '[FAIL]' in lines and '[PASS]' in lines and '(4.0 / 3.5)' in lines


def test_run_module_reports_exit_code_and_peak_memory(tmp_path):
  log_path = str(tmp_path / 'logs' / 'platform.log')
  result = launch.run_module('platform', [], log_path)
  assert result.returncode == 0
  assert result.max_rss_kb > 1000
  assert os.path.exists(log_path)

  failed = launch.run_module('benchmarks.no_such_module', [],
                             str(tmp_path / 'missing.log'))
  assert failed.returncode != 0
  assert 'No module named' in failed.log_tail()
  assert sys.executable
