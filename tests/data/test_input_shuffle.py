"""How random the default chain's training order is, by `input_shuffle`.

One gzip'd file whose rows are numbered in file order: a row's move is its
position in an epoch minus its number. "window" (chunks through a buffer,
rows permuted within windows) is measured beside "record" (each record
through a 10,000-record buffer) in the same test, as
docs/guide/performance.md ("Streaming") reports them.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.data import numbered_split
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.data import cache_policy
from tfx_tpu_trainer.data import dataset_builders
from tfx_tpu_trainer.data import input_fns

ROWS = 40000
BATCH = 64  # Divides ROWS: an epoch without repeat reads every row.


def _schema(row_shape: bool = True):
  return numbered_split.schema(row_shape)


@pytest.fixture(scope='module')
def numbered_split_paths(tmp_path_factory):
  return numbered_split.write_split(tmp_path_factory.mktemp('numbered'), 1,
                                    ROWS)


def _order(paths, shuffle, cache, repeat=False, batches=None):
  dataset = input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=BATCH, training=True, repeat=repeat,
      cache=cache, shuffle=shuffle)
  if batches is not None:
    dataset = dataset.take(batches)
  return np.concatenate([features['row'].numpy() for features, _ in dataset])


def test_shuffle_modes_are_the_config_modes():
  assert dataset_builders.SHUFFLE_MODES == config_lib.INPUT_SHUFFLE_MODES


@pytest.mark.parametrize('cache', ['none', 'serialized'])
def test_window_shuffle_moves_rows_further_than_the_record_buffer(
    numbered_split_paths, cache):
  moves = {}
  for shuffle in dataset_builders.SHUFFLE_MODES:
    order = _order(numbered_split_paths, shuffle, cache)
    np.testing.assert_array_equal(np.sort(order), np.arange(ROWS))
    moves[shuffle] = np.arange(ROWS) - order  # > 0: the row came out later.
  window, record = moves['window'], moves['record']
  # A row comes out at most a buffer (plus a batch or two in flight) before
  # its place; "window" reaches back through the chunk buffer and a window,
  # and its blocks are parsed in parallel and handed on as each finishes
  # (deterministic=False): a block can overtake those still being parsed,
  # at most one per core (tf.data.AUTOTUNE's ceiling), more often when the
  # machine is busy.
  chunk_span = (dataset_builders.STREAM_CHUNK_ROWS *
                dataset_builders.STREAM_CHUNK_BUFFER)
  window_rows = -(-dataset_builders.STREAM_WINDOW_ROWS // BATCH) * BATCH
  parsing = (os.cpu_count() or 1) * dataset_builders.STREAM_PARSE_ROWS
  assert -record.min() <= dataset_builders.SHUFFLE_BUFFER_SIZE + 4 * BATCH
  assert -window.min() <= chunk_span + window_rows + parsing + 4 * BATCH
  # ... and moves rows further on average, in both directions.
  assert np.abs(window).mean() > np.abs(record).mean()
  assert np.abs(window).mean() > dataset_builders.STREAM_WINDOW_ROWS / 4
  assert -window.min() > dataset_builders.SHUFFLE_BUFFER_SIZE
  assert window.max() > dataset_builders.SHUFFLE_BUFFER_SIZE


@pytest.mark.parametrize('shuffle', ['window', 'record'])
@pytest.mark.parametrize('cache', ['none', 'serialized'])
def test_two_epochs_differ(numbered_split_paths, shuffle, cache):
  order = _order(numbered_split_paths, shuffle, cache, repeat=True,
                 batches=2 * ROWS // BATCH)
  first, second = order[:ROWS], order[ROWS:]
  assert (first == second).mean() < 0.01
  # Each epoch is (nearly) the whole split: only rows in the buffers at the
  # epoch boundary cross it.
  assert len(np.unique(first)) > 0.5 * ROWS
  assert len(np.unique(second)) > 0.5 * ROWS


def test_window_shuffle_keeps_static_batches_across_epochs(numbered_split_paths):
  dataset = input_fns.default_dataset(
      numbered_split_paths, _schema(), 'y', batch_size=48, training=True,
      repeat=True, cache='none', shuffle='window')
  features, label = dataset.element_spec
  assert features['row'].shape.as_list() == [48]
  assert label.shape.as_list() == [48]
  # Batches never end at an epoch boundary: 1.5 epochs of full batches.
  batches = list(dataset.take(3 * ROWS // 2 // 48))
  assert all(batch[1].shape == (48,) for batch in batches)


def test_window_shuffle_without_repeat_drops_less_than_a_batch(
    numbered_split_paths):
  dataset = input_fns.default_dataset(
      numbered_split_paths, _schema(), 'y', batch_size=7, training=True,
      repeat=False, cache='none', shuffle='window')
  rows = np.concatenate([features['row'].numpy() for features, _ in dataset])
  assert len(rows) == ROWS - ROWS % 7
  assert len(np.unique(rows)) == len(rows)


def test_window_shuffle_parses_variable_length_features_per_batch(
    numbered_split_paths):
  # A feature without a fixed shape parses as a SparseTensor: its window is
  # cut into batches of records before each batch is parsed.
  dataset = input_fns.default_dataset(
      numbered_split_paths, _schema(row_shape=False), 'y', batch_size=BATCH,
      training=True, repeat=False, cache='none', shuffle='window')
  assert isinstance(dataset.element_spec[0]['row'], tf.SparseTensorSpec)
  rows = np.concatenate([features['row'].values.numpy()
                         for features, _ in dataset])
  np.testing.assert_array_equal(np.sort(rows), np.arange(ROWS))


def test_unknown_shuffle_mode_is_refused(numbered_split_paths):
  with pytest.raises(cache_policy.InputCacheError, match='input_shuffle'):
    input_fns.default_dataset(numbered_split_paths, _schema(), 'y', batch_size=8,
                              training=True, repeat=True, shuffle='files')
