"""`compile --module-file/--preprocessing-module-file`: the taxi pipeline
with other module files, named by their path inside the image."""

import json
import os
import tarfile

import yaml

from tests.fixtures import cli_exit
from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli
from tfx_tpu_trainer_cli import paths
from tfx_tpu_trainer_cli import run as run_command


def _steps(path):
  with tarfile.open(path) as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  return {t['name']: t for t in workflow['spec']['templates']
          if 'container' in t}


def _parameters(step):
  args = step['container']['args']
  ir = json.loads(args[args.index('--tfx_ir') + 1])
  return ir['nodes'][0]['pipelineNode']['parameters']['parameters']


def test_module_files_inside_the_image(tmp_path):
  assert cli.main([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path), '--module-file',
      '/opt/mine/my_trainer.py', '--preprocessing-module-file',
      '/opt/mine/my_preprocessing.py', '--eval-label-key', 'label_xf',
      '--eval-prediction-key', 'scores']) == 0
  steps = _steps(tmp_path / 'taxi_tpu.tar.gz')
  # Both keys given: taken as they are (the files are only in the image).
  assert _eval_config(steps)['model_specs'] == [{
      'label_key': 'label_xf', 'prediction_key': 'scores',
      'preprocessing_function_names': ['transform_features'],
      'signature_name': 'serving_default'}]
  assert _parameters(steps['tputrainer'])['module_file']['fieldValue'][
      'stringValue'] == '/opt/mine/my_trainer.py'
  assert _parameters(steps['transform'])['preprocessing_fn']['fieldValue'][
      'stringValue'] == 'my_preprocessing.preprocessing_fn'
  for name, step in steps.items():
    # Beam's worker processes import my_preprocessing by name from here.
    assert {'name': 'PYTHONPATH',
            'value': '/tfx-tpu-trainer/components:/opt/mine'} in (
                step['container']['env']), name


def _eval_config(steps):
  return json.loads(_parameters(steps['evaluator'])['eval_config'][
      'fieldValue']['stringValue'])


def test_the_evaluator_follows_the_module_as_in_run(tmp_path):
  taxi_utils = serving_data.stock_taxi_utils_module()
  data_root = paths.embedded_data_root()
  assert cli.main([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', data_root,
      '--output-dir', str(tmp_path), '--module-file', taxi_utils,
      '--preprocessing-module-file', taxi_utils]) == 0
  [spec] = _eval_config(_steps(tmp_path / 'taxi_tpu.tar.gz'))['model_specs']
  # What `run` finds for the same modules (one function for both commands).
  parser = cli.build_parser()
  run_args = parser.parse_args(['run', '--module-file', taxi_utils,
                                '--preprocessing-module-file', taxi_utils])
  expected = run_command._validate_run_args(run_args)  # pylint: disable=protected-access
  assert spec['label_key'] == expected['eval_label_key'] == 'tips_xf'
  assert 'prediction_key' not in spec  # TFMA's own search, as in run.
  assert expected['eval_prediction_key'] is None
  assert spec['preprocessing_function_names'] == list(
      expected['eval_preprocessing_function_names']) == ['transform_features']


def test_module_files_not_here_need_both_evaluator_keys(tmp_path, capsys):
  assert cli_exit.exit_code([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path / 'out'), '--module-file',
      '/opt/mine/my_trainer.py', '--eval-label-key', 'label_xf']) == 2
  err = capsys.readouterr().err
  assert ("--module-file '/opt/mine/my_trainer.py' is not a file on this "
          "machine, so the Evaluator's label and prediction cannot be read "
          'from it as `run` reads them') in err
  assert '--eval-prediction-key' in err
  assert not (tmp_path / 'out').exists()


def test_preprocessing_module_file_must_be_importable_by_name(tmp_path,
                                                               capsys):
  assert cli_exit.exit_code([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path / 'out'), '--preprocessing-module-file',
      '/opt/mine/my-preprocessing.py']) == 2
  assert ("--preprocessing-module-file '/opt/mine/my-preprocessing.py' must "
          'be an absolute path of a .py file inside the image whose name is a '
          'Python module name' in capsys.readouterr().err)
  assert not (tmp_path / 'out').exists()


def test_module_file_must_be_a_path_in_the_image(tmp_path, capsys):
  assert cli_exit.exit_code([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path / 'out'), '--module-file',
      'relative/m.py']) == 2
  assert ("--module-file 'relative/m.py' must be a URI (e.g. "
          'gs://bucket/path) or an absolute path as the cluster sees it.' in
          capsys.readouterr().err)
