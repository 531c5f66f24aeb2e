"""The export of a model with TPU embeddings whose {serve, tpu} graph fails."""

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.training import estimator_builder

pytestmark = pytest.mark.slow

# Looked up on the TensorCore: TF 2.15 builds no {serve, tpu} graph of it
# ("'SymbolicTensor' object has no attribute 'dense_shape'").
COLUMNS = [tf.compat.v1.tpu.experimental.embedding_column(
    tf.feature_column.categorical_column_with_identity('hour', 24), 4,
    embedding_lookup_device='tpu_tensor_core', tensor_core_shape=[None, 1])]


def _model_fn(features, labels, mode, params):
  del params
  logits = tf.compat.v1.layers.dense(
      tf.compat.v1.feature_column.input_layer(features, COLUMNS), 1)
  if mode == tf.estimator.ModeKeys.PREDICT:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode, predictions={'logits': logits})
  loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.cast(labels, tf.float32), logits=logits))
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode, loss=loss, train_op=tf.compat.v1.train.AdagradOptimizer(
          0.1).minimize(loss, tf.compat.v1.train.get_global_step()))


def _input_fn(params):
  hours = np.arange(32, dtype=np.int64).reshape([-1, 1]) % 24
  return tf.data.Dataset.from_tensor_slices(
      ({'hour': hours}, hours % 2)).repeat().batch(params['batch_size'],
                                                   drop_remainder=True)


def _serving_input():
  examples = tf.compat.v1.placeholder(tf.string, [None])
  features = tf.io.parse_example(
      examples, {'hour': tf.io.FixedLenFeature([1], tf.int64)})
  return tf.estimator.export.ServingInputReceiver(features,
                                                  {'examples': examples})


def _estimator(model_dir, export_to_tpu):
  config = config_lib.TrainerConfig(train_batch_size=8, eval_batch_size=8,
                                    export_to_tpu=export_to_tpu)
  return estimator_builder.build_estimator(
      _model_fn, config, estimator_builder.build_run_config(config, model_dir),
      {}, embedding_config_spec=(
          tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
              feature_columns=COLUMNS,
              optimization_parameters=(
                  tf.compat.v1.tpu.experimental.AdagradParameters(0.1)))))


@pytest.fixture(scope='module')
def trained_dir(tmp_path_factory):
  model_dir = str(tmp_path_factory.mktemp('tensor_core_model'))
  _estimator(model_dir, True).train(_input_fn, max_steps=2)
  return model_dir


def test_the_cpu_graph_is_kept_and_the_reason_logged(trained_dir, tmp_path,
                                                     absl_warnings):
  path = export.export_serving_model(
      _estimator(trained_dir, True), _serving_input,
      str(tmp_path / 'Format-Serving'),
      cpu_only_estimator=_estimator(trained_dir, False))
  assert export.saved_model_tag_sets(path) == [('serve',)]
  (warning,) = {r.getMessage() for r in absl_warnings.records
                if '{serve, tpu}' in r.getMessage()}
  assert warning.startswith(
      'The {serve, tpu} graph of this model with TPU embeddings cannot be '
      "exported (AttributeError: 'SymbolicTensor' object has no attribute "
      "'dense_shape'); exporting {serve} alone, its embeddings looked up on "
      'CPU.')
  assert not [name for name in tf.io.gfile.listdir(str(tmp_path))
              if name.startswith(export.STAGING_PREFIX)]


def test_without_a_cpu_only_estimator_the_export_fails_whole(trained_dir,
                                                             tmp_path):
  with pytest.raises(AttributeError, match='dense_shape'):
    export.export_serving_model(_estimator(trained_dir, True), _serving_input,
                                str(tmp_path / 'Format-Serving'))
  assert not tf.io.gfile.listdir(str(tmp_path))
