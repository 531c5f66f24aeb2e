"""Feature columns a TPU cannot run: categorical (sparse) columns."""

import re
from typing import Any, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.feature_column import feature_column_v2 as fc_v2  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.feature_column import feature_column_v2_types as fc_types  # pylint: disable=g-direct-tensorflow-import

__all__ = ['column_kind', 'needs_sparse', 'dense_features_columns',
           'dense_features_message', 'column_of_op', 'SPARSE_OP_FIX',
           'sparse_op_cause']

# The attribute where a DenseFeatures layer keeps its columns.
_LAYER_COLUMNS_ATTRIBUTE = '_feature_columns'

# The name scopes feature columns give their ops: `<key>_indicator/...`,
# `<key>_embedding/...`, and `<column>/to_sparse_input/...` for the sparse
# ids of every categorical column; a Keras DenseFeatures layer's own scope.
_COLUMN_SCOPE = re.compile(
    r'(?:^|/)([^/]+_(?:indicator|embedding))/|(?:^|/)([^/]+)/to_sparse_input/')
_DENSE_FEATURES_SCOPE = re.compile(r'(?:^|/)(dense_features(?:_\d+)?)/')

_COLUMN_FUNCTIONS = {
    'IdentityCategoricalColumn': 'categorical_column_with_identity',
    'VocabularyListCategoricalColumn': 'categorical_column_with_vocabulary_list',
    'VocabularyFileCategoricalColumn': 'categorical_column_with_vocabulary_file',
    'HashedCategoricalColumn': 'categorical_column_with_hash_bucket',
    'BucketizedColumn': 'bucketized_column',
    'CrossedColumn': 'crossed_column',
    'IndicatorColumn': 'indicator_column',
    'EmbeddingColumn': 'embedding_column',
    'SharedEmbeddingColumn': 'shared_embedding_column',
    'WeightedCategoricalColumn': 'weighted_categorical_column',
    'SequenceCategoricalColumn': 'sequence_categorical_column',
    '_TPUEmbeddingColumnV2': 'tpu.experimental.embedding_column',
    '_TPUSharedEmbeddingColumnV2': 'tpu.experimental.shared_embedding_columns',
}
# What a Keras model cannot do with TPU embedding columns, and why.
_TPU_EMBEDDING_IN_KERAS = (
    ' TPU embedding columns (tf.compat.v1.tpu.experimental.embedding_column) '
    'are looked up by TPU embedding only for a model_fn module that lists '
    'them in embedding_config_spec(params); TPUTrainer turns a Keras model '
    'into a model_fn without that path, so put such tables in a model_fn '
    'module (components/taxi_embedding_module.py, '
    'docs/guide/tpu_embeddings.md).')


def column_kind(column: Any) -> str:
  """The tf.feature_column function that makes such a column."""
  name = type(column).__name__
  return _COLUMN_FUNCTIONS.get(name, name)


def needs_sparse(column: Any) -> bool:
  """True for columns that build sparse tensors (a TPU cannot run them)."""
  if isinstance(column, fc_v2.CategoricalColumn):
    return True
  return any(needs_sparse(parent) for parent in getattr(column, 'parents',
                                                          ()) or ()
             if isinstance(parent, fc_types.FeatureColumn))


def dense_features_columns(model: tf.keras.Model
                           ) -> Tuple[Tuple[str, str, str], ...]:
  """(column name, what it is, layer name) of the sparse columns of a model's
  DenseFeatures layers (nested models included)."""
  found = []
  for layer in _layers(model):
    for column in getattr(layer, _LAYER_COLUMNS_ATTRIBUTE, None) or ():
      if isinstance(column, fc_types.FeatureColumn) and needs_sparse(column):
        found.append((column.name, column_kind(column),
                      f'{type(layer).__name__} layer {layer.name!r}'))
  return tuple(found)


def _layers(model: tf.keras.Model) -> List[tf.keras.layers.Layer]:
  layers = []
  for layer in getattr(model, 'layers', ()):
    layers.append(layer)
    if isinstance(layer, tf.keras.Model):
      layers.extend(_layers(layer))
  return layers


def dense_features_message(columns: Sequence[Tuple[str, str, str]]) -> str:
  """The one error for a Keras model that reads sparse columns on TPU."""
  named = ', '.join(f'{name!r} ({kind} in {where})'
                    for name, kind, where in columns)
  return (
      f'its model reads categorical feature column(s) {named}: '
      'DenseFeatures turns their ids into sparse tensors, whose '
      'data-dependent shapes a TPU computation cannot hold (the root cause '
      'of the dynamic-shape ops it makes), so the model cannot train on TPU. '
      'Give the model a tf.keras.Input per id feature and one-hot it '
      '(tf.one_hot, or tf.keras.layers.CategoryEncoding) or embed it '
      '(tf.keras.layers.Embedding), as components/taxi_keras_module.py does; '
      'keep DenseFeatures for numeric_column only. Or train on CPU with '
      "custom_config['use_tpu']=False." +
      (_TPU_EMBEDDING_IN_KERAS if any(kind.startswith('tpu.') for _, kind, _
                                      in columns) else ''))


def column_of_op(op_name: str) -> Optional[Tuple[str, Optional[str]]]:
  """(column, DenseFeatures layer or None) whose sparse ids made the op."""
  match = _COLUMN_SCOPE.search(op_name)
  if match is None:
    return None
  layer = _DENSE_FEATURES_SCOPE.search(op_name)
  return match.group(1) or match.group(2), layer.group(1) if layer else None


# What replaces the categorical columns behind a dynamic-shape op.
SPARSE_OP_FIX = (
    'Feed the ids as dense features instead: a tf.keras.Input per id '
    'feature, one-hot encoded (tf.one_hot, tf.keras.layers.CategoryEncoding) '
    'or embedded (tf.keras.layers.Embedding), as '
    'components/taxi_keras_module.py does; keep DenseFeatures or input_layer '
    'for numeric_column only. Or, in a model_fn module, give the ids to TPU '
    'embedding: a tf.compat.v1.tpu.experimental.embedding_column listed in '
    'embedding_config_spec(params) (docs/guide/tpu_embeddings.md).')


def sparse_op_cause(column: str, layer: Optional[str]) -> str:
  """Why an op a categorical column made has a data-dependent shape."""
  where = f" of the DenseFeatures layer {layer!r}" if layer else ''
  return (
      f'belongs to the feature column {column!r}{where}: categorical feature '
      'columns (indicator_column or embedding_column over '
      'categorical_column_with_*) turn ids into sparse tensors whose size '
      'depends on the data, which a TPU computation cannot hold.')
