"""Findings and errors that start with what in the user's module caused them:
the feature column behind sparse ops, the line behind an XLA error, the
features dict a single-tensor model_fn divides."""

import importlib.util
import os

import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer.preflight import graph as preflight_graph
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import sample as preflight_sample
from tfx_tpu_trainer.preflight import xla_errors

from tests.conftest import TEST_MODULES_DIR


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _load(name):
  return user_module.load_user_module({'module_file': _path(name)})


def _sample():
  spec = {'fare_xf': tf.io.FixedLenFeature([], tf.float32),
          'trip_start_hour_xf': tf.io.FixedLenFeature([], tf.int64),
          'big_tipper': tf.io.FixedLenFeature([], tf.int64)}
  return preflight_sample.from_feature_spec(spec, 'big_tipper', 8, 'synthetic')


def test_sparse_ops_of_an_input_layer_name_their_feature_column():
  module = _load('input_layer_module.py')
  report = preflight.run_preflight(
      dispatch.model_fn_for_module(module), config_lib.TrainerConfig(), {},
      _sample(), module.module_file)
  errors = [f for f in report.errors if f.code == 'dynamic-shape']
  assert errors
  message = errors[0].message
  assert message.startswith(
      "op 'input_layer/trip_start_hour_xf_indicator/to_sparse_input/indices' "
      "(Where) belongs to the feature column 'trip_start_hour_xf_indicator': "
      'categorical feature columns (indicator_column or embedding_column over '
      'categorical_column_with_*) turn ids into sparse tensors whose size '
      'depends on the data, which a TPU computation cannot hold.')
  assert 'tf.boolean_mask' not in message
  assert ('keep DenseFeatures or input_layer for numeric_column only'
          in message)


def test_xla_error_names_the_users_line():
  spec = importlib.util.spec_from_file_location('xla_top_k_module',
                                                _path('xla_top_k_module.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  with pytest.raises(tf.errors.OpError) as error:
    module.top_values(tf.constant([1.0, 2.0, 3.0]))
  (finding,) = preflight_graph.xla_error_findings(error.value, 'train', [])
  assert finding.message.startswith(
      "the train step failed to compile or run with XLA at op 'TopKV2', made "
      f'by top_values at {_path("xla_top_k_module.py")}:9 '
      '(`return tf.math.top_k(x, k=k).values`). XLA said: '
      'InvalidArgumentError: ')
  assert 'Stack trace for op definition' not in finding.message


def test_xla_dimension_proof_failure_is_explained():
  # The words XLA's dynamic-dimension inference uses when it gives up.
  text = xla_errors.explanation(
      'Fail to proof the equality of two dimensions at compile time: '
      '%reduce.128 = f32[<=8] reduce(...) vs %add.12 = f32[8] add(...)')
  assert text.startswith(
      'XLA could not prove two dimensions equal: a tensor whose size depends '
      'on the data (tf.boolean_mask, tf.unique, tf.where with one argument, '
      'sparse tensors of categorical feature columns) meets one of fixed '
      'size.')


def test_single_tensor_model_fn_is_told_features_is_a_dict():
  module = _load('mnist_style_module.py')
  model_fn = dispatch.model_fn_for_module(module)
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    with pytest.raises(user_module.UserModuleError) as error:
      model_fn({'fare_xf': tf.zeros([8]), 'trip_start_hour_xf':
                tf.zeros([8], tf.int64)}, tf.zeros([8, 1], tf.int64),
               tf.estimator.ModeKeys.TRAIN, {'batch_size': 8}, None)
  assert str(error.value) == (
      f"model_fn in {module.module_file} raised TypeError in mode 'train': "
      "unsupported operand type(s) for /: 'dict' and 'float' (Note: features "
      "is a dict of the example's features by name ('fare_xf', "
      "'trip_start_hour_xf'), not one tensor: take the one the model reads "
      "with features['fare_xf'], or combine several with tf.concat or "
      'tf.stack.)')


def test_single_tensor_model_fn_in_preflight_says_features_is_a_dict():
  module = _load('mnist_style_module.py')
  report = preflight.run_preflight(
      dispatch.model_fn_for_module(module), config_lib.TrainerConfig(), {},
      _sample(), module.module_file)
  assert report.errors[0].code == 'model-fn-error'
  assert ("'dict' and 'float' (Note: features is a dict of the example's "
          'features by name' in report.errors[0].message)
  assert 'WithheldFeatures' not in report.errors[0].message


def test_a_root_cause_raised_in_every_step_is_printed_once(capfd):
  # `tfx-tpu-trainer preflight` on a Keras module whose DenseFeatures read
  # categorical columns: train, eval and export fail with the same error,
  # which the report prints once, naming the later steps.
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  assert cli.main(['preflight', '--module-file',
                   _path('dense_features_keras_module.py')]) == 1
  out = capfd.readouterr().out
  assert 'NOT TPU-ready: 1 error(s)' in out
  assert out.count('DenseFeatures turns their ids into sparse tensors') == 1
  assert out.count('[train/model-fn-error]') == 1
  assert '(Also in the eval and export steps.)' in out
  assert '[eval/model-fn-error]' not in out
  assert '[export/model-fn-error]' not in out


def test_findings_of_one_error_in_several_steps_merge():
  error = 'KerasModelError: the same'
  findings = [
      preflight_report.Finding('model-fn-error', 'error', f'a: {error}',
                               phase, error=error)
      for phase in ('train', 'eval', 'export')]
  findings.append(preflight_report.Finding(
      'model-fn-error', 'error', 'b: ValueError: other', 'eval',
      error='ValueError: other'))
  merged = preflight_report.merge_repeated(findings)
  assert [(f.phase, f.error, f.also_in) for f in merged] == [
      ('train', error, ('eval', 'export')),
      ('eval', 'ValueError: other', ())]
