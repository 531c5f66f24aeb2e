"""The benchmark's Keras Embedding twin of the taxi embedding model (module)."""

import os
import sys

import tensorflow as tf

_COMPONENTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'components')
if _COMPONENTS not in sys.path:
  sys.path.insert(0, _COMPONENTS)

# pylint: disable=g-import-not-at-top,wrong-import-position
import taxi_embedding_module
import taxi_features as features
from taxi_keras_module import ClampIds
# pylint: enable=g-import-not-at-top,wrong-import-position

LABEL_KEY = features.LABEL_KEY
_TRACT_KEY = features.transformed_name('dropoff_census_tract')


def build_keras_model(params):
  """The compiled Keras model of the embedding module's tables and network.

  The tables of components/taxi_embedding_module.py as `tf.keras.layers.
  Embedding`s over dense ids: the identity features clamped as the
  columns' default_value maps them, the dropoff census tract hashed into as
  many rows with the same hash (`Hashing` and
  `categorical_column_with_hash_bucket` both hash the id's decimal string
  with `tf.strings.to_hash_bucket_fast`). Keras holds each table as one
  variable; Adagrad updates the rows a batch reads.
  """
  dimension = params.get('embedding_dimension', 8)
  inputs, embedded = [], []
  for name, count in sorted(features.wide_feature_buckets().items()):
    ids = tf.keras.Input(shape=(), dtype=tf.int64, name=name)
    inputs.append(ids)
    embedded.append(tf.keras.layers.Embedding(count, dimension,
                                              name=f'{name}_embedding')(
                                                  ClampIds(count)(ids)))
  buckets = params.get('tract_buckets', taxi_embedding_module.TRACT_BUCKETS)
  tract = tf.keras.Input(shape=(), dtype=tf.int64, name=_TRACT_KEY)
  inputs.append(tract)
  embedded.append(tf.keras.layers.Embedding(
      buckets, dimension, name=f'{_TRACT_KEY}_embedding')(
          tf.keras.layers.Hashing(buckets)(tract)))
  floats = [tf.keras.Input(shape=(1,), dtype=tf.float32, name=name)
            for name in features.dense_feature_names()]
  inputs.extend(floats)
  net = tf.keras.layers.Concatenate()(embedded + floats)
  for index, units in enumerate(params.get('hidden_units',
                                           (100, 70, 48, 34))):
    net = tf.keras.layers.Dense(units, activation='relu',
                                name=f'deep_hidden_{index}')(net)
  probabilities = tf.keras.layers.Dense(1, activation='sigmoid',
                                        name='probabilities')(net)
  model = tf.keras.Model(inputs=inputs, outputs=probabilities,
                         name='taxi_keras_embedding')
  model.compile(
      optimizer=tf.keras.optimizers.Adagrad(
          learning_rate=params.get('learning_rate', 0.05)),
      loss='binary_crossentropy',
      metrics=['accuracy', tf.keras.metrics.AUC(name='auc')])
  return model
