"""Modules written for the stock TFX Trainer (trainer_fn, run_fn) under TPUTrainer."""

import json
import os

import pytest
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tfx.utils import path_utils

from tfx_tpu_trainer import executor
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.model_fn import stock_trainer
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib

from tests.fixtures import pipeline_outputs
from tests.conftest import TEST_MODULES_DIR

TAXI_UTILS = os.path.join(os.path.dirname(tf.__file__), os.pardir, 'tfx',
                          'examples', 'chicago_taxi_pipeline', 'taxi_utils.py')
PENGUIN_KERAS = os.path.join(os.path.dirname(tf.__file__), os.pardir, 'tfx',
                             'examples', 'penguin', 'penguin_utils_keras.py')
TAXI_UTILS = os.path.normpath(TAXI_UTILS)
PENGUIN_KERAS = os.path.normpath(PENGUIN_KERAS)
SMALL = {'train_batch_size': 16, 'eval_batch_size': 16}


def _load(path):
  return user_module.load_user_module({'module_file': path})


def test_taxi_utils_is_a_stock_trainer_module():
  module = _load(TAXI_UTILS)
  assert module.model_fn is None and module.build_keras_model is None
  assert module.trainer_fn.where == f'trainer_fn in {TAXI_UTILS}'
  assert module.label_key_candidates == ('tips_xf', 'tips')


def test_penguin_keras_run_fn_is_taken_at_its_fit():
  module = _load(PENGUIN_KERAS)
  assert module.run_fn.where == f'run_fn in {PENGUIN_KERAS}'
  assert module.label_key_candidates == ('species_xf', 'species')


@pytest.mark.parametrize('path,names', [
    (os.path.join(TEST_MODULES_DIR, 'stock_run_fn_module.py'),
     "LABEL_KEY = 'species'")])
def test_run_fn_module_is_told_to_define_build_keras_model(path, names):
  with pytest.raises(user_module.UserModuleError) as error:
    _load(path)
  message = str(error.value)
  assert message.startswith(
      f'Module {path} defines run_fn(fn_args), the stock TFX Trainer\'s '
      'contract for Keras')
  assert 'Define build_keras_model(params) instead' in message
  assert names in message
  assert 'defines neither' not in message


def _stock(name, fn_args=None):
  module = _load(os.path.join(TEST_MODULES_DIR, name))
  from tfx.components.trainer import fn_args_utils  # pylint: disable=g-import-not-at-top
  return stock_trainer.stock_model(
      module.trainer_fn, fn_args or fn_args_utils.FnArgs(
          serving_model_dir='/nonexistent/must-not-be-written'), None)


def test_estimator_model_fn_and_params_are_taken():
  stock = _stock('stock_estimator_module.py')
  assert stock.kind == 'model_fn'
  assert stock.params == {'learning_rate': 0.05}
  assert not stock.sparse_columns
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.train.create_global_step()
    spec = stock.model_fn(
        {name: tf.zeros([4]) for name in
         ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')},
        tf.zeros([4, 1], tf.int64), tf_estimator.ModeKeys.EVAL,
        dict(stock.params, use_tpu=False, batch_size=4))
    assert isinstance(spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec)
    assert sorted(spec.eval_metrics[0](**spec.eval_metrics[1])) == ['auc']


def test_model_to_estimator_becomes_the_keras_model():
  stock = _stock('stock_keras_estimator_module.py')
  assert stock.kind == 'keras'


def test_canned_estimator_with_categorical_columns_on_tpu_is_one_error():
  cols = [tf.feature_column.categorical_column_with_identity('hour', 24)]
  dense = [tf.feature_column.numeric_column('fare')]
  estimator = tf_estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=cols, dnn_feature_columns=dense,
      dnn_hidden_units=[2])
  assert stock_trainer.sparse_feature_columns(estimator._model_fn) == (
      ('hour', 'categorical_column_with_identity', 'linear_feature_columns'),)


@pytest.mark.slow
def test_taxi_utils_trains_and_exports_on_cpu(taxi_artifacts, tmp_path):
  # The unchanged taxi_utils.py of the tfx wheel; its label 'tips_xf' is
  # 'big_tipper' in this project's transform.
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), TAXI_UTILS,
      custom_config=dict(SMALL, label_key='big_tipper'), train_steps=10,
      eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert metrics['global_step'] == 10
  for name in ('accuracy', 'auc', 'average_loss', 'precision', 'recall'):
    assert name in metrics
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 3)
  signature = loaded.signatures['serving_default']
  (input_name,) = signature.structured_input_signature[1]
  outputs = signature(**{input_name: tf.constant(raw)})
  assert outputs['scores'].shape == (3, 2)


@pytest.mark.slow
def test_taxi_utils_on_tpu_names_the_categorical_columns(taxi_artifacts,
                                                         tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), TAXI_UTILS,
      custom_config={'use_tpu': True, 'num_shards': 8, 'label_key':
                     'big_tipper', 'train_batch_size': 16,
                     'eval_batch_size': 16}, train_steps=10, eval_steps=2)
  with pytest.raises(stock_trainer.StockTrainerError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  message = str(error.value)
  assert message.startswith(
      f'the DNNLinearCombinedClassifierV2 of trainer_fn in {TAXI_UTILS} uses '
      "categorical feature column(s) 'payment_type_xf' "
      '(categorical_column_with_identity in linear_feature_columns)')
  assert "custom_config['use_tpu']=False" in message
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))


@pytest.mark.slow
def test_stock_estimator_module_trains_through_the_executor(taxi_artifacts,
                                                            tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path),
      os.path.join(TEST_MODULES_DIR, 'stock_estimator_module.py'),
      custom_config=SMALL, train_steps=6, eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    assert sorted(json.load(f)) == ['auc', 'global_step', 'loss']
