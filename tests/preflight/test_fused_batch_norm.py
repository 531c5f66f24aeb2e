"""Conv + batch norm, the layers of every TPU image model, pass the preflight.

`tf.compat.v1.layers.batch_normalization(fused=True)` (tensorflow/tpu's
ResNet and MnasNet) and Keras `BatchNormalization` make FusedBatchNormV3,
whose reserve-space output has no static shape: nothing in the model reads
it (only the op's own gradient, whose buffers XLA sizes), and XLA compiles
the step. The preflight CLI and the executor's preflight under the
`use_tpu` config (run here on CPU) find nothing wrong; the data-dependent
shapes the model reads (tf.unique, tf.boolean_mask) are still findings
(test_preflight.py).
"""

import os

import pytest

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR

MODULES = ('conv_batch_norm_module.py', 'keras_conv_batch_norm_module.py')


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


@pytest.mark.parametrize('name', MODULES)
def test_preflight_finds_a_conv_batch_norm_model_tpu_ready(name, capsys):
  code = cli.main(['preflight', '--module-file', _path(name)])
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert code == 0, lines
  assert lines[0] == f'TPU preflight of {_path(name)}: TPU-ready'
  assert not [line for line in lines if 'dynamic-shape' in line]
  assert any(line.startswith('INFO    [train/train-step] one train step '
                             'compiled with XLA and ran on the sample')
             for line in lines)


@pytest.mark.parametrize('name', MODULES)
def test_use_tpu_config_runs_the_preflight_without_errors(name):
  module = user_module.load_user_module({'module_file': _path(name)})
  config = config_lib.TrainerConfig.from_custom_config(
      {'use_tpu': True, 'num_shards': 8, 'train_batch_size': 32,
       'eval_batch_size': 32})

  def train_input_fn(params):
    return module.input_fn(file_pattern=[], data_accessor=None, schema=None,
                           params=params)

  report = preflight.check_before_training(
      prepare.prepare_run(config, module, None), config, train_input_fn)
  assert report.ok, report.format()
  assert [f.code for f in report.findings] == [
      'train-step', 'eval-step', 'predict-step', 'export']

