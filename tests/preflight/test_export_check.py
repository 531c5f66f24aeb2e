"""The export's PREDICT graph, checked before training, as TPUEstimator takes it.

tensorflow/tpu's ResNet returns a `tf.estimator.EstimatorSpec` in PREDICT
(TPUEstimator exports both tag sets from it); its MnasNet reads the latest
checkpoint while it builds PREDICT, to export the moving averages of the
weights. Before training there is no checkpoint: the check of the export on
CPU builds the graph again with one of the initial variables, and the TPU
preflight's export reads its train step's checkpoint. A PREDICT graph that
fails anyway says that it failed in the check before training.
"""

import os
import re

import pytest

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.preflight import cpu_graphs
from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR

READY_MODULES = ('predict_estimator_spec_module.py',
                 'export_reads_latest_checkpoint_module.py')


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _check_before_training(name):
  """The executor's check on CPU (use_tpu false) of a module."""
  module = user_module.load_user_module({'module_file': _path(name)})
  config = config_lib.TrainerConfig.from_custom_config(
      {'use_tpu': False, 'train_batch_size': 16, 'eval_batch_size': 16})

  def eval_input_fn(params):
    return module.input_fn(file_pattern=[], data_accessor=None, schema=None,
                           params=params)

  return cpu_graphs.check_graphs_before_training(
      prepare.prepare_run(config, module, None), config, eval_input_fn)


@pytest.mark.parametrize('name', READY_MODULES)
def test_export_check_before_training_passes(name):
  report = _check_before_training(name)
  assert report.ok, report.format()
  assert set(report.seconds) == {'eval', 'export'}


@pytest.mark.parametrize('name', READY_MODULES)
def test_tpu_preflight_exports_both_tag_sets(name, capsys):
  code = cli.main(['preflight', '--module-file', _path(name)])
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert code == 0, lines
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines


def test_export_that_fails_with_a_checkpoint_says_it_is_the_check():
  path = _path('export_without_moving_averages_module.py')
  with pytest.raises(user_module.UserModuleError) as error:
    _check_before_training('export_without_moving_averages_module.py')
  message = str(error.value)
  # The initial checkpoint holds what training checkpoints, no averages.
  assert re.fullmatch(
      re.escape(f"model_fn in {path} raised ValueError in mode 'infer': ") +
      r'Tensor \S+/ExponentialMovingAverage is not found in \S+/model.ckpt-0 '
      r'checkpoint \{.*\} ' + re.escape(cpu_graphs.EXPORT_CHECK_NOTE),
      message), message
  assert cpu_graphs.EXPORT_CHECK_NOTE.startswith(
      '(This is the check of the export before training: TPUTrainer builds '
      "the export's PREDICT graph before the first step, when "
      'config.model_dir holds no trained checkpoint, only one of the '
      'initial variables')


def test_a_saver_built_in_the_predict_model_fn_is_named_with_the_fix(capsys):
  path = _path('predict_saver_in_model_fn_module.py')
  assert cli.main(['preflight', '--module-file', path]) == 1
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert lines[0] == f'TPU preflight of {path}: NOT TPU-ready: 1 error(s)'
  assert lines[3] == (
      "ERROR   [export/xla-unsupported-op] op 'save/SaveV2' (SaveV2) in the "
      'export step cannot be compiled by XLA (XLA_CPU_JIT has no kernel for '
      'it), so the TPU cannot run it. A tf.compat.v1.train.Saver built in '
      'the model_fn is inside the TPU computation (e.g. for a Scaffold of an '
      "EstimatorSpec): build it in the TPUEstimatorSpec's scaffold_fn, which "
      "TPUEstimator calls outside it (as tensorflow/tpu's MnasNet does for "
      'its moving-average export).')


def test_a_serving_input_that_fails_is_the_exports_finding(tmp_path, capsys):
  # The PREDICT step is then checked on the training sample.
  schema = tmp_path / 'schema.pbtxt'
  present = 'presence { min_fraction: 1.0 } shape { }'
  schema.write_text(''.join(
      f'feature {{ name: "{name}" type: FLOAT {present} }}\n'
      for name in ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')) +
                    f'feature {{ name: "big_tipper" type: INT {present} }}\n')
  path = _path('broken_serving_module.py')
  assert cli.main(['preflight', '--module-file', path, '--schema',
                   str(schema)]) == 1
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert lines[0] == f'TPU preflight of {path}: NOT TPU-ready: 1 error(s)'
  assert lines[3] == (
      'ERROR   [export/export] exporting the {serve} and {serve, tpu} '
      f'SavedModel failed: UserModuleError: serving_input_receiver_fn in '
      f'{path} raised RuntimeError: the serving signature cannot be built')
  assert ('INFO    [export/predict-step] the PREDICT computation of the '
          '{serve, tpu} export compiled with XLA and ran on the sample.'
         ) in lines
