"""Per-host input of a multi-host slice: every record read once per epoch.

TPUEstimator with `PER_HOST_V2` calls the input_fn once per host
(`params['context'].current_input_fn_deployment()`); the default chain reads
that host's share of the split. Across hosts the shares must cover every
record exactly once, whether each host takes whole files or, with fewer
files than hosts, records of every file.
"""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_tpu_trainer.data import input_fns


def _schema():
  schema = schema_pb2.Schema()
  for name in ('row', 'y'):
    feature = schema.feature.add(name=name, type=schema_pb2.INT)
    feature.shape.SetInParent()
    feature.presence.min_fraction = 1
  return schema


def _split(directory, files, rows_per_file):
  """gzip'd TFRecord files whose rows are numbered 0..N-1."""
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


def _rows_read(paths, host, hosts, cache, shuffle='window'):
  dataset = input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=1, training=True, repeat=False,
      invocation_index=host, invocation_count=hosts, cache=cache,
      shuffle=shuffle)
  return [int(row) for features, _ in dataset
          for row in np.ravel(features['row'])]


@pytest.mark.parametrize('files,hosts', [(8, 4), (6, 4), (2, 4), (1, 2),
                                         (3, 2)])
@pytest.mark.parametrize('cache,shuffle', [('none', 'window'),
                                           ('serialized', 'window'),
                                           ('none', 'record'),
                                           ('serialized', 'record'),
                                           ('parsed', 'window')])
def test_host_shares_cover_every_record_once(tmp_path, files, hosts, cache,
                                             shuffle):
  # Every input chain (streamed in chunks and windows, or record by record,
  # or tabled) reads each host's share only.
  rows_per_file = 25
  paths = _split(tmp_path, files, rows_per_file)
  shares = [_rows_read(paths, host, hosts, cache, shuffle)
            for host in range(hosts)]
  every_row = sorted(row for share in shares for row in share)
  assert every_row == list(range(files * rows_per_file))
  # No host is left without input, and none reads much more than its part.
  sizes = [len(share) for share in shares]
  assert min(sizes) > 0
  assert max(sizes) <= 2 * files * rows_per_file / hosts
