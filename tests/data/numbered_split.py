"""gzip'd TFRecord splits whose rows are numbered: where each row went."""

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


def write_split(directory, files: int, rows_per_file: int):
  """`files` gzip'd TFRecord files under `directory`, rows 0..N-1 in order."""
  paths = []
  for index in range(files):
    paths.append(str(directory / f'part-{index}.gz'))
    with tf.io.TFRecordWriter(paths[-1], options='GZIP') as writer:
      for row in range(index * rows_per_file, (index + 1) * rows_per_file):
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            'row': tf.train.Feature(int64_list=tf.train.Int64List(
                value=[row])),
            'y': tf.train.Feature(int64_list=tf.train.Int64List(value=[0])),
        })).SerializeToString())
  return paths


def rows_of(batches) -> np.ndarray:
  """The `row` numbers of `(features, label)` batches, in order."""
  return np.concatenate([features['row'].numpy() for features, _ in batches])


def spoil(paths):
  """Overwrites record files with bytes that are no TFRecord."""
  for path in paths:
    with open(path, 'wb') as f:
      f.write(b'not a TFRecord file')
