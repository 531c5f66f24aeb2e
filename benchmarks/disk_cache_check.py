"""Benchmark: the disk cache's check on a retry, and its read rate after it,
`python -m benchmarks.disk_cache_check [--files F] [--rows_per_file R]`."""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.data import schemas

_FILES = flags.DEFINE_integer('files', 16, 'gzip TFRecord files of the split.')
_ROWS_PER_FILE = flags.DEFINE_integer('rows_per_file', 25000, 'Rows per file.')
_REPEATS = flags.DEFINE_integer('repeats', 5, 'Checks timed.')
_EPOCHS = flags.DEFINE_integer('epochs', 4, 'Epochs read after the check.')
BATCH_SIZE = 512
# 12 float and 4 int features, and an int label: the taxi model's mix.
FEATURES = [f'f{i}' for i in range(12)] + [f'i{i}' for i in range(4)] + ['y']


def _schema() -> schema_pb2.Schema:
  schema = schema_pb2.Schema()
  for name in FEATURES:
    feature = schema.feature.add(
        name=name,
        type=schema_pb2.FLOAT if name[0] == 'f' else schema_pb2.INT)
    feature.shape.SetInParent()
    feature.presence.min_fraction = 1
  return schema


def _write_split(directory: str) -> list:
  rng = np.random.default_rng(0)
  paths = []
  for index in range(_FILES.value):
    paths.append(os.path.join(directory, f'part-{index}.gz'))
    with tf.io.TFRecordWriter(paths[-1], options='GZIP') as writer:
      for row in range(_ROWS_PER_FILE.value):
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            name: (tf.train.Feature(float_list=tf.train.FloatList(
                value=[rng.random()])) if name[0] == 'f' else
                   tf.train.Feature(int64_list=tf.train.Int64List(
                       value=[row % 7])))
            for name in FEATURES})).SerializeToString())
  return paths


def main(_) -> None:
  with tempfile.TemporaryDirectory() as root:
    paths = _write_split(root)
    cache_dir = os.path.join(root, 'cache')

    def dataset(repeat):
      return input_fns.default_dataset(
          paths, _schema(), 'y', batch_size=BATCH_SIZE, training=True,
          repeat=repeat, cache='disk', cache_dir=cache_dir)

    for _ in dataset(False):  # The first epoch writes the cache.
      pass
    [cache_path] = tf.io.gfile.glob(os.path.join(cache_dir, 'host-*'))
    key = disk_cache.inputs_key(
        paths, schemas.feature_spec(_schema()))
    size = sum(os.path.getsize(p) for p in tf.io.gfile.glob(
        os.path.join(cache_path, 'block-*')))
    seconds = []
    for _ in range(_REPEATS.value):
      disk_cache._verified.clear()  # pylint: disable=protected-access
      start = time.time()
      assert disk_cache.open_cache(cache_path, key) is not None
      seconds.append(time.time() - start)
    check = statistics.median(seconds)
    batches = iter(dataset(True))
    next(batches)
    count = _EPOCHS.value * _FILES.value * _ROWS_PER_FILE.value // BATCH_SIZE
    start = time.time()
    for _ in range(count):
      next(batches)
    rate = count * BATCH_SIZE / (time.time() - start)
    print(f'cache {size / 2**20:.1f} MB; check median {check:.3f} s '
          f'({size / 2**20 / check:.0f} MB/s over {_REPEATS.value}); read '
          f'after it {rate:,.0f} examples/s (batch {BATCH_SIZE}, '
          f'{_EPOCHS.value} epochs)')


if __name__ == '__main__':
  app.run(main)
