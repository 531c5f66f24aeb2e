"""A model_fn written for tf.estimator.Estimator, adapted for TPU (test module).

`estimator_model_fn` returns an EstimatorSpec with eval_metric_ops built by
tf.compat.v1.metrics and a plain tf.compat.v1.train optimizer: what runs on
CPU under tf.estimator.Estimator. One library call makes it a TPU model_fn.
"""

import tensorflow as tf

from tfx_tpu_trainer.estimator_adapter import to_tpu_model_fn

LABEL_KEY = 'big_tipper'
_FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def estimator_model_fn(features, labels, mode, params):
  """Logistic regression over three transformed floats."""
  inputs = tf.concat(
      [tf.reshape(tf.cast(features[name], tf.float32), [-1, 1])
       for name in _FLOAT_FEATURES], axis=1)
  weights = tf.compat.v1.get_variable('weights', [len(_FLOAT_FEATURES), 1])
  bias = tf.compat.v1.get_variable('bias', [1],
                                   initializer=tf.zeros_initializer())
  logits = tf.matmul(inputs, weights) + bias
  probabilities = tf.sigmoid(logits)
  predictions = {
      'probabilities': probabilities,
      'class_ids': tf.cast(probabilities > 0.5, tf.int64),
  }
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.estimator.EstimatorSpec(mode=mode, predictions=predictions)
  float_labels = tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)
  per_example_loss = tf.nn.sigmoid_cross_entropy_with_logits(
      labels=float_labels, logits=logits)
  loss = tf.reduce_mean(per_example_loss)
  eval_metric_ops = {
      'accuracy': tf.compat.v1.metrics.accuracy(
          labels=float_labels,
          predictions=tf.cast(predictions['class_ids'], tf.float32)),
      'auc': tf.compat.v1.metrics.auc(labels=float_labels,
                                      predictions=probabilities),
      'mean_loss': tf.compat.v1.metrics.mean(loss),
  }
  optimizer = tf.compat.v1.train.AdagradOptimizer(
      params.get('learning_rate', 0.1))
  train_op = optimizer.minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.estimator.EstimatorSpec(
      mode=mode, loss=loss, train_op=train_op,
      eval_metric_ops=eval_metric_ops, predictions=predictions)


model_fn = to_tpu_model_fn(estimator_model_fn)
