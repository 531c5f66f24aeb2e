"""Module file: the taxi model with its categorical features in TPU embeddings."""

import tensorflow as tf

import taxi_features as features
import taxi_tpu_module

LABEL_KEY = features.LABEL_KEY

_HIDDEN_UNITS = (100, 70, 48, 34)
_DIMENSION = 8
# Hashed census tracts: a table far larger than the ids the data holds (about
# 230 tracts in the taxi data), as tables of hashed ids are in production.
_TRACT_KEY = features.transformed_name('dropoff_census_tract')
TRACT_BUCKETS = 2**20
_LEARNING_RATE = 0.05


def embedding_columns(params):
  """One TPU embedding table per categorical feature.

  The ids of the bundled model's categorical features (vocabularies,
  buckets, hour, day, month) by identity, those out of range mapped to 0 as
  the bundled model maps them, and the dropoff census tract hashed into
  `params['tract_buckets']` rows (default `TRACT_BUCKETS`).
  """
  identity = [
      tf.feature_column.categorical_column_with_identity(
          name, num_buckets=count, default_value=0)
      for name, count in sorted(features.wide_feature_buckets().items())
  ]
  tract = tf.feature_column.categorical_column_with_hash_bucket(
      _TRACT_KEY, params.get('tract_buckets', TRACT_BUCKETS), dtype=tf.int64)
  dimension = params.get('embedding_dimension', _DIMENSION)
  return [
      tf.compat.v1.tpu.experimental.embedding_column(column, dimension)
      for column in identity + [tract]
  ]


def embedding_config_spec(params):
  """The tables TPU embedding holds and updates (Adagrad, as the rest)."""
  return tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
      feature_columns=embedding_columns(params),
      optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(
          learning_rate=params.get('learning_rate', _LEARNING_RATE)))


def _logits(feature_tensors, params):
  """A deep network over the embeddings and the dense floats."""
  embedded = tf.compat.v1.feature_column.input_layer(
      feature_tensors, embedding_columns(params))
  return taxi_tpu_module.deep_logits(
      tf.concat([embedded, taxi_tpu_module.dense_floats(feature_tensors)],
                axis=1),
      params.get('hidden_units', _HIDDEN_UNITS))


def _train_op(loss, params):
  """Adagrad: the network here; the tables too off the TPU.

  On a TPU, TPU embedding looks the ids up and applies Adagrad to the tables
  (embedding_config_spec); off it (use_tpu=False, and the {serve} export)
  the columns look the ids up on CPU and this optimizer, also Adagrad at
  the same rate, trains the tables too.
  """
  optimizer = tf.compat.v1.train.AdagradOptimizer(
      params.get('learning_rate', _LEARNING_RATE))
  if params['use_tpu']:
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  return optimizer.minimize(loss,
                            global_step=tf.compat.v1.train.get_global_step())


def model_fn(features, labels, mode, params):  # pylint: disable=redefined-outer-name
  """TPUEstimator model_fn: binary classification of big tippers."""
  return taxi_tpu_module.classifier_spec(
      mode, _logits(features, params), labels,
      lambda loss: _train_op(loss, params))
