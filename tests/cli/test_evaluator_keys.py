"""`run --module-file`: the Evaluator follows the trainer module.

The label and prediction keys are found before any component runs (the
preprocessing_fn and the module's PREDICT graph traced, nothing trained); a
module whose serving outputs TFMA cannot read is one error naming them. TFX's
own taxi_utils.py (a canned Estimator through trainer_fn, label tips_xf) runs
to the Evaluator's blessing decision in tests/test_portable_run.py.
"""

import os

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import cli_exit
from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli
from tfx_tpu_trainer_cli import run as run_command

PROB_MODULE = os.path.join(TEST_MODULES_DIR, 'prob_key_module.py')
TAXI_UTILS = serving_data.stock_taxi_utils_module()


def _validated(argv):
  parser = cli.build_parser()
  args = parser.parse_args(['run'] + argv)
  return run_command._validate_run_args(args)  # pylint: disable=protected-access


def test_prediction_key_tfma_cannot_read_fails_before_any_component(
    tmp_path, capsys):
  output_root = tmp_path / 'out'
  assert cli_exit.exit_code(['run', '--module-file', PROB_MODULE, '--output-root',
                     str(output_root)]) == 2
  err = capsys.readouterr().err
  assert (f'tfx-tpu-trainer run: error: The serving_default signature of '
          f"{PROB_MODULE} has the outputs ['class_id', 'prob'], none of which "
          'the Evaluator (TFMA) reads by itself (scores, outputs, predictions, '
          'logistic, probabilities, logits), so the run would fail at the '
          'Evaluator after training. Name the model\'s prediction with '
          '--eval-prediction-key') in err, err
  assert not output_root.exists()


def test_eval_prediction_key_names_the_output():
  options = _validated(['--module-file', PROB_MODULE,
                        '--eval-prediction-key', 'prob'])
  assert options['eval_prediction_key'] == 'prob'
  assert options['eval_label_key'] == 'big_tipper'
  assert options['eval_preprocessing_function_names'] == (
      'transform_features',)


def test_eval_prediction_key_that_is_not_an_output(capsys):
  assert cli_exit.exit_code(['run', '--module-file', PROB_MODULE,
                     '--eval-prediction-key', 'probs']) == 2
  assert ("--eval-prediction-key 'probs' is not an output of the "
          f"serving_default signature of {PROB_MODULE} (outputs: "
          "['class_id', 'prob'])." in capsys.readouterr().err)


def test_eval_label_key_not_made_by_the_transform(capsys):
  assert cli_exit.exit_code(['run', '--eval-label-key', 'tips']) == 2
  assert ("The Evaluator's label 'tips' is not an output of the "
          'preprocessing_fn of ' in capsys.readouterr().err)


def test_stock_taxi_utils_label_is_its_transformed_label():
  options = _validated(['--module-file', TAXI_UTILS,
                        '--preprocessing-module-file', TAXI_UTILS])
  assert options['eval_label_key'] == 'tips_xf'
  assert options['eval_prediction_key'] is None  # TFMA's own search.
  assert options['eval_preprocessing_function_names'] == (
      'transform_features',)


def test_keras_module_reads_its_output_layer():
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  options = _validated(['--module-file', os.path.join(
      paths.COMPONENTS_DIR, 'taxi_keras_module.py')])
  assert options['eval_prediction_key'] == 'probabilities'
  assert options['eval_label_key'] == 'big_tipper'


def test_bundled_module_keeps_the_pipeline_keys():
  options = _validated([])
  assert 'eval_label_key' not in options  # taxi_pipeline's defaults.


def _tfx_testdata_transform_module():
  """TFX's own Transform test module: preprocessing_fn(inputs, custom_config)."""
  import tfx as tfx_package  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(tfx_package.__file__), 'components',
                      'testdata', 'module_file', 'transform_module.py')


def test_a_preprocessing_fn_taking_custom_config_is_traced_as_transform_calls_it():
  options = _validated(['--module-file', TAXI_UTILS,
                        '--preprocessing-module-file',
                        _tfx_testdata_transform_module()])
  assert options['eval_label_key'] == 'tips_xf'
  assert options['eval_preprocessing_function_names'] == (
      'transform_features',)


def test_both_evaluator_keys_given_trace_nothing(tmp_path):
  broken = tmp_path / 'broken_preprocessing.py'
  broken.write_text('def preprocessing_fn(inputs):\n'
                    '  raise RuntimeError("traced")\n')
  options = _validated(['--module-file', TAXI_UTILS,
                        '--preprocessing-module-file', str(broken),
                        '--eval-label-key', 'tips_xf',
                        '--eval-prediction-key', 'probabilities'])
  assert (options['eval_label_key'], options['eval_prediction_key']) == (
      'tips_xf', 'probabilities')
