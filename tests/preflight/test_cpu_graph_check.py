"""On CPU the executor builds the eval and export graphs before training."""

import os

import pytest

from tfx_tpu_trainer import executor
from tfx_tpu_trainer import estimator_adapter
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.preflight import checks

from tests.fixtures import pipeline_outputs
from tests.conftest import TEST_MODULES_DIR

pytestmark = pytest.mark.slow


def test_eval_metric_that_cannot_be_adapted_fails_before_training(
    taxi_artifacts, tmp_path):
  path = os.path.join(TEST_MODULES_DIR, 'unadaptable_eval_metric_module.py')
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), path,
      custom_config={'use_tpu': False, 'train_batch_size': 16,
                     'eval_batch_size': 16},
      train_steps=2000, eval_steps=2)
  with pytest.raises(estimator_adapter.AdapterError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert str(error.value).startswith(
      "eval_metric_ops['accuracy_percent'] returned by "
      'unadaptable_eval_metric_module.estimator_model_fn is not the unchanged '
      'result of a tf.compat.v1.metrics.* call')
  # Nothing trained: no checkpoint, no model.
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))
  assert not os.path.exists(os.path.join(run.model.uri, 'Format-Serving'))


def test_metric_fn_that_fails_is_a_finding_before_training(taxi_artifacts,
                                                           tmp_path):
  path = os.path.join(TEST_MODULES_DIR, 'failing_metric_fn_module.py')
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), path,
      custom_config={'use_tpu': False, 'train_batch_size': 16,
                     'eval_batch_size': 16}, train_steps=2000, eval_steps=2)
  with pytest.raises(checks.PreflightError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert str(error.value).startswith(
      f'{path}: 1 error(s) found before training, in the graphs TPUEstimator '
      'builds on CPU:\n  ERROR   [eval/eval-metric-fn] the metric_fn of the '
      "'eval' TPUEstimatorSpec failed: KeyError: 'no_such_tensor'")
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))


def test_train_step_that_fails_fails_when_training_starts(taxi_artifacts,
                                                          tmp_path):
  # The train graph is not built twice: training builds it first and fails
  # there, naming the module's model_fn, before any step or checkpoint.
  path = os.path.join(TEST_MODULES_DIR, 'failing_train_step_module.py')
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), path,
      custom_config={'use_tpu': False, 'train_batch_size': 16,
                     'eval_batch_size': 16}, train_steps=2000, eval_steps=2)
  with pytest.raises(user_module.UserModuleError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert str(error.value) == (
      f"model_fn in {path} raised KeyError in mode 'train': "
      "'no_such_feature'")
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))
  assert not os.path.exists(os.path.join(run.model.uri, 'Format-Serving'))
