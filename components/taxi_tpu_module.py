"""Wide-and-deep TPU model_fn for the transformed taxi features (module file).

The shape of the stock TFX example's DNNLinearCombinedClassifier: a linear
("wide") part over the categorical ids and a DNN ("deep") part over the
z-scored floats, written with dense ops only (gathers and matmuls), so the
same graph compiles for TPU and runs on CPU.
"""

import tensorflow as tf

import taxi_features as features

LABEL_KEY = features.LABEL_KEY

_HIDDEN_UNITS = (100, 70, 48, 34)


def _ids(tensor, num_ids):
  """[batch] int ids, out-of-range ids mapped to 0 like identity columns."""
  ids = tf.cast(tf.reshape(tensor, [-1]), tf.int32)
  in_range = tf.logical_and(ids >= 0, ids < num_ids)
  return tf.where(in_range, ids, tf.zeros_like(ids))


def _wide_logits(feature_tensors):
  """The linear part: one weight per id of every categorical feature.

  All features share one table (each at its own offset), so a step costs one
  gather and one sparse update instead of one per feature.
  """
  buckets = sorted(features.wide_feature_buckets().items())
  offsets, ids = 0, []
  for name, num_ids in buckets:
    ids.append(_ids(feature_tensors[name], num_ids) + offsets)
    offsets += num_ids
  weights = tf.compat.v1.get_variable(
      'wide/weights', shape=[offsets, 1],
      initializer=tf.compat.v1.zeros_initializer())
  bias = tf.compat.v1.get_variable(
      'wide/bias', shape=[1], initializer=tf.compat.v1.zeros_initializer())
  gathered = tf.gather(weights, tf.stack(ids, axis=1))  # [batch, features, 1]
  return tf.reduce_sum(gathered, axis=1) + bias


def _dense(inputs, units, name, activation=None):
  kernel = tf.compat.v1.get_variable(
      f'{name}/kernel', shape=[inputs.shape[-1], units],
      initializer=tf.compat.v1.glorot_uniform_initializer())
  bias = tf.compat.v1.get_variable(
      f'{name}/bias', shape=[units],
      initializer=tf.compat.v1.zeros_initializer())
  outputs = tf.matmul(inputs, kernel) + bias
  return activation(outputs) if activation else outputs


def _deep_logits(feature_tensors, hidden_units):
  net = tf.concat([
      tf.reshape(tf.cast(feature_tensors[name], tf.float32), [-1, 1])
      for name in features.dense_feature_names()
  ], axis=1)
  for index, units in enumerate(hidden_units):
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
  """TPUEstimator model_fn: binary classification of big tippers."""
  hidden_units = params.get('hidden_units', _HIDDEN_UNITS)
  logits = _wide_logits(features) + _deep_logits(features, hidden_units)
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

  float_labels = tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)
  loss = tf.reduce_mean(
      tf.nn.sigmoid_cross_entropy_with_logits(labels=float_labels,
                                              logits=logits))
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))

  optimizer = tf.compat.v1.train.AdamOptimizer(
      learning_rate=params.get('learning_rate', 0.001))
  if params['use_tpu']:
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  train_op = optimizer.minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op)
