"""The default input chain: static batch shapes, label apart, sharding."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
import tensorflow_transform as tft
from tfx.types import artifact_utils

from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.data import cache_policy
from tfx_tpu_trainer.data import dataset_builders
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.data import schemas as schemas_lib


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
      'big_tipper', training=True, repeat=True,
      module_input_fn=user_module.ModuleFunction('input_fn', 'my_module.py',
                                                 input_fn))
  try:
    built({'batch_size': 4})
  except user_module.UserModuleError as e:
    assert str(e) == ('input_fn in my_module.py must return a tf.data.Dataset '
                      'of (features, label), got list.')
  else:
    raise AssertionError('expected a UserModuleError')


def _table(dataset):
  """All batches of a finite dataset as {name: array}, label included."""
  columns = {}
  for features, label in dataset:
    for name, values in dict(features, label=label).items():
      columns.setdefault(name, []).append(values.numpy())
  return {name: np.concatenate(parts) for name, parts in columns.items()}


def _rows(columns):
  names = sorted(columns)
  return sorted(zip(*(columns[name].tolist() for name in names)))


def test_auto_caches_the_taxi_split_as_a_parsed_table(taxi_artifacts):
  files = tf.io.gfile.glob(_train_files(taxi_artifacts)[0])
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  assert cache_policy.choose_cache('auto', files, spec).mode == 'parsed'


def test_record_count_estimate_is_close(taxi_artifacts):
  files = tf.io.gfile.glob(_train_files(taxi_artifacts)[0])
  records = sum(1 for _ in tf.data.TFRecordDataset(files,
                                                   compression_type='GZIP'))
  estimate = cache_policy.estimated_record_count(
      files, cache_policy._compressed_size(files))
  assert abs(estimate - records) / records < 0.05, (estimate, records)


def test_parsed_table_has_static_batches(taxi_artifacts):
  dataset = input_fns.default_dataset(
      _train_files(taxi_artifacts), _schema(taxi_artifacts), 'big_tipper',
      batch_size=32, training=True, repeat=True, cache='parsed')
  features, label = dataset.element_spec
  assert label.shape.as_list() == [32]
  assert features['fare_xf'].shape.as_list() == [32]
  assert features['company_xf'].dtype == tf.int64
  assert 'big_tipper' not in features


@pytest.mark.parametrize('batch_size', [1, 7])
def test_parsed_table_reads_what_parsing_per_batch_reads(taxi_artifacts,
                                                        batch_size):
  files, schema = _train_files(taxi_artifacts), _schema(taxi_artifacts)
  per_batch, parsed = (
      _table(input_fns.default_dataset(files, schema, 'big_tipper',
                                       batch_size, False, False, cache=cache))
      for cache in ('none', 'parsed'))
  assert sorted(parsed) == sorted(per_batch)
  for name in per_batch:
    np.testing.assert_array_equal(parsed[name], per_batch[name], name)


def test_parsed_training_epochs_are_fresh_permutations(taxi_artifacts):
  files, schema = _train_files(taxi_artifacts), _schema(taxi_artifacts)
  everything = _table(input_fns.default_dataset(files, schema, 'big_tipper',
                                                1, False, False))
  count = len(everything['label'])
  # One batch of the whole split is exactly one epoch.
  dataset = input_fns.default_dataset(files, schema, 'big_tipper', count,
                                      training=True, repeat=True,
                                      cache='parsed')
  iterator = iter(dataset)
  epochs = [_table([next(iterator)]) for _ in range(2)]
  for epoch in epochs:
    assert _rows(epoch) == _rows(everything)
  assert any(not np.array_equal(epochs[0][name], epochs[1][name])
             for name in everything)


def test_parsed_batches_cross_epoch_boundaries(taxi_artifacts):
  files, schema = _train_files(taxi_artifacts), _schema(taxi_artifacts)
  count = _count(input_fns.default_dataset(files, schema, 'big_tipper', 1,
                                           False, False))
  batch_size = count // 2 + 1  # Two batches take more than one epoch.
  dataset = input_fns.default_dataset(files, schema, 'big_tipper',
                                      batch_size, training=False, repeat=True,
                                      cache='parsed')
  labels = [label.numpy() for _, label in dataset.take(4)]
  assert [len(batch) for batch in labels] == [batch_size] * 4
  whole = np.concatenate(labels)
  np.testing.assert_array_equal(whole[count:2 * count], whole[:count])


def test_parsed_invocations_split_the_records(taxi_artifacts):
  files, schema = _train_files(taxi_artifacts), _schema(taxi_artifacts)
  whole = _count(input_fns.default_dataset(files, schema, 'big_tipper', 1,
                                           False, False, cache='parsed'))
  halves = [
      _count(input_fns.default_dataset(files, schema, 'big_tipper', 1, False,
                                       False, index, 2, cache='parsed'))
      for index in (0, 1)
  ]
  assert sum(halves) == whole


def _one_float_schema():
  schema = schema_pb2.Schema()
  for name in ('x', 'y'):
    feature = schema.feature.add(name=name, type=schema_pb2.FLOAT)
    feature.shape.SetInParent()
    feature.presence.min_fraction = 1
  return schema


def test_parsed_table_of_an_empty_split_ends_instead_of_hanging(tmp_path):
  path = str(tmp_path / 'empty.gz')
  with tf.io.TFRecordWriter(path, options='GZIP'):
    pass
  dataset = input_fns.default_dataset([path], _one_float_schema(), 'y', 4,
                                      training=True, repeat=True,
                                      cache='parsed')
  assert _count(dataset) == 0


def _copies(taxi_artifacts, directory, count, empty_first=False):
  """`count` copies of the train split's first file (after an empty one)."""
  [source] = tf.io.gfile.glob(_train_files(taxi_artifacts)[0])[:1]
  paths = []
  if empty_first:
    paths.append(str(directory / 'a-empty.gz'))
    with tf.io.TFRecordWriter(paths[-1], options='GZIP'):
      pass
  for index in range(count):
    paths.append(str(directory / f'b-copy-{index}.gz'))
    tf.io.gfile.copy(source, paths[-1])
  records = sum(1 for _ in tf.data.TFRecordDataset(source,
                                                   compression_type='GZIP'))
  return paths, records


