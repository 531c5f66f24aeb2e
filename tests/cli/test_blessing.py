"""The Evaluator's default thresholds: a model no better than always
answering the majority class is not blessed, and the run summary says why
(each thresholded metric, its value, its bound). A trained model that they
bless, and the summary's reasons for it: tests/test_package.py's run."""

import os
import re

import pytest

from tests import conftest
from tfx_tpu_trainer_cli import main as cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

ROWS = 2000


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
  return conftest.write_taxi_slice(str(tmp_path_factory.mktemp('data')),
                                   rows=ROWS)


def _run(capfd, data_root, output_root, *args):
  code = cli.main(['run', '--data-root', data_root, '--output-root',
                   str(output_root), '--eval-steps', '10',
                   '--train-batch-size', '32', '--eval-batch-size', '32']
                  + list(args))
  captured = capfd.readouterr()
  assert code == 0, captured.out[-3000:] + captured.err[-3000:]
  return captured.out


def _metric(out, name):
  return float(re.search(rf'\b{name}=([0-9.]+)', out).group(1))


def test_a_constant_classifier_is_not_blessed_and_the_summary_says_why(
    tmp_path, capfd, data_root):
  out = _run(capfd, data_root, tmp_path / 'out', '--train-steps', '10',
             '--module-file',
             os.path.join(conftest.TEST_MODULES_DIR, 'constant_module.py'))
  # Its accuracy is the majority rate, above the 0.5 that used to bless it.
  assert _metric(out, 'binary_accuracy') > 0.7
  assert _metric(out, 'balanced_accuracy') == 0.5
  assert ('Blessed:                no (balanced_accuracy 0.5 (needs >= 0.55))'
          in out), out
  assert 'Pushed model:           none (the model was not blessed)' in out
  assert not os.path.exists(tmp_path / 'out' / 'serving_model' / 'taxi_tpu')
