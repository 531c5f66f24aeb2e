"""The Evaluator's default thresholds: a model no better than always
answering the majority class is not blessed, and the run summary says why
(each thresholded metric, its value, its bound). A trained model that they
bless, and the summary's reasons for it: tests/test_package.py's run."""

import os
import re

import pytest

from tests import conftest
from tfx_tpu_trainer_cli import blessing
from tfx_tpu_trainer_cli import main as cli

# Both classes in the eval split; a majority rate (of rows without a big
# tip) of about 0.83.
ROWS = 600


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
  return conftest.write_taxi_slice(str(tmp_path_factory.mktemp('data')),
                                   rows=ROWS)


def _run(capfd, data_root, output_root, *args):
  code = cli.main(['run', '--data-root', data_root, '--output-root',
                   str(output_root), '--eval-steps', '5',
                   '--train-batch-size', '32', '--eval-batch-size', '32']
                  + list(args))
  captured = capfd.readouterr()
  assert code == 0, captured.out[-3000:] + captured.err[-3000:]
  return captured.out


def _metric(out, name):
  return float(re.search(rf'\b{name}=([0-9.]+)', out).group(1))


@pytest.mark.slow
@pytest.mark.heavy
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


def test_thresholds_are_named_as_tfma_names_their_values():
  """The names of the Evaluator metrics line: TFMA's metrics, Keras' (TFX's
  penguin example thresholds SparseCategoricalAccuracy), a config's own."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top

  def at_least(bound):
    return tfma.MetricThreshold(value_threshold=tfma.GenericValueThreshold(
        lower_bound={'value': bound}))

  config = tfma.EvalConfig(metrics_specs=[tfma.MetricsSpec(
      metrics=[
          tfma.MetricConfig(class_name='ExampleCount'),
          tfma.MetricConfig(class_name='SparseCategoricalAccuracy',
                            threshold=at_least(0.6)),
          tfma.MetricConfig(class_name='BinaryAccuracy',
                            threshold=at_least(0.5)),
          tfma.MetricConfig(class_name='SparseCategoricalAccuracy',
                            config='"name": "accuracy_named"',
                            threshold=at_least(0.7)),
      ],
      thresholds={'auc': at_least(0.8)})])
  assert blessing.value_thresholds(config) == [
      ('sparse_categorical_accuracy', 0.6, None),
      ('binary_accuracy', 0.5, None),
      ('accuracy_named', 0.7, None),
      ('auc', 0.8, None)]


def test_the_penguin_example_s_threshold_is_named_as_its_values(tmp_path):
  """The README's example: `Blessed:` names sparse_categorical_accuracy,
  the name its Evaluator metrics line shows, not the class."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.user_code import user_module  # pylint: disable=g-import-not-at-top
  penguin_pipeline = user_module.load_file(
      os.path.join(conftest.REPO_ROOT, 'examples', 'penguin_tpu',
                   'penguin_pipeline.py'), '_penguin_pipeline')
  pipeline = penguin_pipeline.create_pipeline(
      data_root=str(tmp_path), pipeline_root=str(tmp_path / 'root'))
  (evaluator,) = [c for c in pipeline.components if c.id == 'Evaluator']
  config = json_format.Parse(evaluator.exec_properties['eval_config'],
                             tfma.EvalConfig())
  assert blessing.value_thresholds(config) == [
      ('sparse_categorical_accuracy', 0.6, None)]
