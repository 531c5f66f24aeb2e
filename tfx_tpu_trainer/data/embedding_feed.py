"""TPU embedding features fed as TPUEstimator enqueues them: sparse ids."""

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fc_v2  # pylint: disable=g-direct-tensorflow-import

__all__ = ['feed_features', 'fed_dataset', 'fed_input_fn']


def feed_features(features: Mapping[str, Any],
                  columns: Sequence[Any]) -> Dict[str, Any]:
  """The features, each TPU embedding column's ids as TPU embedding takes them.

  On a TPU, TPUEstimator pops each column's feature (and its weights) from
  the batch and enqueues its values as table rows as they are: it does not
  run the column's transform (hash, vocabulary, identity range), and it
  refuses strings. Here every column's categorical transform runs on the
  host, as the column runs it on CPU, so the ids that reach the TPU are the
  rows the CPU lookup (and the `{serve}` export) reads: an int64
  SparseTensor per column under its feature key (empty values, -1 and '',
  dropped, and the ids the CPU lookup prunes, `_valid`), and the weights of
  a weighted column as a float SparseTensor under its weight key. Other
  features stay as they are.

  Args:
    features: one batch's features by name.
    columns: the TPU embedding columns of the module's EmbeddingConfigSpec.

  Returns:
    The features to infeed.
  """
  cache = fc_v2.FeatureTransformationCache(dict(features))
  fed = dict(features)
  for column in columns:
    pair = column.categorical_column.get_sparse_tensors(cache, None)
    ids, weights = _valid(column, pair.id_tensor, pair.weight_tensor)
    fed[column.get_feature_key_name()] = ids
    weight_key = column.get_weight_key_name()
    if weight_key:
      fed[weight_key] = weights
  return fed


def _valid(column: Any, ids: tf.SparseTensor,
           weights: Optional[tf.SparseTensor]
           ) -> Tuple[tf.SparseTensor, Optional[tf.SparseTensor]]:
  """The ids the CPU lookup keeps: negative ids (a word out of a
  vocabulary) and weights <= 0 pruned, as `safe_embedding_lookup_sparse`
  prunes them for a column with `use_safe_embedding_lookup` (the default)."""
  if not getattr(column, 'use_safe_embedding_lookup', True):
    return ids, weights
  keep = ids.values >= 0
  if weights is not None:
    keep = tf.logical_and(keep, weights.values > 0)
    weights = tf.sparse.retain(weights, keep)
  return tf.sparse.retain(ids, keep), weights


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
