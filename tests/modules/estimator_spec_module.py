"""A model_fn written for tf.estimator.Estimator (test module)."""

import tensorflow as tf

LABEL_KEY = 'big_tipper'


def model_fn(features, labels, mode, params):
  del params
  weight = tf.compat.v1.get_variable('weight', [1])
  logits = weight * tf.reshape(tf.cast(features['fare_xf'], tf.float32),
                               [-1, 1])
  loss = tf.reduce_mean(tf.square(
      logits - tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
      loss, tf.compat.v1.train.get_global_step())
  return tf.estimator.EstimatorSpec(mode=mode, loss=loss, train_op=train_op)
