"""input_cache="disk": a cache that does not read back whole, or was built
from other inputs, is never read: it is removed and built again from the
examples, saying so (issue 50, items 1-3).

Every case damages the real files of a cache the first input_fn call
wrote, then reads the split again as a retry of the execution does.
"""

import glob
import re
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.data import numbered_split
from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import input_fns

FILES, ROWS_PER_FILE = 3, 1000
ALL_ROWS = np.arange(FILES * ROWS_PER_FILE)


def _dataset(paths, cache_dir, repeat=False):
  return input_fns.default_dataset(
      paths, numbered_split.schema(), 'y', batch_size=50, training=True,
      repeat=repeat, cache='disk', cache_dir=cache_dir)


def _host_dir(cache_dir):
  return os.path.join(cache_dir, 'host-0-of-1')


def _block_files(cache_dir):
  return sorted(glob.glob(os.path.join(_host_dir(cache_dir), 'block-*')))


def _built_cache(tmp_path):
  """The split, and a complete cache of it (several blocks)."""
  paths = numbered_split.write_split(tmp_path, FILES, ROWS_PER_FILE)
  cache_dir = str(tmp_path / 'cache')
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(rows), ALL_ROWS)
  assert os.path.exists(os.path.join(_host_dir(cache_dir),
                                     disk_cache.COMPLETE_FILE))
  assert len(_block_files(cache_dir)) == 3
  return paths, cache_dir


def _overwrite_middle(path):
  """Up to 64 KiB in the middle of the file overwritten (size unchanged)."""
  size = os.path.getsize(path)
  length = min(64 * 1024, size // 2)
  with open(path, 'r+b') as f:
    f.seek((size - length) // 2)
    f.write(np.random.default_rng(0).bytes(length))


def _truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def _damage(case, cache_dir):
  blocks = _block_files(cache_dir)
  if case == 'overwritten':
    _overwrite_middle(blocks[1])
  elif case == 'truncated':
    _truncate(blocks[1])
  elif case == 'one block missing':
    os.remove(blocks[1])
  elif case == 'the last block missing':
    os.remove(blocks[-1])
  elif case == 'no block at all':
    for path in blocks:
      os.remove(path)
  else:
    raise ValueError(case)


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
  monkeypatch.setattr(disk_cache, 'BLOCK_ROWS', 1000)


@pytest.mark.parametrize('case,reason', [
    ('overwritten', r'block-000000001\.tfrecord is damaged \(corrupted '
     'record'),
    ('truncated', r'block-000000001\.tfrecord is damaged \(truncated'),
    ('one block missing', r'block-000000001\.tfrecord is missing'),
    ('the last block missing', r'block-000000002\.tfrecord is missing'),
    ('no block at all', r'block-000000000\.tfrecord is missing'),
])
def test_a_cache_that_does_not_read_back_whole_is_rebuilt(
    tmp_path, absl_info, case, reason):
  paths, cache_dir = _built_cache(tmp_path)
  _damage(case, cache_dir)
  absl_info.clear()
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  # Read from the examples again: every row once, none of the damage.
  np.testing.assert_array_equal(np.sort(rows), ALL_ROWS)
  assert any(
      record.levelname == 'WARNING' and
      f'Removing the input cache {_host_dir(cache_dir)}: ' in
      record.getMessage() and
      'building it again from the examples' in record.getMessage()
      for record in absl_info.records), absl_info.text
  assert re.search(reason, absl_info.text), (
      absl_info.text)
  # The rebuilt cache is whole: the next retry reads it, not the records.
  numbered_split.spoil(paths, keep_stat=True)
  again = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(again), ALL_ROWS)


def test_a_marker_without_blocks_never_spins_on_empty_epochs(tmp_path):
  # Repeating input over a cache with no block: each epoch was empty, so
  # the reader looped forever. Now the cache is rebuilt.
  paths, cache_dir = _built_cache(tmp_path)
  _damage('no block at all', cache_dir)
  batches = list(_dataset(paths, cache_dir, repeat=True).take(200))
  rows = np.concatenate([features['row'].numpy() for features, _ in batches])
  assert set(rows) == set(ALL_ROWS)


def test_a_block_damaged_while_training_reads_it_is_named(tmp_path):
  # Damage after the input_fn checked the cache: the read fails with
  # TensorFlow's checksum error; explain_damage names the block, removes
  # the cache, and the next input_fn call builds it again.
  paths, cache_dir = _built_cache(tmp_path)
  dataset = _dataset(paths, cache_dir, repeat=True)
  _damage('overwritten', cache_dir)
  with pytest.raises(disk_cache.DamagedCacheError,
                     match=r'The parsed input cache .*host-0-of-1 is damaged: '
                     r'block-000000001\.tfrecord is damaged \(corrupted record'
                     r'.*\)\. It was removed; a retry of this pipeline run '
                     'builds it again from the examples'):
    with disk_cache.explain_damage(cache_dir):
      for _ in dataset.take(1000):
        pass
  assert not os.path.exists(_host_dir(cache_dir))
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(rows), ALL_ROWS)


