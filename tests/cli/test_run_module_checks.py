"""`tfx-tpu-trainer run` checks the preprocessing module and the label up
front: errors name the file and the flag, and nothing is written."""

import os

import pytest

from tests.conftest import TEST_MODULES_DIR

from tfx_tpu_trainer_cli import main as cli
from tfx_tpu_trainer_cli import paths
from tfx_tpu_trainer_cli import run as run_command


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _fails(tmp_path, capsys, argv):
  """Runs `run` with argv; returns stderr after checking nothing was written."""
  output_root = tmp_path / 'out'
  try:
    code = cli.main(['run', '--output-root', str(output_root)] + argv)
  except SystemExit as e:
    code = e.code
  assert code == 2
  assert not output_root.exists()
  return capsys.readouterr().err


def _validated(tmp_path, argv):
  """The options `run` would start the pipeline with (no component runs)."""
  args = cli.build_parser().parse_args(
      ['run', '--output-root', str(tmp_path / 'out')] + argv)
  return run_command._validate_run_args(args)  # pylint: disable=protected-access


def test_preprocessing_module_without_preprocessing_fn(tmp_path, capsys):
  path = _path('features_only_preprocessing.py')
  err = _fails(tmp_path, capsys, ['--preprocessing-module-file', path])
  assert (f'tfx-tpu-trainer run: error: --preprocessing-module-file: module '
          f'{path} defines no preprocessing_fn(inputs), the function TFX '
          'Transform calls with the raw features. Define '
          'preprocessing_fn(inputs) returning the dict of transformed features '
          'in it, or pass the module that defines it with '
          '--preprocessing-module-file.' in err)


def test_preprocessing_fn_with_an_argument_transform_does_not_pass(
    tmp_path, capsys):
  path = _path('two_arg_preprocessing.py')
  err = _fails(tmp_path, capsys, ['--preprocessing-module-file', path])
  assert (f'--preprocessing-module-file: preprocessing_fn in {path} must be a '
          'function preprocessing_fn(inputs) (or preprocessing_fn(inputs, '
          "custom_config)), as TFX Transform calls it: missing a required "
          "argument: 'schema'." in err)


def test_preprocessing_module_that_fails_to_import(tmp_path, capsys):
  path = _path('fails_to_import.py')
  err = _fails(tmp_path, capsys, ['--preprocessing-module-file', path])
  assert (f"--preprocessing-module-file: module_file {path!r} failed to "
          'import' in err)


def test_preprocessing_is_checked_before_the_trainer_module(tmp_path, capsys):
  err = _fails(tmp_path, capsys, [
      '--preprocessing-module-file', _path('features_only_preprocessing.py'),
      '--module-file', _path('no_model_fn.py')])
  assert '--preprocessing-module-file: module' in err
  assert '--module-file' not in err


def test_module_without_label_is_told_the_flag_and_the_label(tmp_path, capsys):
  path = _path('unlabeled_keras_module.py')
  err = _fails(tmp_path, capsys, ['--module-file', path])
  assert (f'tfx-tpu-trainer run: error: --module-file: module {path} names no '
          'label (no LABEL_KEY, no input_fn), and TPUTrainer reads the label '
          'from the examples by name. Pass --label-key big_tipper (the label '
          'feature the preprocessing_fn of '
          f"{paths.PREPROCESSING_MODULE_FILE} outputs: 'big_tipper' "
          '(outputs[features.LABEL_KEY])), or set LABEL_KEY in the module.'
          in err)


def test_label_key_flag_sets_the_trainer_label(tmp_path):
  options = _validated(tmp_path, [
      '--module-file', _path('unlabeled_keras_module.py'),
      '--label-key', 'big_tipper'])
  assert options['custom_config']['label_key'] == 'big_tipper'
  assert not (tmp_path / 'out').exists()


def test_label_key_flag_that_transform_does_not_write(tmp_path, capsys):
  err = _fails(tmp_path, capsys, [
      '--module-file', _path('unlabeled_keras_module.py'),
      '--label-key', 'tips_xf'])
  assert ("--label-key: the label 'tips_xf' (--label-key) is not among the "
          'features Transform will write: the label feature the '
          f'preprocessing_fn of {paths.PREPROCESSING_MODULE_FILE} outputs: '
          "'big_tipper' (outputs[features.LABEL_KEY]). Pass --label-key "
          "big_tipper, or output the label under 'tips_xf' in "
          'preprocessing_fn.' in err)


def test_module_label_that_the_preprocessing_renames(tmp_path, capsys):
  module = _path('dense_features_keras_module.py')
  preprocessing = _path('tips_label_preprocessing.py')
  err = _fails(tmp_path, capsys, ['--module-file', module,
                                  '--preprocessing-module-file', preprocessing])
  assert (f"--module-file: the label 'big_tipper' (LABEL_KEY in {module}) is "
          'not among the features Transform will write: the label feature the '
          f"preprocessing_fn of {preprocessing} outputs: 'tips' "
          "(outputs[_LABEL_KEY]). Pass --label-key tips" in err)


def test_stock_module_label_candidates_are_checked(tmp_path, capsys):
  module = _path('estimator_run_fn_module.py')
  preprocessing = _path('tips_label_preprocessing.py')
  err = _fails(tmp_path, capsys, ['--module-file', module,
                                  '--preprocessing-module-file', preprocessing])
  assert (f"--module-file: the label 'big_tipper' (named by "
          f'{module}) is not among the features Transform will write' in err)


def test_bundled_modules_pass_the_checks(tmp_path):
  options = _validated(tmp_path, [])
  assert 'label_key' not in options['custom_config']
  assert options['preprocessing_module_file'] == paths.PREPROCESSING_MODULE_FILE


@pytest.mark.parametrize('label_key', ['', '  '])
def test_empty_label_key_flag(tmp_path, capsys, label_key):
  err = _fails(tmp_path, capsys, ['--label-key', label_key])
  assert (f'tfx-tpu-trainer run: error: --label-key must name the label '
          f'feature, got {label_key!r}.' in err)
