"""Wide-and-deep Keras model for the transformed taxi features (module file)."""

import tensorflow as tf

import taxi_features as features

LABEL_KEY = features.LABEL_KEY

_HIDDEN_UNITS = (100, 70, 48, 34)


class ClampIds(tf.keras.layers.Layer):
  """int32 ids, those outside [0, num_ids) mapped to 0 (like identity columns).

  Embedding lookups on TPU clamp out-of-range ids while CPU raises; mapping
  them first gives the same model on both.
  """

  def __init__(self, num_ids: int, **kwargs):
    super().__init__(**kwargs)
    self.num_ids = num_ids

  def call(self, ids):
    ids = tf.cast(ids, tf.int32)
    in_range = tf.logical_and(ids >= 0, ids < self.num_ids)
    return tf.where(in_range, ids, tf.zeros_like(ids))

  def get_config(self):
    return dict(super().get_config(), num_ids=self.num_ids)


def build_keras_model(params):
  """The compiled wide-and-deep classifier of big tippers.

  Args:
    params: `hidden_units`, `learning_rate` and `steps_per_execution` (for
      `model.fit`; TPUTrainer ignores it) are read when present.

  Returns:
    A compiled tf.keras functional model.
  """
  hidden_units = params.get('hidden_units', _HIDDEN_UNITS)
  inputs = []
  wide_terms = []
  for name, num_ids in sorted(features.wide_feature_buckets().items()):
    ids = tf.keras.Input(shape=(), dtype=tf.int64, name=name)
    inputs.append(ids)
    wide_terms.append(
        tf.keras.layers.Embedding(
            num_ids, 1, embeddings_initializer='zeros',
            name=f'wide_{name}')(ClampIds(num_ids, name=f'ids_{name}')(ids)))
  wide_logits = tf.keras.layers.Add(name='wide_logits')(wide_terms)

  dense_inputs = [
      tf.keras.Input(shape=(1,), dtype=tf.float32, name=name)
      for name in features.dense_feature_names()
  ]
  inputs.extend(dense_inputs)
  net = tf.keras.layers.Concatenate(name='deep_inputs')(dense_inputs)
  for index, units in enumerate(hidden_units):
    net = tf.keras.layers.Dense(units, activation='relu',
                                name=f'deep_hidden_{index}')(net)
  deep_logits = tf.keras.layers.Dense(1, name='deep_logits')(net)

  logits = tf.keras.layers.Add(name='logits')([wide_logits, deep_logits])
  probabilities = tf.keras.layers.Activation(
      'sigmoid', name='probabilities')(logits)
  model = tf.keras.Model(inputs=inputs, outputs=probabilities,
                         name='taxi_wide_and_deep')
  model.compile(
      optimizer=tf.keras.optimizers.Adam(
          learning_rate=params.get('learning_rate', 0.001)),
      loss='binary_crossentropy',
      metrics=['accuracy', tf.keras.metrics.AUC(name='auc')],
      steps_per_execution=params.get('steps_per_execution', 1))
  return model
