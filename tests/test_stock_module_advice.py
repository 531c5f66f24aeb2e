"""Modules written for the stock TFX Trainer's run_fn: accepted, or told the
right fix (the Estimator template, the label its input reads, DenseFeatures)."""

import os

import pytest
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.user_code import stock_contract
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.model_fn import stock_trainer
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer.preflight import sample as preflight_sample

from tests.conftest import TEST_MODULES_DIR

FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _load(name):
  return user_module.load_user_module({'module_file': _path(name)})


def _error(name):
  with pytest.raises(user_module.UserModuleError) as error:
    _load(name)
  return str(error.value)


def test_estimator_run_fn_is_taken_as_its_builders_trainer_fn():
  module = _load('estimator_run_fn_module.py')
  assert module.trainer_fn.where == (
      f'_create_train_and_eval_spec in {_path("estimator_run_fn_module.py")}')
  assert module.label_key_candidates == ('big_tipper',)
  stock = stock_trainer.stock_model(
      module.trainer_fn,
      fn_args_utils.FnArgs(serving_model_dir='/nonexistent/not-written',
                           train_steps=1, eval_steps=1), None)
  assert stock.kind == 'model_fn'
  assert stock.source.startswith('the DNNLinearCombinedClassifier')
  assert stock.source.endswith(
      f'of _create_train_and_eval_spec in '
      f'{_path("estimator_run_fn_module.py")}')
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    spec = stock.model_fn(
        {name: tf.zeros([4]) for name in FLOAT_FEATURES},
        tf.zeros([4, 1], tf.int64), tf_estimator.ModeKeys.TRAIN,
        dict(stock.params, use_tpu=False, batch_size=4))
  assert isinstance(spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec)
  assert spec.train_op is not None


def test_estimator_built_inside_run_fn_is_told_to_add_a_trainer_fn():
  path = _path('estimator_run_fn_inline_module.py')
  assert _error('estimator_run_fn_inline_module.py') == (
      f'Module {path} defines run_fn(fn_args), which trains a tf.estimator '
      'Estimator itself, so TPUTrainer cannot run it on TPU. TPUTrainer '
      "takes the Estimator of the stock Trainer's trainer_fn(fn_args, schema) "
      "contract (a dict whose 'estimator' is the Estimator) and trains it "
      'itself: move the code that builds the Estimator into a function '
      "build(fn_args, schema) returning {'estimator': estimator} and add the "
      'line `trainer_fn = build`. The train_and_evaluate and export code of '
      'run_fn are not needed; keep run_fn for the stock Trainer.')


def test_estimator_run_fn_with_two_builders_gets_the_one_line_fix():
  message = _error('estimator_run_fn_two_builders_module.py')
  assert ('add one line naming the function that returns it: '
          '`trainer_fn = _specs` (run_fn calls _specs, _warm_specs; '
          'TPUTrainer could not tell which one builds the Estimator)'
          in message)
  assert 'build_keras_model' not in message


def test_keras_run_fn_is_taken_with_the_label_its_input_reads(tmp_path):
  from tfx_tpu_trainer.model_fn import keras_run_fn  # pylint: disable=g-import-not-at-top
  module = _load('keras_run_fn_label_module.py')
  assert module.run_fn.where == (
      f'run_fn in {_path("keras_run_fn_label_module.py")}')
  assert module.label_key_candidates == ('tips', 'tips_xf')
  taken = keras_run_fn.run_fn_model(
      module.run_fn, fn_args_utils.FnArgs(
          train_files=[], train_steps=1,
          serving_model_dir=str(tmp_path / 'not-written')))
  assert taken.label_key == 'tips'
  assert not (tmp_path / 'not-written').exists()


def test_keras_run_fn_with_dense_features_is_told_the_root_cause_on_tpu(
    tmp_path):
  from tfx_tpu_trainer.model_fn import keras_run_fn  # pylint: disable=g-import-not-at-top
  module = _load('keras_run_fn_label_module.py')
  taken = keras_run_fn.run_fn_model(
      module.run_fn, fn_args_utils.FnArgs(train_files=[], train_steps=1))
  with tf.Graph().as_default():
    features = {name: tf.zeros([4]) for name in FLOAT_FEATURES}
    features.update({name: tf.zeros([4], tf.int64)
                     for name in ('trip_start_hour_xf', 'trip_start_day_xf')})
    with pytest.raises(user_module.UserModuleError) as error:
      taken.model_fn(features, tf.zeros([4], tf.int64),
                     tf_estimator.ModeKeys.TRAIN,
                     {'batch_size': 4, 'use_tpu': True})
  message = str(error.value)
  assert message.startswith(f'run_fn in {module.module_file}: its model '
                            'reads categorical feature column(s) ')
  assert 'DenseFeatures turns their ids into sparse tensors' in message


