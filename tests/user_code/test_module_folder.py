"""A module_file's wheel holds the package folders beside it.

tensorflow/tpu's MnasNet imports `from configs import mnasnet_config` and
`from mixnet import mixnet_builder`, folders beside mnasnet_main.py. TFX
packages the .py files of the module's folder only, so the trainer, which
imports the module from that wheel, failed with `No module named
'configs'` where the preflight (which loads the file by path) passed. The
runners resolve the wheel as they resolve TFX's: locally, and in Kubeflow
compiles (KFP v1 and v2).
"""

import glob
import os
import shutil
import sys
import zipfile

import pytest
from tfx import v1 as tfx

from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.user_code import module_folder
from tfx_tpu_trainer_cli import main as cli

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'fixtures')

MODULE = '''
from configs import model_config
from mixnet import mixnet_builder
import helpers

def model_fn(features, labels, mode, params):
  return mixnet_builder.build(model_config.CFG, helpers.HELP)
'''


@pytest.fixture
def module_dir(tmp_path):
  """my_main.py, a sibling module and package folders, as MnasNet has."""
  folder = tmp_path / 'mnasnet'
  for path, text in {
      'my_main.py': MODULE,
      'helpers.py': 'HELP = 1\n',
      'my_main.orig.py': 'a copy, no module\n',
      'configs/__init__.py': '',
      'configs/model_config.py': 'CFG = {"depth": 2}\n',
      'configs/cloud/v3-8.yaml': 'train_batch_size: 1024\n',
      # A namespace package (no __init__.py), two levels deep.
      'mixnet/mixnet_builder.py': (
          'from mixnet.layers import custom_layers\n'
          'def build(config, help_):\n'
          '  return custom_layers.LAYERS, config, help_\n'),
      'mixnet/layers/custom_layers.py': 'LAYERS = ["conv"]\n',
      'g3doc/figure.png': 'not python',
      'venv/pyvenv.cfg': 'home = /usr/bin\n',
      'venv/lib/thing.py': '',
      'not-a-package/x.py': '',
  }.items():
    (folder / path).parent.mkdir(parents=True, exist_ok=True)
    (folder / path).write_text(text)
  return folder


def _packaged_trainer(module_file, root):
  examples = tfx.components.CsvExampleGen(input_base='/data').outputs[
      'examples']
  trainer = TPUTrainer(module_file=str(module_file), examples=examples)
  # What LocalDagRunner and KubeflowDagRunner do with the pipeline root.
  trainer._resolve_pip_dependencies(str(root))  # pylint: disable=protected-access
  return trainer


def test_package_folders_are_the_importable_ones(module_dir):
  assert module_folder.package_folders(str(module_dir)) == ['configs',
                                                            'mixnet']


def test_the_trainer_imports_the_package_folders_from_the_wheel(
    module_dir, tmp_path):
  trainer = _packaged_trainer(module_dir / 'my_main.py', tmp_path / 'root')
  properties = trainer.exec_properties
  name, wheel = properties['module_path'].split('@')
  assert name == 'my_main'
  assert properties['module_file'] is None
  assert os.path.dirname(wheel) == str(tmp_path / 'root' / '_wheels')
  assert os.path.basename(wheel).lower().startswith(
      'tfx_user_code_tputrainer-0.0+')
  with zipfile.ZipFile(wheel) as archive:
    sources = {n for n in archive.namelist() if n.endswith('.py')}
  assert sources == {'my_main.py', 'helpers.py', 'configs/__init__.py',
                     'configs/model_config.py', 'mixnet/mixnet_builder.py',
                     'mixnet/layers/custom_layers.py'}
  # Where the trainer runs, only the wheel holds the module's folder.
  assert str(module_dir) not in sys.path
  for name in ('my_main', 'helpers', 'configs', 'configs.model_config',
               'mixnet', 'mixnet.mixnet_builder', 'mixnet.layers',
               'mixnet.layers.custom_layers'):
    sys.modules.pop(name, None)
  module = user_module.load_user_module(dict(properties))
  assert module.model_fn.fn(None, None, None, None) == (
      ['conv'], {'depth': 2}, 1)


def test_a_folder_without_packages_is_packaged_as_tfx_packages_it(tmp_path):
  (tmp_path / 'alone').mkdir()
  (tmp_path / 'alone' / 'trainer.py').write_text(
      'def model_fn(features, labels, mode, params):\n  pass\n')
  trainer = _packaged_trainer(tmp_path / 'alone' / 'trainer.py',
                              tmp_path / 'root')
  _, wheel = trainer.exec_properties['module_path'].split('@')
  with zipfile.ZipFile(wheel) as archive:
    assert {n for n in archive.namelist() if n.endswith('.py')} == {
        'trainer.py'}


def test_a_module_file_kept_as_given_is_not_packaged(module_dir, tmp_path,
                                                     monkeypatch):
  monkeypatch.setenv('UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES', '1')
  trainer = _packaged_trainer(module_dir / 'my_main.py', tmp_path / 'root')
  assert trainer.exec_properties['module_file'] == str(module_dir /
                                                       'my_main.py')
  assert not (tmp_path / 'root' / '_wheels').exists()


@pytest.mark.parametrize('runner_args', [
    [], ['--runner', 'kubeflow_v2', '--no-vertex-job']])
def test_kubeflow_compiles_package_the_folders_for_the_trainer(
    tmp_path, monkeypatch, capsys, runner_args):
  # tests/fixtures/resnet_style imports `from configs import ...`.
  shutil.copytree(os.path.join(FIXTURES, 'resnet_style'), tmp_path / 'model')
  shutil.copy(os.path.join(FIXTURES, 'image_pipeline.py'), tmp_path)
  for name, value in {
      'IMAGE_DATA_ROOT': '/data', 'IMAGE_PIPELINE_ROOT': str(tmp_path / 'root'),
      'IMAGE_MODULE_FILE': str(tmp_path / 'model' / 'resnet_style_module.py'),
  }.items():
    monkeypatch.setenv(name, value)
  assert cli.main(['compile', '--pipeline',
                   f'{tmp_path / "image_pipeline.py"}:create_pipeline',
                   '--output-dir', str(tmp_path / 'out'),
                   '--image', 'gcr.io/p/tfx-tpu-trainer:1'] + runner_args) == 0
  stdout = capsys.readouterr().out
  (wheel,) = glob.glob(str(tmp_path / 'root' / '_wheels' / '*.whl'))
  with zipfile.ZipFile(wheel) as archive:
    assert {'resnet_style_module.py', 'configs/__init__.py',
            'configs/resnet_style_config.py'} <= set(archive.namelist())
  assert f'TPUTrainer: resnet_style_module@{wheel}' in stdout
