"""gzip'd TFRecord splits whose rows are numbered: where each row went."""

import os

import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2


def schema(row_shape: bool = True) -> schema_pb2.Schema:
  """`row` (the row's number) and the label `y`, both int64.

  Args:
    row_shape: false leaves `row` without a shape (a VarLenFeature).
  """
  result = schema_pb2.Schema()
  for name in ('row', 'y'):
    feature = result.feature.add(name=name, type=schema_pb2.INT)
    if row_shape or name == 'y':
      feature.shape.SetInParent()
    feature.presence.min_fraction = 1
  return result


def write_split(directory, files: int, rows_per_file: int,
                first_row: int = 0):
  """`files` gzip'd TFRecord files under `directory`, rows numbered in order
  from `first_row`."""
  paths = []
  for index in range(files):
    paths.append(str(directory / f'part-{index}.gz'))
    start = first_row + index * rows_per_file
    with tf.io.TFRecordWriter(paths[-1], options='GZIP') as writer:
      for row in range(start, start + rows_per_file):
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            'row': tf.train.Feature(int64_list=tf.train.Int64List(
                value=[row])),
            'y': tf.train.Feature(int64_list=tf.train.Int64List(value=[0])),
        })).SerializeToString())
  return paths


def rows_of(batches) -> np.ndarray:
  """The `row` numbers of `(features, label)` batches, in order."""
  return np.concatenate([features['row'].numpy() for features, _ in batches])


def spoil(paths, keep_stat: bool = False):
  """Overwrites record files with bytes that are no TFRecord.

  Args:
    paths: the files.
    keep_stat: keep each file's size and modification time (what a disk
      cache keyed by them sees as the same input).
  """
  for path in paths:
    stat = os.stat(path)
    junk = b'not a TFRecord file'
    if keep_stat:
      junk = (junk * (stat.st_size // len(junk) + 1))[:stat.st_size]
    with open(path, 'wb') as f:
      f.write(junk)
    if keep_stat:
      os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
