"""A model_fn whose loss turns NaN after a few steps (test module)."""

import tensorflow as tf

LABEL_KEY = 'big_tipper'


def model_fn(features, labels, mode, params):
  del labels, params
  weight = tf.compat.v1.get_variable('weight', [1])
  step = tf.cast(tf.compat.v1.train.get_or_create_global_step(), tf.float32)
  fare = tf.reshape(tf.cast(features['fare_xf'], tf.float32), [-1, 1])
  # log of a negative number once the step passes 3: NaN.
  loss = tf.reduce_mean(tf.math.log(3.5 - step) + weight * fare)
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, predictions={'score': weight * fare})
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss)
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
      loss, tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op)
