"""On CPU the executor builds the eval and export graphs before training."""

import os

import pytest

from tfx_tpu_trainer import estimator_adapter
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.preflight import cpu_graphs as checks
from tfx_tpu_trainer.preflight import report as preflight_report

from tests.fixtures import pipeline_outputs
from tests.conftest import TEST_MODULES_DIR

pytestmark = pytest.mark.slow


def _failed_run(taxi_artifacts, tmp_path, module_name, error_type,
                **custom_config):
  """The module's path, its trainer run and the error its Do() raised."""
  path = os.path.join(TEST_MODULES_DIR, module_name)
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), path,
      custom_config=dict({'use_tpu': False, 'train_batch_size': 16,
                          'eval_batch_size': 16}, **custom_config),
      train_steps=2000, eval_steps=2)
  with pytest.raises(error_type) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  return path, run, error.value


def _assert_nothing_trained(run):
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))
  assert not os.path.exists(os.path.join(run.model.uri, 'Format-Serving'))


def test_eval_metric_that_cannot_be_adapted_fails_before_training(
    taxi_artifacts, tmp_path):
  _, run, error = _failed_run(taxi_artifacts, tmp_path,
                              'unadaptable_eval_metric_module.py',
                              estimator_adapter.AdapterError)
  assert str(error).startswith(
      "eval_metric_ops['accuracy_percent'] returned by "
      'unadaptable_eval_metric_module.estimator_model_fn is not the unchanged '
      'result of a tf.compat.v1.metrics.* call')
  _assert_nothing_trained(run)


def test_metric_fn_that_fails_is_a_finding_before_training(taxi_artifacts,
                                                           tmp_path):
  path, run, error = _failed_run(taxi_artifacts, tmp_path,
                                 'failing_metric_fn_module.py',
                                 preflight_report.PreflightError)
  assert str(error).startswith(
      f'{path}: 1 error(s) found before training, in the graphs TPUEstimator '
      'builds on CPU:\n  ERROR   [eval/eval-metric-fn] the metric_fn of the '
      "'eval' TPUEstimatorSpec failed: KeyError: 'no_such_tensor'")
  _assert_nothing_trained(run)


def test_train_step_that_fails_fails_when_training_starts(taxi_artifacts,
                                                          tmp_path):
  # The train graph is not built twice: training builds it first and fails
  # there, naming the module's model_fn, before any step or checkpoint.
  path, run, error = _failed_run(taxi_artifacts, tmp_path,
                                 'failing_train_step_module.py',
                                 user_module.UserModuleError)
  assert str(error) == (
      f"model_fn in {path} raised KeyError in mode 'train': "
      "'no_such_feature'")
  _assert_nothing_trained(run)


def test_export_api_v2_without_tpu_inference_fails_before_training(
    taxi_artifacts, tmp_path):
  path, run, error = _failed_run(taxi_artifacts, tmp_path, 'linear_module.py',
                                 preflight_report.PreflightError,
                                 export_saved_model_api_version=2)
  assert str(error).startswith(
      f'{path}: 1 error(s) found before training, in the graphs TPUEstimator '
      'builds on CPU:\n  ERROR   [export/no-tpu-inference] model_fn in '
      f"{path} does no TPU inference: with custom_config"
      "['export_saved_model_api_version']=2 TPUEstimator calls it in PREDICT "
      "mode with params['use_tpu']=True and leaves the TPU rewrite to it, but "
      'the graph it built holds no TPU op (TPUPartitionedCall), so the '
      '{serve, tpu} meta graph would be a CPU graph tagged for TPU serving.')
  assert 'tpu_estimator.model_fn_inference_on_tpu(model_fn' in str(error)
  _assert_nothing_trained(run)


def test_bfloat16_that_the_model_fn_ignores_fails_before_training(
    taxi_artifacts, tmp_path):
  _, run, error = _failed_run(taxi_artifacts, tmp_path, 'linear_module.py',
                              preflight_report.PreflightError, bfloat16=True)
  assert (
      "ERROR   [eval/bfloat16-unused] custom_config['bfloat16'] is true, but "
      'the eval step the model_fn built computes nothing in bfloat16: it '
      "reads neither params['precision'] ('bfloat16') nor "
      "params['use_bfloat16'].") in str(error)
  _assert_nothing_trained(run)