def test_other_errors_pass_explain_damage_unchanged(tmp_path):
  _, cache_dir = _built_cache(tmp_path)
  with pytest.raises(tf.errors.InvalidArgumentError, match='not the cache'):
    with disk_cache.explain_damage(cache_dir):
      raise tf.errors.InvalidArgumentError(None, None, 'not the cache')
  assert len(_block_files(cache_dir)) == 3


@pytest.mark.parametrize('change', ['rewritten', 'file added'])
def test_a_cache_of_other_examples_is_rebuilt(tmp_path, absl_info, change):
  paths, cache_dir = _built_cache(tmp_path)
  # Other examples under the same file names (the rows numbered from
  # 10,000), or one more file: what a retry reads is not what was cached.
  other = tmp_path / 'other'
  other.mkdir()
  if change == 'rewritten':
    new_paths = numbered_split.write_split(other, FILES, ROWS_PER_FILE,
                                           first_row=10000)
    for new, old in zip(new_paths, paths):
      os.replace(new, old)
    expected = ALL_ROWS + 10000
  else:
    [extra] = numbered_split.write_split(other, 1, 500, first_row=10000)
    paths = paths + [extra]
    expected = np.concatenate([ALL_ROWS, np.arange(10000, 10500)])
  absl_info.clear()
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(rows), expected)
  assert (f'Removing the input cache {_host_dir(cache_dir)}: it was built '
          'from other inputs') in absl_info.text, absl_info.text


def test_the_cache_key_follows_files_schema_and_format(tmp_path):
  paths = numbered_split.write_split(tmp_path, FILES, ROWS_PER_FILE)
  spec = {'row': tf.io.FixedLenFeature([], tf.int64),
          'y': tf.io.FixedLenFeature([], tf.int64)}
  key = disk_cache.inputs_key(paths, spec)
  assert key == disk_cache.inputs_key(list(paths), dict(spec))
  other_default = dict(spec, y=tf.io.FixedLenFeature([], tf.int64,
                                                     default_value=1))
  assert disk_cache.inputs_key(paths, other_default) != key
  assert disk_cache.inputs_key(paths[:2], spec) != key
  os.utime(paths[0], ns=(0, 0))
  assert disk_cache.inputs_key(paths, spec) != key


@pytest.mark.slow
@pytest.mark.heavy
def test_a_retry_rebuilds_a_damaged_cache_and_publishes_a_sound_model(
    taxi_artifacts, tmp_path):
  # The executor as a pipeline step runs it: killed once the cache is
  # complete, 64 KiB of its block overwritten, then retried. The retry
  # rebuilds the cache from the examples (it trained on garbage rows
  # before, and published a model of eval loss 8.5e17).
  # pylint: disable=g-import-not-at-top,protected-access
  import json
  import signal
  import time
  from tests import test_reliability as reliability
  from tests.fixtures import pipeline_outputs
  from tfx_tpu_trainer.publishing import metrics as metrics_lib
  from tfx_tpu_trainer.training import checkpoints
  # pylint: enable=g-import-not-at-top
  base = str(tmp_path / 'checkpoints')
  config = dict(reliability.SMALL_BATCHES, checkpoint_dir=base,
                input_cache='disk')
  cache = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer',
                       checkpoints.INPUT_CACHE_DIR, 'host-0-of-1')

  def attempt(name, step_seconds=0.0):
    # A slow first attempt is still training when its cache is complete.
    run = pipeline_outputs.trainer_run(
        taxi_artifacts, str(tmp_path / name), reliability.LINEAR_MODULE,
        custom_config=dict(config, params={'step_seconds': step_seconds}),
        train_steps=300, eval_steps=2)
    log_path = tmp_path / f'{name}.log'
    return run, log_path, reliability._start_executor(
        reliability._write_spec(tmp_path / f'{name}.json', run, 'run-1'),
        log_path)

  _, log_path, process = attempt('attempt1', step_seconds=0.05)
  while not os.path.exists(os.path.join(cache, disk_cache.COMPLETE_FILE)):
    assert process.poll() is None, log_path.read_text()
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)
  process.wait()
  _overwrite_middle(sorted(glob.glob(os.path.join(cache, 'block-*')))[0])

  run, log_path, process = attempt('attempt2')
  assert process.wait() == 0, log_path.read_text()
  log = log_path.read_text()
  assert re.search(rf'Removing the input cache {re.escape(cache)}: '
                   r'block-000000000\.tfrecord is damaged \(corrupted record '
                   r'at \d+\); building it again from the examples', log), log
  metrics = json.load(open(os.path.join(run.model_run.uri,
                                        metrics_lib.METRICS_FILE_NAME)))
  assert metrics['loss'] < 5, metrics
