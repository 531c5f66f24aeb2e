"""Image inputs laid out for the TPU, as tensorflow/tpu's models infeed them.

With `transpose_input` (their default on TPU) MnasNet's input_fn infeeds
each batch as [height, width, channels, batch] and ResNet's as that
flattened, and their model_fns undo it (ResNet computes the image size in
float64 from static shapes, which XLA folds), but not in PREDICT: the
export's serving input gives NHWC images. The preflight takes the batch
size from the labels, builds the export's PREDICT step on features shaped
as the serving input gives them, and reports no float64 that XLA folds.
"""

import os

import pytest

from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR


@pytest.mark.parametrize('name', ['transposed_input_module.py',
                                  'flattened_input_module.py'])
def test_input_laid_out_for_the_tpu_trains_and_exports_as_served(name,
                                                                 capsys):
  # 4 images per shard of 8x8: the first axis (8 or 768) is not the batch.
  path = os.path.join(TEST_MODULES_DIR, name)
  code = cli.main(['preflight', '--module-file', path,
                   '--custom-config', '{"train_batch_size": 32}'])
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert code == 0, lines
  assert lines[0] == f'TPU preflight of {path}: TPU-ready'
  assert not [line for line in lines if line.startswith('WARNING')], lines
  assert ('INFO    [export/predict-step] the PREDICT computation of the '
          '{serve, tpu} export compiled with XLA and ran on the sample.'
         ) in lines
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines
