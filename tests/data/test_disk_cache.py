"""input_cache="disk": the training split parsed once into blocks on disk.

The split's rows are numbered; the cache is shown to be read (not the
records) by overwriting the record files with bytes that are no TFRecord,
of the same sizes and times (the cache is keyed by them).
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tests.data import numbered_split
from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.training import checkpoints

FILES, ROWS_PER_FILE = 3, 1000


def _schema():
  return numbered_split.schema()


def _split(directory):
  return numbered_split.write_split(directory, FILES, ROWS_PER_FILE)


def _dataset(paths, cache_dir, repeat=False, training=True):
  return input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=50, training=training, repeat=repeat,
      cache='disk', cache_dir=cache_dir)


def test_a_read_epoch_is_reused_by_a_later_input_fn_call(tmp_path):
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'cache')
  first = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(first), np.arange(FILES *
                                                          ROWS_PER_FILE))
  # The marker is written before the epoch's end reaches the caller.
  assert os.path.exists(os.path.join(cache_dir, 'host-0-of-1',
                                     disk_cache.COMPLETE_FILE))
  numbered_split.spoil(paths, keep_stat=True)
  # A retry builds the input again: it reads the parsed blocks.
  again = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(again), np.sort(first))
  assert not np.array_equal(again, first)  # Rows permuted afresh.


@pytest.mark.parametrize('marker', [None, 'float32:other[];v1'])
def test_an_unfinished_or_foreign_cache_is_never_read(tmp_path, marker):
  # A block without the marker (the writer died mid-epoch), or a marker of
  # other columns: the cache is removed and written again from the records.
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'cache')
  host_dir = os.path.join(cache_dir, 'host-0-of-1')
  os.makedirs(host_dir)
  with open(os.path.join(host_dir, 'block-000000000.int64'), 'wb') as f:
    f.write(b'half a block')
  if marker is not None:
    with open(os.path.join(host_dir, disk_cache.COMPLETE_FILE), 'w') as f:
      f.write(marker)
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(rows),
                                np.arange(FILES * ROWS_PER_FILE))
  numbered_split.spoil(paths, keep_stat=True)
  # The rewritten cache.
  again = numbered_split.rows_of(_dataset(paths, cache_dir))
  np.testing.assert_array_equal(np.sort(again), np.sort(rows))


def test_repeating_disk_input_crosses_epochs_with_static_batches(tmp_path):
  paths = _split(tmp_path)
  dataset = _dataset(paths, str(tmp_path / 'cache'), repeat=True)
  assert dataset.element_spec[1].shape.as_list() == [50]
  # The first window (16,400 rows, whole batches) spans five epochs of
  # this small split and a part of the sixth.
  window = -(-input_fns.STREAM_WINDOW_ROWS // 50)
  batches = list(dataset.take(window))
  assert all(label.shape == (50,) for _, label in batches)
  rows = np.concatenate([features['row'].numpy() for features, _ in batches])
  counts = np.bincount(rows, minlength=FILES * ROWS_PER_FILE)
  assert counts.min() == 5 and counts.max() == 6


@pytest.mark.parametrize('training,cache_dir', [(False, 'cache'),
                                                (True, None)])
def test_evaluation_and_runs_without_a_directory_stream(tmp_path, training,
                                                        cache_dir):
  paths = _split(tmp_path)
  cache_dir = cache_dir and str(tmp_path / cache_dir)
  rows = numbered_split.rows_of(
      _dataset(paths, cache_dir, training=training))
  assert len(rows) == FILES * ROWS_PER_FILE
  assert cache_dir is None or not os.path.exists(cache_dir)


def test_a_share_over_the_size_cap_streams(tmp_path, monkeypatch):
  monkeypatch.setattr(input_fns, 'DISK_CACHE_MAX_BYTES', 1000)
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'cache')
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  assert len(rows) == FILES * ROWS_PER_FILE
  assert not os.path.exists(cache_dir)


def test_hosts_write_their_own_caches(tmp_path):
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'cache')
  shares = [numbered_split.rows_of(input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=10, training=True, repeat=False,
      invocation_index=host, invocation_count=2, cache='disk',
      cache_dir=cache_dir)) for host in range(2)]
  np.testing.assert_array_equal(np.sort(np.concatenate(shares)),
                                np.arange(FILES * ROWS_PER_FILE))
  assert sorted(os.listdir(cache_dir)) == ['host-0-of-2', 'host-1-of-2']


def test_disk_cache_names_the_features_it_cannot_hold():
  spec = {'row': tf.io.VarLenFeature(tf.int64)}
  with pytest.raises(input_fns.InputCacheError,
                     match=r'input_cache="disk" needs fixed-length .*\[\'row\'\]'):
    input_fns.check_cache_mode('disk', spec)


def test_cache_dir_is_bookkeeping_of_the_resumable_directory():
  assert checkpoints.input_cache_dir(None, '/root/model/1', None) is None
  assert checkpoints.INPUT_CACHE_DIR.startswith('.tpu_trainer-')


@pytest.mark.slow
def test_a_pipeline_run_caches_the_split_beside_its_checkpoints(
    taxi_artifacts, tmp_path):
  # The executor in a process of its own, as a pipeline step runs it: the
  # cache goes into the resumable directory, and once the model is
  # exported it is removed.
  # pylint: disable=g-import-not-at-top,protected-access
  from tests import test_reliability as reliability
  from tests.fixtures import pipeline_outputs
  # pylint: enable=g-import-not-at-top
  base = str(tmp_path / 'checkpoints')
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'attempt'), reliability.LINEAR_MODULE,
      custom_config=dict(reliability.SMALL_BATCHES, checkpoint_dir=base,
                         input_cache='disk'),
      train_steps=40, eval_steps=2)
  log_path = tmp_path / 'attempt.log'
  process = reliability._start_executor(
      reliability._write_spec(tmp_path / 'attempt.json', run, 'run-1'),
      log_path)
  assert process.wait() == 0, log_path.read_text()
  cache = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer',
                       checkpoints.INPUT_CACHE_DIR)
  log = log_path.read_text()
  assert f'Caching the parsed training split on disk in {cache}/host-0-of-1' \
      in log, log
  assert f'Removed the parsed input cache {cache}.' in log
  assert not os.path.exists(cache)


def _over_the_table_cap(monkeypatch):
  monkeypatch.setattr(input_fns, 'PARSED_CACHE_MAX_BYTES', 1000)


def test_auto_caches_a_split_over_the_table_cap_on_a_local_disk(
    tmp_path, monkeypatch):
  _over_the_table_cap(monkeypatch)
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'not' / 'yet' / 'made')
  spec = {'row': tf.io.FixedLenFeature([], tf.int64),
          'y': tf.io.FixedLenFeature([], tf.int64)}
  assert input_fns.choose_cache('auto', paths, spec,
                                cache_dir=cache_dir) == 'disk'
  rows = numbered_split.rows_of(input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=50, training=True, repeat=False,
      cache='auto', cache_dir=cache_dir))
  np.testing.assert_array_equal(np.sort(rows),
                                np.arange(FILES * ROWS_PER_FILE))
  assert os.path.exists(os.path.join(cache_dir, 'host-0-of-1',
                                     disk_cache.COMPLETE_FILE))


@pytest.mark.parametrize('cache_dir,reason', [
    (None, 'no resumable directory'),
    ('gs://bucket/run/cache', 'not a local disk'),
    ('LOCAL', 'more than the .* GB free where it goes'),
])
def test_auto_streams_a_split_the_disk_cannot_hold(tmp_path, monkeypatch,
                                                   absl_info, cache_dir,
                                                   reason):
  _over_the_table_cap(monkeypatch)
  # More headroom than any disk has: a local disk without room.
  monkeypatch.setattr(input_fns, 'DISK_CACHE_HEADROOM_BYTES', 2**60)
  paths = _split(tmp_path)
  if cache_dir == 'LOCAL':
    cache_dir = str(tmp_path / 'cache')
  spec = {'row': tf.io.FixedLenFeature([], tf.int64)}
  chosen = input_fns.choose_cache('auto', paths, spec, cache_dir=cache_dir)
  assert chosen == 'serialized'  # Small gzip files: cached serialized.
  assert re.search(f'not caching the training split on disk: .*{reason}',
                   absl_info.text), absl_info.text


def test_disk_streams_when_the_local_disk_has_no_room(tmp_path, monkeypatch):
  monkeypatch.setattr(input_fns, 'DISK_CACHE_HEADROOM_BYTES', 2**60)
  paths = _split(tmp_path)
  cache_dir = str(tmp_path / 'cache')
  rows = numbered_split.rows_of(_dataset(paths, cache_dir))
  assert len(rows) == FILES * ROWS_PER_FILE
  assert not os.path.exists(cache_dir)
