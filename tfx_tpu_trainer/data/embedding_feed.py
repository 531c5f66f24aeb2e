"""TPU embedding features fed as TPUEstimator enqueues them: sparse ids."""

from typing import Any, Callable, Dict, Mapping, Sequence

import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fc_v2  # pylint: disable=g-direct-tensorflow-import

__all__ = ['feed_features', 'fed_dataset', 'fed_input_fn']


def feed_features(features: Mapping[str, Any],
                  columns: Sequence[Any]) -> Dict[str, Any]:
  """The features with each TPU embedding column's ids as TPU embedding takes them.

  On a TPU, TPUEstimator pops each column's feature (and its weights) from
  the batch and enqueues its values as table rows as they are: it does not
  run the column's transform (hash, vocabulary, identity range), and it
  refuses strings. Here every column's categorical transform runs on the
  host, as the column runs it on CPU, so the ids that reach the TPU are the
  rows the CPU lookup (and the `{serve}` export) reads: an int64
  SparseTensor per column under its feature key (empty values, -1 and '',
  dropped as on CPU), and the weights of a weighted column as a float
  SparseTensor under its weight key. Other features stay as they are.

  Args:
    features: one batch's features by name.
    columns: the TPU embedding columns of the module's EmbeddingConfigSpec.

  Returns:
    The features to infeed.
  """
  cache = fc_v2.FeatureTransformationCache(dict(features))
  fed = dict(features)
  for column in columns:
    ids = column.categorical_column.get_sparse_tensors(cache, None)
    fed[column.get_feature_key_name()] = ids.id_tensor
    weight_key = column.get_weight_key_name()
    if weight_key:
      fed[weight_key] = ids.weight_tensor
  return fed


def fed_dataset(dataset: tf.data.Dataset,
                columns: Sequence[Any]) -> tf.data.Dataset:
  """`dataset` of features or (features, labels) with `feed_features` applied."""
  if isinstance(dataset.element_spec, tuple) and len(
      dataset.element_spec) == 2:
    return dataset.map(lambda features, labels: (
        feed_features(features, columns), labels),
                       num_parallel_calls=tf.data.AUTOTUNE)
  return dataset.map(lambda features: feed_features(features, columns),
                     num_parallel_calls=tf.data.AUTOTUNE)


def fed_input_fn(input_fn: Callable[[Dict[str, Any]], tf.data.Dataset],
                 columns: Sequence[Any]
                 ) -> Callable[[Dict[str, Any]], tf.data.Dataset]:
  """`input_fn(params)` whose dataset is fed (`fed_dataset`)."""

  def fed(params: Dict[str, Any]) -> tf.data.Dataset:
    return fed_dataset(input_fn(params), columns)

  return fed
