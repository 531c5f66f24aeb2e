"""The model the preflight test modules share, each breaking it one way.

Logistic regression over three transformed taxi floats, written for
TPUEstimator as the bundled module is; `make_model_fn` adds one defect.
"""

import tensorflow as tf

LABEL_KEY = 'big_tipper'
FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def _metric_fn(labels, logits):
  return {'accuracy': tf.compat.v1.metrics.accuracy(
      tf.reshape(labels, [-1, 1]), tf.cast(logits > 0, tf.int64))}


def make_model_fn(forward=None, cross_shard=True, summary=False,
                  scalar_metric=False):
  """A TPU model_fn.

  Args:
    forward: `forward(logits, features) -> logits`, applied in every mode.
    cross_shard: wrap the optimizer in CrossShardOptimizer on TPU.
    summary: write a v1 summary of the logits.
    scalar_metric: pass the (scalar) loss to the eval metric_fn.

  Returns:
    The model_fn.
  """

  def model_fn(features, labels, mode, params):
    inputs = tf.concat(
        [tf.reshape(tf.cast(features[name], tf.float32), [-1, 1])
         for name in FLOAT_FEATURES], axis=1)
    weights = tf.compat.v1.get_variable('weights', [len(FLOAT_FEATURES), 1])
    bias = tf.compat.v1.get_variable('bias', [1],
                                     initializer=tf.zeros_initializer())
    logits = tf.matmul(inputs, weights) + bias
    if forward is not None:
      logits = forward(logits, features)
    if summary:
      tf.compat.v1.summary.scalar('mean_logit', tf.reduce_mean(logits))
    if mode == tf.estimator.ModeKeys.PREDICT:
      return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
          mode=mode, predictions={'probabilities': tf.sigmoid(logits)})
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1, 1]), tf.float32),
        logits=logits))
    if mode == tf.estimator.ModeKeys.EVAL:
      if scalar_metric:
        eval_metrics = (
            lambda loss: {'mean_loss': tf.compat.v1.metrics.mean(loss)},
            [loss])
      else:
        eval_metrics = (_metric_fn, [labels, logits])
      return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
          mode=mode, loss=loss, eval_metrics=eval_metrics)
    optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    if cross_shard and params['use_tpu']:
      optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss,
        train_op=optimizer.minimize(loss,
                                    tf.compat.v1.train.get_global_step()))

  return model_fn
