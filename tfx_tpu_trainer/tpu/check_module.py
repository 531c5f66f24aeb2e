"""The user module `tpu-check` trains: a tiny linear model on generated data."""

import tensorflow as tf

LABEL_KEY = 'y'
FEATURE_KEY = 'x'
# y = x . WEIGHTS + BIAS: the model learns it from a few hundred examples.
WEIGHTS = (0.5, -1.0, 2.0, 0.25)
BIAS = 0.1
NUM_EXAMPLES = 512


def _dataset() -> tf.data.Dataset:
  x = tf.random.stateless_uniform([NUM_EXAMPLES, len(WEIGHTS)], seed=[1, 2])
  y = tf.linalg.matvec(x, tf.constant(WEIGHTS)) + BIAS
  return tf.data.Dataset.from_tensor_slices(({FEATURE_KEY: x}, y))


def input_fn(file_pattern, data_accessor, schema, params):
  """Generated examples, repeated, in batches of static shape."""
  del file_pattern, data_accessor, schema  # The data is generated.
  dataset = _dataset()
  if params.get('mode') == tf.estimator.ModeKeys.TRAIN:
    dataset = dataset.shuffle(NUM_EXAMPLES, seed=3)
  return dataset.repeat().batch(params['batch_size'], drop_remainder=True)


def model_fn(features, labels, mode, params):
  """A linear regression as a TPUEstimatorSpec (CrossShardOptimizer on TPU)."""
  x = tf.reshape(tf.cast(features[FEATURE_KEY], tf.float32),
                 [-1, len(WEIGHTS)])
  weights = tf.compat.v1.get_variable('weights', [len(WEIGHTS), 1])
  bias = tf.compat.v1.get_variable('bias', [1],
                                   initializer=tf.zeros_initializer())
  prediction = tf.matmul(x, weights) + bias
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, predictions={'prediction': prediction})
  labels = tf.reshape(tf.cast(labels, tf.float32), [-1, 1])
  loss = tf.reduce_mean(tf.square(prediction - labels))
  if mode == tf.estimator.ModeKeys.EVAL:

    def metric_fn(labels, prediction):
      return {'mse': tf.compat.v1.metrics.mean_squared_error(labels,
                                                             prediction)}

    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode, loss=loss, eval_metrics=(metric_fn, [labels, prediction]))
  optimizer = tf.compat.v1.train.GradientDescentOptimizer(0.1)
  if params['use_tpu']:
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)
  train_op = optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op)


def serving_input_receiver_fn(params):
  """Serialized tf.Examples with the float feature `x`."""
  del params  # Nothing to configure.
  serialized = tf.compat.v1.placeholder(tf.string, [None], name='examples')
  features = tf.io.parse_example(serialized, {
      FEATURE_KEY: tf.io.FixedLenFeature([len(WEIGHTS)], tf.float32)})
  return tf.estimator.export.ServingInputReceiver(features,
                                                  {'examples': serialized})
