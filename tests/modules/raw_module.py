"""A TPU model_fn over the raw taxi features (test module, no Transform)."""

import tensorflow as tf

LABEL_KEY = 'big_tipper'
_FLOAT_FEATURES = ('fare', 'trip_miles')


def _dense(tensor):
  """[batch, 1] float from a [batch, <=1] SparseTensor of raw values."""
  if isinstance(tensor, tf.sparse.SparseTensor):
    tensor = tf.sparse.to_dense(
        tf.sparse.reset_shape(tensor, [tensor.dense_shape[0], 1]))
  return tf.reshape(tf.cast(tensor, tf.float32), [-1, 1])


def model_fn(features, labels, mode, params):
  del params
  inputs = tf.concat([tf.math.log1p(tf.abs(_dense(features[name])))
                      for name in _FLOAT_FEATURES], axis=1)
  logits = (
      tf.matmul(inputs, tf.compat.v1.get_variable('w', [2, 1])) +
      tf.compat.v1.get_variable('b', [1], initializer=tf.zeros_initializer()))
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, predictions={'probabilities': tf.sigmoid(logits)})
  loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=_dense(labels), logits=logits))
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode=mode, loss=loss)
  optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.05)
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss,
      train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step()))
