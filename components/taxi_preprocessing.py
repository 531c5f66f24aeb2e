"""tf.Transform preprocessing_fn of the taxi pipeline (module file)."""

import tensorflow as tf
import tensorflow_transform as tft

import taxi_features as features


def _fill_in_missing(x):
  """Densifies a [batch, <=1] SparseTensor to [batch], filling '' or 0."""
  if not isinstance(x, tf.sparse.SparseTensor):
    return tf.reshape(x, [-1])
  default_value = '' if x.dtype == tf.string else 0
  return tf.squeeze(
      tf.sparse.to_dense(
          tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]),
          default_value),
      axis=1)


def _as_int64(x):
  """Integer ids, also where SchemaGen saw no value and typed a column text.

  A TPU infeed carries no strings, so every transformed feature is numeric.
  """
  if x.dtype != tf.string:
    return tf.cast(x, tf.int64)
  text = tf.where(tf.equal(x, ''), tf.fill(tf.shape(x), '0'), x)
  return tf.cast(tf.strings.to_number(text, out_type=tf.float64), tf.int64)


def preprocessing_fn(inputs):
  """Maps raw taxi features to the model's transformed features and label."""
  outputs = {}
  for key in features.DENSE_FLOAT_FEATURE_KEYS:
    outputs[features.transformed_name(key)] = tft.scale_to_z_score(
        _fill_in_missing(inputs[key]))
  for key in features.VOCAB_FEATURE_KEYS:
    outputs[features.transformed_name(key)] = tft.compute_and_apply_vocabulary(
        _fill_in_missing(inputs[key]),
        top_k=features.VOCAB_SIZE,
        num_oov_buckets=features.OOV_SIZE)
  for key in features.BUCKET_FEATURE_KEYS:
    outputs[features.transformed_name(key)] = tft.bucketize(
        _fill_in_missing(inputs[key]), features.FEATURE_BUCKET_COUNT)
  for key in features.CATEGORICAL_FEATURE_KEYS:
    outputs[features.transformed_name(key)] = _as_int64(
        _fill_in_missing(inputs[key]))
  outputs[features.LABEL_KEY] = tf.cast(
      _fill_in_missing(inputs[features.LABEL_KEY]), tf.int64)
  return outputs
