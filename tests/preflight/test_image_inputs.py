"""Image inputs laid out for the TPU, as tensorflow/tpu's models infeed them.

With `transpose_input` (their default on TPU) ResNet's and MnasNet's
input_fns infeed each batch as [height, width, channels, batch] and their
model_fns transpose it back, but not in PREDICT: the export's serving
input gives NHWC images. The preflight builds the export's PREDICT step on
features shaped as the serving input gives them, and the batch may be on
the last axis of the input.
"""

import os

from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR

TRANSPOSED = os.path.join(TEST_MODULES_DIR, 'transposed_input_module.py')


def test_transposed_input_trains_and_exports_as_served(capsys):
  # 4 images per shard of 8x8: the first axis (8) is not the batch.
  code = cli.main(['preflight', '--module-file', TRANSPOSED,
                   '--custom-config', '{"train_batch_size": 32}'])
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert code == 0, lines
  assert lines[0] == f'TPU preflight of {TRANSPOSED}: TPU-ready'
  assert not [line for line in lines if line.startswith('WARNING')], lines
  assert ('INFO    [export/predict-step] the PREDICT computation of the '
          '{serve, tpu} export compiled with XLA and ran on the sample.'
         ) in lines
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines
