"""Module file: a wide-and-deep TPU model_fn over the transformed taxi data."""

import tensorflow as tf

import taxi_features as features

LABEL_KEY = features.LABEL_KEY

_HIDDEN_UNITS = (100, 70, 48, 34)


def _columns(feature_tensors, names):
  """[batch, len(names)]: the named scalar features side by side."""
  return tf.stack([
      tensor if tensor.shape.rank == 1 else tf.reshape(tensor, [-1])
      for tensor in (feature_tensors[name] for name in names)
  ], axis=1)


def _wide_logits(feature_tensors):
  """The linear part: one weight per id of every categorical feature.

  All features share one table (each at its own offset), so a step costs one
  gather and one update instead of one per feature; the ids of all features
  are range-checked together (out-of-range ids map to 0, like identity
  columns).
  """
  names, sizes = zip(*sorted(features.wide_feature_buckets().items()))
  offsets = [sum(sizes[:index]) for index in range(len(sizes))]
  ids = tf.cast(_columns(feature_tensors, names), tf.int32)
  in_range = tf.logical_and(ids >= 0, ids < tf.constant(sizes, tf.int32))
  ids = tf.where(in_range, ids, 0) + tf.constant(offsets, tf.int32)
  weights = tf.compat.v1.get_variable(
      'wide/weights', shape=[sum(sizes), 1],
      initializer=tf.compat.v1.zeros_initializer())
  bias = tf.compat.v1.get_variable(
      'wide/bias', shape=[1], initializer=tf.compat.v1.zeros_initializer())
  gathered = tf.gather(weights, ids)  # [batch, features, 1]
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


def dense_floats(feature_tensors):
  """[batch, 3] float32: the z-scored dense features side by side."""
  return tf.cast(_columns(feature_tensors, features.dense_feature_names()),
                 tf.float32)


def deep_logits(net, hidden_units):
  """The deep part: ReLU layers of `hidden_units` over `net`, then a logit."""
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


def _optimizer(optimizer, use_tpu):
  return tf.compat.v1.tpu.CrossShardOptimizer(optimizer) if use_tpu else (
      optimizer)


def _train_op(loss, params):
  """FTRL for the wide part, Adagrad for the deep part.

  The optimizers of the stock example's DNNLinearCombinedClassifier, at the
  learning rates of the TF1 canned estimator (FTRL: min(0.2, 1/sqrt(number
  of linear columns)); Adagrad: 0.05), which converge within a thousand
  steps here. Each has one fused update op per variable.
  """
  wide_rate = min(0.2, 1 / len(features.wide_feature_buckets())**0.5)
  wide = _optimizer(
      tf.compat.v1.train.FtrlOptimizer(
          params.get('wide_learning_rate', wide_rate)), params['use_tpu'])
  deep = _optimizer(
      tf.compat.v1.train.AdagradOptimizer(
          params.get('deep_learning_rate', 0.05)), params['use_tpu'])

  def variables(scope):
    return tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES, scope=scope)

  wide_variables, deep_variables = variables('wide'), variables('deep')
  # One backward pass (summed across TPU replicas) for both parts.
  gradients = wide.compute_gradients(loss,
                                     var_list=wide_variables + deep_variables)
  return tf.group(
      wide.apply_gradients(gradients[:len(wide_variables)]),
      deep.apply_gradients(gradients[len(wide_variables):],
                           global_step=tf.compat.v1.train.get_global_step()))


def classifier_spec(mode, logits, labels, train_op_fn):
  """The TPUEstimatorSpec of a big-tipper classifier with these logits.

  Args:
    mode: the estimator mode.
    logits: [batch, 1].
    labels: the labels (None in PREDICT).
    train_op_fn: `train_op_fn(loss)` -> the train op (TRAIN only).

  Returns:
    The spec: predictions and export outputs, the loss, eval metrics or the
    train op.
  """
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
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode=mode, loss=loss, train_op=train_op_fn(loss))


def model_fn(features, labels, mode, params):  # pylint: disable=redefined-outer-name
  """TPUEstimator model_fn: binary classification of big tippers."""
  hidden_units = params.get('hidden_units', _HIDDEN_UNITS)
  logits = _wide_logits(features) + deep_logits(dense_floats(features),
                                                 hidden_units)
  return classifier_spec(mode, logits, labels,
                         lambda loss: _train_op(loss, params))
