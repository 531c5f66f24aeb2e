"""A small TPU model_fn over transformed taxi features (test module).

When `params['probe_file']` is set, model_fn writes the params it got in
TRAIN mode there, so tests can see what reached it; `params['step_seconds']`
makes every training step sleep that long, so a test can kill it mid-way.
"""

import json
import time

import tensorflow as tf

LABEL_KEY = 'big_tipper'
_FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def model_fn(features, labels, mode, params):
  if mode == tf.estimator.ModeKeys.TRAIN and params.get('probe_file'):
    with tf.io.gfile.GFile(params['probe_file'], 'w') as f:
      f.write(json.dumps({k: v for k, v in params.items() if k != 'context'}))
  inputs = tf.concat(
      [tf.reshape(tf.cast(features[name], tf.float32), [-1, 1])
       for name in _FLOAT_FEATURES], axis=1)
  weights = tf.compat.v1.get_variable('weights', [len(_FLOAT_FEATURES), 1])
  bias = tf.compat.v1.get_variable('bias', [1],
                                   initializer=tf.zeros_initializer())
  logits = tf.matmul(inputs, weights) + bias
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, predictions={'probabilities': tf.sigmoid(logits)})
  loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.cast(tf.reshape(labels, [-1, 1]), tf.float32), logits=logits))
  if mode == tf.estimator.ModeKeys.EVAL:
    def metric_fn(labels, logits):
      return {'accuracy': tf.compat.v1.metrics.accuracy(
          tf.reshape(labels, [-1, 1]), tf.cast(logits > 0, tf.int64))}
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
  optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
  if params['use_tpu']:
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
  if params.get('step_seconds'):
    sleep = tf.compat.v1.py_func(
        lambda: time.sleep(params['step_seconds']) or 0.0, [], tf.float64)
    train_op = tf.group(train_op, sleep)
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op)
