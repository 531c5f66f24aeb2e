"""The parsed table of training input: its first epoch streamed as it fills.

The split's rows are numbered; the table is shown to be read from memory
(not the records) by overwriting the record files with bytes that are no
TFRecord after the first epoch.
"""

import numpy as np
import tensorflow as tf

from tests.data import numbered_split
from tfx_tpu_trainer.data import dataset_builders
from tfx_tpu_trainer.data import input_fns

BATCH = 50


def _dataset(paths, table_first=False):
  return input_fns.default_dataset(
      paths, numbered_split.schema(), 'y', batch_size=BATCH, training=True,
      repeat=True, cache='parsed', table_first=table_first)


def test_later_epochs_permute_the_table_kept_from_the_first(tmp_path):
  paths = numbered_split.write_split(tmp_path, 3, 1000)
  epoch = 3000 // BATCH
  iterator = iter(_dataset(paths))
  first = numbered_split.rows_of(next(iterator) for _ in range(epoch))
  np.testing.assert_array_equal(np.sort(first), np.arange(3000))
  # Later epochs read the kept rows, not the records.
  numbered_split.spoil(paths)
  later = [numbered_split.rows_of(next(iterator) for _ in range(epoch))
           for _ in range(2)]
  for rows in later:
    np.testing.assert_array_equal(np.sort(rows), np.arange(3000))
  assert not np.array_equal(later[0], later[1])
  assert iterator.element_spec[1].shape.as_list() == [BATCH]


def _counted_dataset(paths, monkeypatch, table_first):
  """The dataset, and the sizes of the record chunks it has read so far."""
  read = []
  records = dataset_builders._records

  def counted(*args, **kwargs):

    def count(chunk):
      read.append(len(chunk))
      return chunk

    return records(*args, **kwargs).map(
        lambda chunk: tf.py_function(count, [chunk], tf.string))

  with monkeypatch.context() as patch:
    patch.setattr(dataset_builders, '_records', counted)
    return _dataset(paths, table_first), read


def test_training_starts_before_the_split_is_parsed(tmp_path, monkeypatch):
  # What the chain buffers ahead (chunk shuffle, windows in flight) is
  # bounded well under this split, so the first batch leaves most of it
  # unread however long the chain runs ahead; building the table first
  # reads all of it.
  rows = 160 * 1000
  paths = numbered_split.write_split(tmp_path, 160, 1000)
  streamed, read_streaming = _counted_dataset(paths, monkeypatch, False)
  next(iter(streamed))
  table, read_building = _counted_dataset(paths, monkeypatch, True)
  next(iter(table))
  assert sum(read_building) == rows
  assert sum(read_streaming) < rows / 2
