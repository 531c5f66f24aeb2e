"""TPU embedding features fed as TPUEstimator enqueues them (embedding_feed)."""

import types

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.tpu import tpu_embedding
from tensorflow_estimator.python.estimator.tpu import _tpu_estimator_embedding as estimator_embedding

from tfx_tpu_trainer.data import embedding_feed

TRACT_BUCKETS = 1000


def _columns():
  tpu_column = tf.compat.v1.tpu.experimental.embedding_column
  return [
      tpu_column(tf.feature_column.categorical_column_with_hash_bucket(
          'tract', TRACT_BUCKETS, dtype=tf.int64), 8),
      tpu_column(tf.feature_column.categorical_column_with_identity(
          'hour', 24), 4),
      tpu_column(tf.feature_column.categorical_column_with_vocabulary_list(
          'payment', ['Cash', 'Credit Card']), 4),
      tpu_column(tf.feature_column.weighted_categorical_column(
          tf.feature_column.categorical_column_with_identity('day', 8),
          'day_weight'), 4, combiner='sum'),
  ]


FEATURES = {
    'tract': np.array([[17031081401], [17031980100], [17031081401],
                       [17031320100]], np.int64),
    'hour': np.array([[0], [23], [-1], [5]], np.int64),
    'payment': np.array([[b'Cash'], [b'Credit Card'], [b'Cash'], [b'Other']]),
    'day': np.array([[1], [7], [3], [3]], np.int64),
    'day_weight': np.array([[0.5], [1.0], [2.0], [0.25]], np.float32),
    'fare': np.array([[1.0], [2.0], [3.0], [4.0]], np.float32),
}
LABELS = np.array([[0], [1], [0], [1]], np.int64)


def _dataset():
  return tf.data.Dataset.from_tensor_slices((FEATURES, LABELS)).batch(
      4, drop_remainder=True)


def test_the_columns_ids_are_fed_sparse_and_the_rest_stays_dense():
  fed = embedding_feed.fed_dataset(_dataset(), _columns())
  features_spec, labels_spec = fed.element_spec
  assert {name: type(spec).__name__ for name, spec in
          features_spec.items()} == {
              'tract': 'SparseTensorSpec', 'hour': 'SparseTensorSpec',
              'payment': 'SparseTensorSpec', 'day': 'SparseTensorSpec',
              'day_weight': 'SparseTensorSpec', 'fare': 'TensorSpec'}
  assert labels_spec == tf.TensorSpec([4, 1], tf.int64)
  features, labels = next(iter(fed))
  # Hashed: the rows the column hashes the ids to, not the raw ids.
  expected = tf.strings.to_hash_bucket_fast(
      tf.strings.as_string(FEATURES['tract'][:, 0]), TRACT_BUCKETS)
  assert features['tract'].values.numpy().tolist() == expected.numpy(
  ).tolist()
  assert max(features['tract'].values.numpy()) < TRACT_BUCKETS
  # Identity: the ids, -1 (no value) dropped as on CPU.
  assert features['hour'].indices.numpy()[:, 0].tolist() == [0, 1, 3]
  assert features['hour'].values.numpy().tolist() == [0, 23, 5]
  # Vocabulary: strings turned into rows; a word out of it (-1) pruned, as
  # the CPU lookup (safe_embedding_lookup_sparse) prunes it.
  assert features['payment'].dtype == tf.int64
  assert features['payment'].values.numpy().tolist() == [0, 1, 0]
  assert features['payment'].indices.numpy()[:, 0].tolist() == [0, 1, 2]
  # Weighted: the weights beside the ids, sparse.
  assert features['day_weight'].values.numpy().tolist() == [
      0.5, 1.0, 2.0, 0.25]
  assert features['day'].values.numpy().tolist() == [1, 7, 3, 3]
  np.testing.assert_array_equal(features['fare'].numpy(), FEATURES['fare'])
  np.testing.assert_array_equal(labels.numpy(), LABELS)


def _enqueue(dataset):
  """split_inputs and TPUEmbedding's enqueue ops, as on a TPU host."""
  columns = _columns()
  table_to_config, feature_to_config = (
      estimator_embedding.get_configs_from_feature_columns(columns))
  with tf.Graph().as_default():
    embedding = tpu_embedding.TPUEmbedding(
        table_to_config, feature_to_config, 4, tpu_embedding.TRAINING,
        master=None,
        optimization_parameters=tpu_embedding.AdagradParameters(0.1),
        device_config=tpu_embedding.DeviceConfig(1, 1, 'tpu_worker'))
    context = types.SimpleNamespace(
        embedding_config=types.SimpleNamespace(tpu_embedding=embedding),
        tensor_core_embedding_columns=None, batch_size_for_input_fn=4)
    features, _ = tf.compat.v1.data.make_initializable_iterator(
        dataset(columns)).get_next()
    dense, _, enqueue_datas = estimator_embedding.split_inputs(
        context, dict(features), None)
    embedding.generate_enqueue_ops(enqueue_datas)
    return sorted(dense)


def test_fed_ids_enqueue_as_tpu_estimator_enqueues_them():
  assert _enqueue(lambda columns: embedding_feed.fed_dataset(
      _dataset(), columns)) == ['fare']


def test_without_the_feed_tpu_estimator_refuses_the_strings():
  with pytest.raises(ValueError,
                     match='SparseTensor with string as values are not '
                     'supported'):
    _enqueue(lambda columns: _dataset())


def test_fed_input_fn_feeds_what_the_input_fn_returns():
  input_fn = embedding_feed.fed_input_fn(
      lambda params: _dataset().map(lambda features, labels: features),
      _columns())
  spec = input_fn({'batch_size': 4}).element_spec
  assert isinstance(spec['hour'], tf.SparseTensorSpec)
  assert isinstance(spec['fare'], tf.TensorSpec)
