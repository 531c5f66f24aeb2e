"""`compile --module-file/--preprocessing-module-file`: the taxi pipeline
with other module files, named by their path inside the image."""

import json
import tarfile

import yaml

from tfx_tpu_trainer_cli import main as cli


def _exit_code(argv):
  try:
    return cli.main(argv)
  except SystemExit as e:
    return e.code


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
      '/opt/mine/my_preprocessing.py']) == 0
  steps = _steps(tmp_path / 'taxi_tpu.tar.gz')
  assert _parameters(steps['tputrainer'])['module_file']['fieldValue'][
      'stringValue'] == '/opt/mine/my_trainer.py'
  assert _parameters(steps['transform'])['preprocessing_fn']['fieldValue'][
      'stringValue'] == 'my_preprocessing.preprocessing_fn'
  for name, step in steps.items():
    # Beam's worker processes import my_preprocessing by name from here.
    assert {'name': 'PYTHONPATH',
            'value': '/tfx-tpu-trainer/components:/opt/mine'} in (
                step['container']['env']), name


def test_preprocessing_module_file_must_be_importable_by_name(tmp_path,
                                                               capsys):
  assert _exit_code([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path / 'out'), '--preprocessing-module-file',
      '/opt/mine/my-preprocessing.py']) == 2
  assert ("--preprocessing-module-file '/opt/mine/my-preprocessing.py' must "
          'be an absolute path of a .py file inside the image whose name is a '
          'Python module name' in capsys.readouterr().err)
  assert not (tmp_path / 'out').exists()


def test_module_file_must_be_a_path_in_the_image(tmp_path, capsys):
  assert _exit_code([
      'compile', '--pipeline-root', 'gs://b/root', '--data-root', 'gs://b/d',
      '--output-dir', str(tmp_path / 'out'), '--module-file',
      'relative/m.py']) == 2
  assert ("--module-file 'relative/m.py' must be a URI (e.g. "
          'gs://bucket/path) or an absolute path as the cluster sees it.' in
          capsys.readouterr().err)
