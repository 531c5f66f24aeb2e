"""The scale run (benchmarks.scale): replicas, row counts, table, targets."""

import json
import os

import tensorflow as tf

from benchmarks import scale


def _write_split(directory, rows):
  os.makedirs(directory)
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


def test_run_measures_each_factor_and_cache_mode(tmp_path):
  work_dir, _ = _spec(tmp_path)
  calls = []

  def measure_pair(spec_path, cache, run_name):
    calls.append((os.path.relpath(spec_path, work_dir), cache, run_name))
    rows = scale.train_rows(spec_path)
    return {'external_examples_per_sec': 1000.0, 'short_do_seconds': 1.0,
            'external_overhead_seconds': 2.0, 'do_seconds': 3.0,
            'max_rss_kb': 100_000 + rows * 1000}

  rows = scale.run(work_dir, [1, 2], 8, 10, 20, measure_pair,
                   progress=lambda line: None)
  assert calls == [('data.json', 'parsed', 'x1-parsed'),
                   ('data.json', 'none', 'x1-none'),
                   (os.path.join('scale', 'x2', 'data.json'), 'parsed',
                    'x2-parsed'),
                   (os.path.join('scale', 'x2', 'data.json'), 'none',
                    'x2-none')]
  assert [row['rows'] for row in rows] == [5, 5, 10, 10]
  assert rows[2]['rate'] == 1000.0


def test_targets_and_table():
  rows = [
      {'factor': 1, 'rows': 10_000, 'cache': 'parsed', 'rate': 800_000.0,
       'overhead_seconds': 4.0, 'max_rss_kb': 900 * 1024},
      {'factor': 1, 'rows': 10_000, 'cache': 'none', 'rate': 400_000.0,
       'overhead_seconds': 4.0, 'max_rss_kb': 800 * 1024},
      {'factor': 100, 'rows': 1_000_000, 'cache': 'parsed',
       'rate': 600_000.0, 'overhead_seconds': 9.0,
       'max_rss_kb': 1400 * 1024},
      {'factor': 100, 'rows': 1_000_000, 'cache': 'none', 'rate': 380_000.0,
       'overhead_seconds': 4.5, 'max_rss_kb': 850 * 1024},
  ]
  verdicts = {v['target']: (v['verdict'], v['value'])
              for v in scale.verdicts(rows)}
  assert verdicts == {
      'scale x100 / x1 rate, input_cache=parsed, >= 0.85': ('FAIL', 0.75),
      'scale x100 / x1 rate, input_cache=none, >= 0.85': ('PASS', 0.95),
      'scale x100 / x1 peak RSS, streaming, <= 1.5': ('PASS', 850 / 800),
  }
  table = scale.format_table(rows + [{'factor': 10, 'rows': 100_000,
                                      'cache': 'none', 'error': 'exit 1'}])
  assert '1,000,000' in table and '600,000' in table and '0.75' in table
  # (1400 - 900) MB over 990,000 extra rows: 50.5 MB per 100k rows.
  assert '50.5' in table
  assert 'FAILED: exit 1' in table
  assert scale.verdicts(rows[:2]) == []
