"""The scale run (benchmarks.scale): replicas, row counts, table, targets."""

import json
import os

import tensorflow as tf

from benchmarks import events
from benchmarks import scale


def _write_split(directory, rows, exist_ok=False):
  os.makedirs(directory, exist_ok=exist_ok)
  path = os.path.join(directory, 'data_tfrecord-00000-of-00001.gz')
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for row in range(rows):
      example = tf.train.Example(features=tf.train.Features(feature={
          'x': tf.train.Feature(float_list=tf.train.FloatList(value=[row]))}))
      writer.write(example.SerializeToString())


def _spec(tmp_path):
  examples = tmp_path / 'transform' / 'transformed_examples' / '7'
  _write_split(str(examples / 'Split-train'), 5)
  _write_split(str(examples / 'Split-eval'), 2)
  work_dir = tmp_path / 'work'
  work_dir.mkdir()
  spec = {'input_dict': {'examples': [{'artifact': {'uri': str(examples)}}]},
          'rows': 7}
  with open(work_dir / 'data.json', 'w') as f:
    json.dump(spec, f)
  return str(work_dir), str(examples)


def test_replica_copies_the_train_split_once_and_is_reused(tmp_path):
  work_dir, examples = _spec(tmp_path)
  spec_path = os.path.join(work_dir, 'data.json')
  assert scale.replicate(spec_path, work_dir, 1) == spec_path
  replica = scale.replicate(spec_path, work_dir, 3)
  assert replica == os.path.join(work_dir, 'scale', 'x3', 'data.json')
  assert scale.train_rows(spec_path) == 5
  assert scale.train_rows(replica) == 15
  with open(replica) as f:
    uri = json.load(f)['input_dict']['examples'][0]['artifact']['uri']
  assert uri != examples
  assert len(os.listdir(os.path.join(uri, 'Split-train'))) == 3
  assert os.listdir(os.path.join(uri, 'Split-eval')) == os.listdir(
      os.path.join(examples, 'Split-eval'))
  assert not any(name.endswith('.partial') for name in
                 os.listdir(os.path.dirname(uri)))
  # Written once: a second call reuses the replica as it is.
  stamp = os.stat(replica).st_mtime_ns
  assert scale.replicate(spec_path, work_dir, 3) == replica
  assert os.stat(replica).st_mtime_ns == stamp


def test_replica_is_written_again_when_its_source_changes(tmp_path):
  work_dir, examples = _spec(tmp_path)
  spec_path = os.path.join(work_dir, 'data.json')
  replica = scale.replicate(spec_path, work_dir, 2)
  assert scale.train_rows(replica) == 10
  # The source split grows: the replica (and its row count) follow.
  split = os.path.join(examples, 'Split-train')
  for name in os.listdir(split):
    os.remove(os.path.join(split, name))
  _write_split(split, 6, exist_ok=True)
  assert scale.replicate(spec_path, work_dir, 2) == replica
  assert scale.train_rows(replica) == 12
  assert scale.replica_bytes(spec_path, 2) == 2 * sum(
      os.path.getsize(os.path.join(split, name)) for name in os.listdir(split))


def test_run_measures_each_factor_and_chain(tmp_path, monkeypatch):
  work_dir, _ = _spec(tmp_path)
  monkeypatch.setattr(scale, 'TABLE_MAX_ROWS', 5)
  calls = []

  def measure_pair(spec_path, cache, run_name, extra_steps):
    calls.append((os.path.relpath(spec_path, work_dir), cache, run_name,
                  extra_steps))
    rows = scale.train_rows(spec_path)
    # Every rate comes from the long run's samples past the short run's 10
    # steps and the caches' first epoch (250 steps/s x batch 4), not the
    # pair's external rate.
    past = 10 + extra_steps
    samples = [[1, 10.0], [past, 5.0], [past + 10, 250.0],
               [past + 20, 250.0]]
    return {'external_examples_per_sec': 7.0,
            'short_do_seconds': 1.0, 'step_rate_samples': samples,
            'external_overhead_seconds': 2.0, 'do_seconds': 3.0,
            'max_rss_kb': 100_000 + rows * 1000,
            'phases': {'before_first_step_seconds': 4.0}}

  inputs = []

  def measure_stream_input(spec_path):
    inputs.append(os.path.relpath(spec_path, work_dir))
    return {'examples_per_sec': 2000.0}

  rows = scale.run(work_dir, [1, 2], 4, 10, 20, measure_pair,
                   measure_stream_input, progress=lambda line: None)
  x2 = os.path.join('scale', 'x2', 'data.json')
  # The table only where it fits; the caches' pairs first train one epoch
  # (5 rows at batch 4: 2 steps; 10 rows: 3 steps) in both runs.
  assert calls == [('data.json', 'parsed', 'x1-parsed', 2),
                   ('data.json', 'disk', 'x1-disk', 2),
                   ('data.json', 'none', 'x1-none', 0),
                   (x2, 'disk', 'x2-disk', 3),
                   (x2, 'none', 'x2-none', 0)]
  assert inputs == ['data.json', x2]
  assert [row['rows'] for row in rows] == [5, 5, 5, 5, 10, 10, 10]
  assert [row['chain'] for row in rows] == [
      'table', 'disk', 'stream', 'stream input', 'disk', 'stream',
      'stream input']
  assert (rows[4]['short_steps'], rows[4]['steps']) == (13, 23)
  assert rows[4]['rate'] == 1000.0 and rows[4]['first_step_seconds'] == 4.0
  assert rows[4]['pair_rate'] == 7.0
  assert [row['rate'] for row in rows] == [1000.0] * 3 + [2000.0] + [
      1000.0] * 2 + [2000.0]