def _peak_bytes(spec, rows):
  return 2 * rows * cache_policy._parsed_bytes_per_example(spec) + 16 * rows


def test_an_empty_first_file_does_not_hide_the_split(taxi_artifacts,
                                                     tmp_path, monkeypatch):
  files, records = _copies(taxi_artifacts, tmp_path, 2, empty_first=True)
  estimate = cache_policy.estimated_record_count(
      files, cache_policy._compressed_size(files))
  assert abs(estimate - 2 * records) / (2 * records) < 0.05
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  monkeypatch.setattr(cache_policy, 'PARSED_CACHE_MAX_BYTES',
                      _peak_bytes(spec, records))
  assert cache_policy.choose_cache('auto', files, spec).mode == 'serialized'


def test_per_host_estimate_counts_the_files_of_that_host(
    taxi_artifacts, tmp_path, monkeypatch):
  files, records = _copies(taxi_artifacts, tmp_path, 3)
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  # Host 0 of 2 reads files 0 and 2, host 1 reads file 1.
  monkeypatch.setattr(cache_policy, 'PARSED_CACHE_MAX_BYTES',
                      _peak_bytes(spec, 1.5 * records))
  assert [cache_policy.choose_cache('auto', files, spec, True, index, 2).mode
          for index in (0, 1)] == ['serialized', 'parsed']


def test_auto_tables_training_input_only(taxi_artifacts):
  files = tf.io.gfile.glob(_train_files(taxi_artifacts)[0])
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  assert cache_policy.choose_cache('auto', files, spec,
                                   training=False).mode == 'serialized'
  assert cache_policy.choose_cache('parsed', files, spec,
                                   training=False).mode == 'parsed'


def test_auto_falls_back_by_features_and_size(taxi_artifacts, monkeypatch):
  files = tf.io.gfile.glob(_train_files(taxi_artifacts)[0])
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  varlen = dict(spec, company_xf=tf.io.VarLenFeature(tf.int64))
  assert cache_policy.choose_cache('auto', files, varlen).mode == 'serialized'
  monkeypatch.setattr(cache_policy, 'PARSED_CACHE_MAX_BYTES', 1000)
  assert cache_policy.choose_cache('auto', files, spec).mode == 'serialized'
  monkeypatch.setattr(cache_policy, 'CACHE_MAX_COMPRESSED_BYTES', 1000)
  assert cache_policy.choose_cache('auto', files, spec).mode == 'none'
  assert cache_policy.choose_cache('serialized', files,
                                   spec).mode == 'serialized'


def test_parsed_cache_names_the_features_it_cannot_hold(taxi_artifacts):
  spec = schemas_lib.feature_spec(_schema(taxi_artifacts))
  spec.update(company_xf=tf.io.VarLenFeature(tf.int64),
              pickup_xf=tf.io.FixedLenFeature([None], tf.float32))
  with pytest.raises(cache_policy.InputCacheError) as error:
    cache_policy.check_cache_mode('parsed', spec)
  assert str(error.value) == (
      'input_cache="parsed" needs fixed-length features of a known shape; '
      "['company_xf', 'pickup_xf'] are not. Set input_cache to \"auto\" or "
      '"serialized" in custom_config.')
  with pytest.raises(cache_policy.InputCacheError,
                     match="'fast' is not one of"):
    cache_policy.check_cache_mode('fast', spec)


def test_record_count_of_no_files_is_zero():
  assert cache_policy.estimated_record_count([], 0) == 0.0


@pytest.mark.parametrize('cache,training', [('parsed', True),
                                            ('serialized', True),
                                            ('none', False)])
def test_default_chain_runs_without_the_autotune_model_thread(
    taxi_artifacts, cache, training):
  # Closing a session waits for an iterator's autotune thread (up to a
  # minute, when its wake-up is missed): the default chain runs without it.
  dataset = input_fns.default_dataset(
      _train_files(taxi_artifacts), _schema(taxi_artifacts), 'big_tipper',
      batch_size=16, training=training, repeat=training, cache=cache)
  assert dataset.options().autotune.enabled is False
  _, label = next(iter(dataset))
  assert label.shape == (16,)


def test_repeating_parsed_input_cuts_its_gathers_into_the_same_batches(
    taxi_artifacts):
  # Several batches per gather (4096 // 7 here) give the batches one gather
  # per batch would: the rows in epoch order, across epoch boundaries.
  files, schema = _train_files(taxi_artifacts), _schema(taxi_artifacts)
  everything = _table(input_fns.default_dataset(files, schema, 'big_tipper',
                                                1, False, False,
                                                cache='parsed'))
  count = len(everything['label'])
  batch_size = 7
  assert dataset_builders.ROWS_PER_GATHER // batch_size > 1
  batches = (2 * count) // batch_size + 3  # Over two epochs.
  dataset = input_fns.default_dataset(files, schema, 'big_tipper',
                                      batch_size, training=False, repeat=True,
                                      cache='parsed')
  assert dataset.element_spec[1].shape.as_list() == [batch_size]
  streamed = _table(dataset.take(batches))
  rows = np.arange(batches * batch_size) % count
  for name, column in everything.items():
    np.testing.assert_array_equal(streamed[name], column[rows], name)
