"""The default input chain: static batch shapes, label apart, sharding."""

import os

import tensorflow as tf
import tensorflow_transform as tft
from tfx.types import artifact_utils

from tfx_tpu_trainer import input_fns


def _train_files(taxi_artifacts):
  uri = artifact_utils.get_split_uri([taxi_artifacts.transformed_examples],
                                     'train')
  return [os.path.join(uri, '*')]


def _schema(taxi_artifacts):
  return tft.TFTransformOutput(
      taxi_artifacts.transform_graph.uri).transformed_metadata.schema


def _count(dataset):
  return sum(int(label.shape[0]) for _, label in dataset)


def test_static_batches_with_label_apart(taxi_artifacts):
  dataset = input_fns.default_dataset(
      _train_files(taxi_artifacts), _schema(taxi_artifacts), 'big_tipper',
      batch_size=32, training=True, repeat=True)
  features, label = dataset.element_spec
  assert 'big_tipper' not in features
  assert label.shape.as_list() == [32]
  assert features['fare_xf'].shape.as_list() == [32]
  assert features['company_xf'].dtype == tf.int64
  batch_features, batch_label = next(iter(dataset))
  assert batch_label.shape == (32,)
  assert set(batch_label.numpy()) <= {0, 1}
  assert batch_features['trip_miles_xf'].shape == (32,)


def test_eval_without_repeat_reads_each_full_batch_once(taxi_artifacts):
  files = _train_files(taxi_artifacts)
  records = sum(1 for _ in tf.data.TFRecordDataset(
      tf.io.gfile.glob(files[0]), compression_type='GZIP'))
  dataset = input_fns.default_dataset(
      files, _schema(taxi_artifacts), 'big_tipper', batch_size=10,
      training=False, repeat=False)
  assert _count(dataset) == records - records % 10


def test_input_invocations_split_the_records(taxi_artifacts):
  files = _train_files(taxi_artifacts)
  schema = _schema(taxi_artifacts)
  whole = _count(input_fns.default_dataset(files, schema, 'big_tipper', 1,
                                           False, False))
  halves = [
      _count(input_fns.default_dataset(files, schema, 'big_tipper', 1, False,
                                       False, index, 2)) for index in (0, 1)
  ]
  assert sum(halves) == whole
  assert abs(halves[0] - halves[1]) <= 1


def test_make_input_fn_rejects_module_input_of_wrong_type(taxi_artifacts):
  def input_fn(file_pattern, data_accessor, schema, params):
    del file_pattern, data_accessor, schema, params
    return [1, 2, 3]

  built = input_fns.make_input_fn(
      _train_files(taxi_artifacts), None, _schema(taxi_artifacts),
      'big_tipper', training=True, repeat=True, module_input_fn=input_fn,
      module_source='my_module.py')
  try:
    built({'batch_size': 4})
  except input_fns.user_module_lib.UserModuleError as e:
    assert str(e) == ('input_fn in my_module.py must return a tf.data.Dataset '
                      'of (features, label), got list.')
  else:
    raise AssertionError('expected a UserModuleError')
