"""Module file: the taxi model with its categorical features in TPU embeddings."""

import tensorflow as tf

import taxi_features as features

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


def _dense(inputs, units, name, activation=None):
  kernel = tf.compat.v1.get_variable(
      f'{name}/kernel', shape=[inputs.shape[-1], units],
      initializer=tf.compat.v1.glorot_uniform_initializer())
  bias = tf.compat.v1.get_variable(
      f'{name}/bias', shape=[units],
      initializer=tf.compat.v1.zeros_initializer())
  outputs = tf.matmul(inputs, kernel) + bias
  return activation(outputs) if activation else outputs


def _logits(feature_tensors, params):
  """A deep network over the embeddings and the dense floats."""
  embedded = tf.compat.v1.feature_column.input_layer(
      feature_tensors, embedding_columns(params))
  floats = tf.concat([
      tf.reshape(tf.cast(feature_tensors[name], tf.float32), [-1, 1])
      for name in features.dense_feature_names()
  ], axis=1)
  net = tf.concat([embedded, floats], axis=1)
  for index, units in enumerate(params.get('hidden_units', _HIDDEN_UNITS)):
    net = _dense(net, units, f'deep/hidden_{index}', tf.nn.relu)
  return _dense(net, 1, 'deep/logits')


def metric_fn(labels, logits):
  """Eval metrics, computed on the host from the TPU's labels and logits."""
  probabilities = tf.sigmoid(logits)
  labels = tf.reshape(labels, [-1, 1])
  return {
      'accuracy': tf.compat.v1.metrics.accuracy(
          labels=labels, predictions=tf.cast(probabilities > 0.5, tf.int64)),
      'auc': tf.compat.v1.metrics.auc(labels=labels,
                                      predictions=probabilities),
  }


def model_fn(features, labels, mode, params):  # pylint: disable=redefined-outer-name
  """TPUEstimator model_fn: binary classification of big tippers.

  On a TPU, TPU embedding looks the ids up and applies Adagrad to the
  tables (embedding_config_spec); the optimizer here trains the network.
  Off the TPU (use_tpu=False, and the {serve} export) the same columns
  look the ids up on CPU and this optimizer, also Adagrad at the same
  rate, trains the tables too.
  """
  logits = _logits(features, params)
  probabilities = tf.sigmoid(logits)
  if mode == tf.estimator.ModeKeys.PREDICT:
    predictions = {
        'probabilities': probabilities,
        'logits': logits,
        'class_ids': tf.cast(probabilities > 0.5, tf.int64),
    }
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode,
        predictions=predictions,
        export_outputs={
            'serving_default': tf.estimator.export.PredictOutput(predictions),
            'classification': tf.estimator.export.ClassificationOutput(
                scores=tf.concat([1.0 - probabilities, probabilities], 1)),
        })
  loss = tf.reduce_mean(
      tf.nn.sigmoid_cross_entropy_with_logits(
          labels=tf.cast(tf.reshape(labels, [-1, 1]), tf.float32),
          logits=logits))
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
  optimizer = tf.compat.v1.train.AdagradOptimizer(
      params.get('learning_rate', _LEARNING_RATE))
  if params['use_tpu']:
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss,
      train_op=optimizer.minimize(
          loss, global_step=tf.compat.v1.train.get_global_step()))