def test_run_fn_message_warns_of_dense_features_up_front():
  message = stock_contract.run_fn_message(
      'm.py', stock_contract.LabelKeys(('tips',), True), ['_build_keras_model'],
      ['categorical_column_with_identity', 'indicator_column'], fits=2,
      calls=['_build_keras_model()'])
  assert ("(its label: LABEL_KEY = 'tips', as its input function reads it, "
          "or custom_config['label_key'])" in message)
  assert message.endswith(
      'Before that model can train on TPU: its tf.keras.layers.DenseFeatures '
      'over categorical_column_with_identity, indicator_column columns makes '
      'sparse tensors, whose data-dependent shapes a TPU computation cannot '
      'hold: give the model a tf.keras.Input per id feature and one-hot it '
      '(tf.one_hot, or tf.keras.layers.CategoryEncoding) or embed it '
      '(tf.keras.layers.Embedding), as components/taxi_keras_module.py does; '
      'keep DenseFeatures for numeric_column only.')


def test_label_from_constants_alone_is_called_a_guess():
  message = _error('stock_run_fn_module.py')
  assert ("(its label: LABEL_KEY = 'species' is a guess from the label "
          'constant of the module: use the label feature its preprocessing_fn '
          "outputs, in LABEL_KEY or custom_config['label_key'])" in message)
  assert 'DenseFeatures' not in message


def test_label_keys_read_from_the_input_come_first():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location(
      'keras_run_fn_label_module', _path('keras_run_fn_label_module.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert stock_contract.label_keys(module) == stock_contract.LabelKeys(
      keys=('tips', 'tips_xf'), from_input=True)


def _sample():
  spec = {name: tf.io.FixedLenFeature([], tf.float32)
          for name in FLOAT_FEATURES}
  spec.update({name: tf.io.FixedLenFeature([], tf.int64)
               for name in ('trip_start_hour_xf', 'trip_start_day_xf')})
  spec['big_tipper'] = tf.io.FixedLenFeature([], tf.int64)
  return preflight_sample.from_feature_spec(spec, 'big_tipper', 8, 'synthetic')


def test_dense_features_over_indicator_columns_is_one_root_cause():
  module = _load('dense_features_keras_module.py')
  report = preflight.run_preflight(
      dispatch.model_fn_for_module(module), config_lib.TrainerConfig(), {},
      _sample(), module.module_file)
  # One finding, the root cause, for the three steps built (train, eval,
  # export); none of the op-level dynamic-shape findings the sparse ops
  # would give.
  assert [(f.phase, f.code, f.also_in) for f in report.errors] == [
      ('train', 'model-fn-error', ('eval', 'export'))]
  message = report.errors[0].message
  assert (f'KerasModelError: build_keras_model in {module.module_file}: its '
          "model reads categorical feature column(s) "
          "'trip_start_day_xf_indicator' (indicator_column in DenseFeatures "
          "layer 'dense_features_1'), 'trip_start_hour_xf_indicator' "
          "(indicator_column in DenseFeatures layer 'dense_features_1'): "
          'DenseFeatures turns their ids into sparse tensors' in message)
  assert ('Give the model a tf.keras.Input per id feature and one-hot it'
          in message)
  assert message.count('DenseFeatures turns their ids') == 1
  assert message.endswith('(Also in the eval and export steps.)')


def test_dense_features_model_builds_on_cpu():
  module = _load('dense_features_keras_module.py')
  model_fn = dispatch.model_fn_for_module(module)
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    features = {name: tf.zeros([4]) for name in FLOAT_FEATURES}
    features.update({name: tf.zeros([4], tf.int64)
                     for name in ('trip_start_hour_xf', 'trip_start_day_xf')})
    spec = model_fn(features, tf.zeros([4, 1], tf.int64),
                    tf_estimator.ModeKeys.TRAIN,
                    {'batch_size': 4, 'use_tpu': False})
  assert spec.train_op is not None


def test_no_label_key_error_names_the_command_line_flag():
  from tfx_tpu_trainer import prepare  # pylint: disable=g-import-not-at-top
  module = _load('unlabeled_keras_module.py')
  run = prepare.prepare_run(config_lib.TrainerConfig(), module, None)
  with pytest.raises(config_lib.ConfigError) as error:
    run.input_fn([], None, training=True, repeat=False, cache='none')
  assert str(error.value) == (
      f'No label key: set LABEL_KEY in {module.module_file} or '
      "custom_config['label_key'] to the label feature (tfx-tpu-trainer run: "
      '--label-key).')


@pytest.mark.slow
def test_estimator_run_fn_module_trains_unchanged_through_the_executor(
    taxi_artifacts, tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  from tfx.utils import path_utils  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.publishing import export  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.publishing import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pipeline_outputs  # pylint: disable=g-import-not-at-top
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), _path('estimator_run_fn_module.py'),
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16},
      train_steps=6, eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert metrics['global_step'] == 6
  assert {'accuracy', 'auc', 'average_loss'} <= set(metrics)
  assert export.saved_model_tag_sets(
      path_utils.serving_model_path(run.model.uri)) == [('serve',),
                                                         ('serve', 'tpu')]