def test_rate_after_step_counts_only_the_steps_past_it():
  samples = [[100, 10.0], [200, 20.0], [300, 50.0], [400, 50.0]]
  # 200 -> 300 and 300 -> 400 at 50 steps/s; the first epoch's left out.
  assert events.rate_after_step(samples, 200) == 50.0
  assert events.rate_after_step(samples, 150) == 50.0
  assert events.rate_after_step(samples, 100) == 300 / (100 / 20 + 2 * 100 / 50)
  assert events.rate_after_step(samples, 400) is None
  assert events.rate_after_step([], 0) is None


def _row(factor, cache, rate, first_step, rss_mb):
  return {'factor': factor, 'rows': factor * 10_000, 'cache': cache,
          'chain': scale.CHAIN_NAMES[cache], 'rate': rate,
          'first_step_seconds': first_step, 'overhead_seconds': 4.0,
          'max_rss_kb': rss_mb * 1024, 'pair_seconds': 60.0}


def test_targets_and_table():
  rows = [
      _row(1, 'parsed', 800_000.0, 10.0, 900),
      _row(1, 'disk', 700_000.0, 8.0, 800),
      _row(1, 'none', 400_000.0, 8.0, 800),
      _row(100, 'parsed', 600_000.0, 25.0, 1400),
      _row(100, 'disk', 570_000.0, 8.0, 850),
      _row(100, 'none', 380_000.0, 8.0, 850),
      _row(1000, 'disk', 560_000.0, 9.0, 1300),
      _row(1000, 'none', 300_000.0, 9.0, 850),
  ]
  verdicts = {v['target']: (v['verdict'], v['value'])
              for v in scale.verdicts(rows + [
                  {'factor': 100, 'rows': 1_000_000, 'cache': 'stream_input',
                   'chain': 'stream input', 'rate': 420_000.0}])}
  assert verdicts == {
      'x100 rate, stream / table, >= 0.8': ('FAIL', 380 / 600),
      'x100 streamed input alone, no training / table (the most streaming '
      'can reach on this machine)': ('INFO', 0.7),
      'x100 rate, disk / table, >= 0.9': ('PASS', 0.95),
      'stream rate x1000 / x1, >= 0.85': ('FAIL', 0.75),
      'stream peak RSS x1000 / x1, <= 1.5': ('PASS', 850 / 800),
      'disk rate x1000 / x1, >= 0.85': ('FAIL', 0.8),
      'disk peak RSS x1000 / x1, <= 1.5': ('FAIL', 1300 / 800),
      'table time to the first step x100 / x1, <= 2.0': ('FAIL', 2.5),
  }
  table = scale.format_table(rows + [{'factor': 10, 'rows': 100_000,
                                      'cache': 'none', 'error': 'exit 1'}])
  lines = table.splitlines()
  assert len(lines) == 2 + 9
  # x100 disk: 570,000 ex/s, 0.95 of the table, 0.81 of its x1 rate.
  assert lines[6].split()[:5] == ['100', '1,000,000', 'disk', '570,000',
                                  '0.95']
  assert lines[6].split()[5] == '0.81'
  # The table's first step: 25 s at x100, 2.50x its x1.
  assert lines[5].split()[6:8] == ['25.0', '2.50']
  assert 'FAILED: exit 1' in table
  printed = scale.format_verdicts(scale.verdicts(rows))
  assert '[FAIL] stream rate x1000 / x1, >= 0.85: 0.75' in printed


def test_targets_with_missing_figures_are_na():
  rows = [_row(1, 'parsed', 800_000.0, 10.0, 900),
          _row(1, 'none', 400_000.0, 8.0, 800),
          {'factor': 1, 'rows': 10_000, 'cache': 'disk', 'error': 'exit 1'}]
  # One factor: only the comparisons with the table, the disk one N/A.
  assert scale.verdicts(rows) == [
      {'target': 'x1 rate, stream / table, >= 0.8', 'value': 0.5,
       'verdict': 'FAIL'},
      {'target': 'x1 rate, disk / table, >= 0.9', 'value': None,
       'verdict': 'N/A'}]
  assert scale.verdicts([]) == []
