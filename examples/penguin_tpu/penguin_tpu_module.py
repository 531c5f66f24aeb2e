"""TFX's penguin example as one module file: Transform and TPUTrainer.

As in TFX's `penguin_utils_keras.py`, one module serves both components:
`preprocessing_fn` z-scores the four measurements and turns the string label
`species` into vocabulary ids under `species_xf`; `build_keras_model`
(TPUTrainer's Keras contract, instead of the stock Trainer's `run_fn`)
returns the compiled classifier, whose output layer is named
`probabilities`: the key the Evaluator reads from the `serving_default`
signature.
"""

import tensorflow as tf
import tensorflow_transform as tft

FEATURE_KEYS = ('culmen_length_mm', 'culmen_depth_mm', 'flipper_length_mm',
                'body_mass_g')
RAW_LABEL_KEY = 'species'
LABEL_KEY = 'species_xf'  # What TPUTrainer trains on.
NUM_CLASSES = 3


def transformed_name(key: str) -> str:
  return key + '_xf'


def preprocessing_fn(inputs):
  """tf.Transform: z-scored measurements, the species as ids 0..2."""
  outputs = {transformed_name(key): tft.scale_to_z_score(inputs[key])
             for key in FEATURE_KEYS}
  outputs[LABEL_KEY] = tft.compute_and_apply_vocabulary(
      inputs[RAW_LABEL_KEY], vocab_filename='species')
  return outputs


def build_keras_model(params):
  """A small dense softmax classifier over the transformed measurements."""
  inputs = [tf.keras.Input(shape=(1,), dtype=tf.float32,
                           name=transformed_name(key))
            for key in FEATURE_KEYS]
  net = tf.keras.layers.Concatenate()(inputs)
  for index in range(2):
    net = tf.keras.layers.Dense(8, activation='relu',
                                name=f'hidden_{index}')(net)
  probabilities = tf.keras.layers.Dense(
      NUM_CLASSES, activation='softmax', name='probabilities')(net)
  model = tf.keras.Model(inputs=inputs, outputs=probabilities)
  model.compile(
      optimizer=tf.keras.optimizers.Adam(params.get('learning_rate', 0.01)),
      loss='sparse_categorical_crossentropy',
      metrics=['sparse_categorical_accuracy'])
  return model
