"""Models the bulk-inference tests score: trained once per run of the suite."""

import os

import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tests.fixtures import pipeline_outputs

# Raw taxi features a canned estimator reads (floats in the CSV).
CANNED_FEATURES = ('trip_miles', 'fare')


@pytest.fixture(scope='session')
def taxi_model(taxi_trainer_run):
  """The bundled taxi module trained by TPUTrainer: {serve} + {serve, tpu}."""
  return taxi_trainer_run.model


def _raw_eval_features(taxi_artifacts, count=64):
  records = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'train', count)
  spec = {name: tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
          for name in CANNED_FEATURES}
  spec['big_tipper'] = tf.io.FixedLenFeature([], tf.int64, default_value=0)
  parsed = tf.io.parse_example(records, spec)
  label = parsed.pop('big_tipper').numpy()
  return {name: value.numpy() for name, value in parsed.items()}, label


def _serving_spec():
  return {name: tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
          for name in CANNED_FEATURES}


@pytest.fixture(scope='session')
def canned_model(tmp_path_factory, taxi_artifacts):
  """A canned LinearClassifier on raw features: classify, regress, predict."""
  root = tmp_path_factory.mktemp('canned_model')
  features, label = _raw_eval_features(taxi_artifacts)
  columns = [tf.feature_column.numeric_column(n) for n in CANNED_FEATURES]
  estimator = tf.compat.v1.estimator.LinearClassifier(
      columns, model_dir=str(root / 'model_dir'))
  estimator.train(
      lambda: tf.data.Dataset.from_tensor_slices((features, label)).batch(16),
      steps=4)
  exported = estimator.export_saved_model(
      str(root / 'export'),
      tf.estimator.export.build_parsing_serving_input_receiver_fn(
          _serving_spec()))
  model_dir = path_utils.serving_model_dir(str(root / 'artifact'))
  os.makedirs(os.path.dirname(model_dir), exist_ok=True)
  os.rename(exported.decode() if isinstance(exported, bytes) else exported,
            model_dir)
  return str(root / 'artifact')


@pytest.fixture(scope='session')
def keras_model(tmp_path_factory, taxi_artifacts):
  """A Keras model saved with a predict signature over serialized examples."""
  root = tmp_path_factory.mktemp('keras_model')
  features, label = _raw_eval_features(taxi_artifacts)
  inputs = {n: tf.keras.Input(shape=(1,), name=n) for n in CANNED_FEATURES}
  hidden = tf.keras.layers.Dense(8, activation='relu')(
      tf.keras.layers.Concatenate()(list(inputs.values())))
  outputs = tf.keras.layers.Dense(1, activation='sigmoid')(hidden)
  model = tf.keras.Model(inputs, outputs)
  model.compile('adam', 'binary_crossentropy')
  model.fit({n: v.reshape(-1, 1) for n, v in features.items()},
            label.reshape(-1, 1).astype('float32'), epochs=1, verbose=0)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                              name='examples')])
  def serve(examples):
    parsed = tf.io.parse_example(examples, _serving_spec())
    return {'probability': model(
        {n: tf.reshape(v, [-1, 1]) for n, v in parsed.items()})}

  model_dir = path_utils.serving_model_dir(str(root / 'artifact'))
  tf.saved_model.save(model, model_dir, signatures={'serving_default': serve})
  return str(root / 'artifact')
