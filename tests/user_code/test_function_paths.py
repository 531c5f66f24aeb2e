"""`TPUTrainer(run_fn=...)`/`trainer_fn=...`: the stock Trainer's import path
of the function, found as the pipeline is built, packaged with its package,
imported from the wheel; the forms that cannot work refused up front."""

import os
import shutil
import sys

import pytest
from tfx import v1 as tfx

from tests import conftest
from tests.fixtures import tfx_template
from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.user_code import function_paths

ESTIMATOR_RUN_FN = tfx_template.ESTIMATOR_RUN_FN


@pytest.fixture(scope='module')
def template(tmp_path_factory):
  """The taxi template as `tfx template copy` writes it, first on sys.path."""
  directory = str(tmp_path_factory.mktemp('template') / 'tpl')
  tfx_template.copy_template(directory)
  with user_module.first_on_path(directory):
    yield directory


@pytest.fixture(scope='module')
def examples():
  return tfx.components.CsvExampleGen(input_base='/data').outputs['examples']


@pytest.fixture
def package_dir(tmp_path):
  """`mypkg.trainer`: a stock trainer_fn module inside a package."""
  package = tmp_path / 'src' / 'mypkg'
  package.mkdir(parents=True)
  (package / '__init__.py').write_text('')
  shutil.copy(os.path.join(conftest.TEST_MODULES_DIR,
                           'stock_estimator_module.py'),
              package / 'trainer.py')
  with open(package / 'trainer.py', 'a') as f:
    f.write('\n\nmy_trainer = trainer_fn\n')
  with user_module.first_on_path(str(tmp_path / 'src')):
    yield tmp_path / 'src'


def test_the_templates_run_fn_is_found_without_importing_it(template,
                                                            examples):
  trainer = TPUTrainer(run_fn=ESTIMATOR_RUN_FN, examples=examples)
  location = trainer.function_location
  assert location.module_name == 'models.estimator_model.model'
  assert location.function == 'run_fn'
  assert location.file == os.path.join(template, 'models', 'estimator_model',
                                        'model.py')
  assert location.import_root == template
  assert not location.installed
  assert 'models.estimator_model.model' not in sys.modules
  # Errors name the file; the stock Trainer's run_fn property is kept.
  assert trainer.exec_properties[user_module.USER_MODULE_FILE_KEY] == (
      location.file)
  assert trainer.exec_properties['run_fn'] == ESTIMATOR_RUN_FN
  assert trainer.exec_properties['module_file'] is None


def test_the_package_is_packaged_and_the_executor_imports_it(
    template, examples, tmp_path):
  trainer = TPUTrainer(run_fn=ESTIMATOR_RUN_FN, examples=examples)
  # What LocalDagRunner and KubeflowDagRunner do with the pipeline root.
  trainer._resolve_pip_dependencies(str(tmp_path / 'root'))  # pylint: disable=protected-access
  module_path = trainer.exec_properties['module_path']
  name, wheel = module_path.split('@')
  assert name == 'models.estimator_model.model'
  assert wheel.startswith(str(tmp_path / 'root' / '_wheels'))
  import zipfile  # pylint: disable=g-import-not-at-top
  with zipfile.ZipFile(wheel) as archive:
    files = set(archive.namelist())
  assert {'models/features.py', 'models/preprocessing.py',
          'models/estimator_model/model.py',
          'models/estimator_model/constants.py'} <= files
  # Where the trainer runs (a pod), only the wheel holds `models`.
  sys.path.remove(template)
  try:
    module = user_module.load_user_module(dict(trainer.exec_properties))
  finally:
    sys.path.insert(0, template)
  # The template's Estimator run_fn: its builder taken as a trainer_fn.
  assert module.trainer_fn.name == '_create_train_and_eval_spec'
  assert module.module_file == os.path.join(template, 'models',
                                            'estimator_model', 'model.py')
  assert not module.trainer_fn.fn.__code__.co_filename.startswith(template)


def test_trainer_fn_path_of_a_function_named_otherwise(package_dir, examples,
                                                       tmp_path):
  trainer = TPUTrainer(trainer_fn='mypkg.trainer.my_trainer',
                       examples=examples)
  trainer._resolve_pip_dependencies(str(tmp_path / 'root'))  # pylint: disable=protected-access
  module = user_module.load_user_module(dict(trainer.exec_properties))
  assert module.trainer_fn.name == 'trainer_fn'
  assert module.trainer_fn.fn.__name__ == 'trainer_fn'
  assert module.module_file == str(package_dir / 'mypkg' / 'trainer.py')


def test_an_installed_module_is_imported_by_name_not_packaged(examples):
  path = 'tfx.experimental.templates.taxi.models.estimator_model.model.run_fn'
  trainer = TPUTrainer(run_fn=path, examples=examples)
  assert trainer.function_location.installed
  assert not any(isinstance(d, function_paths.WheelDependency)
                 for d in trainer._pip_dependencies)  # pylint: disable=protected-access
  module = user_module.load_user_module(dict(trainer.exec_properties))
  assert module.trainer_fn.name == '_create_train_and_eval_spec'


@pytest.mark.parametrize('argument,path,message', [
    ('run_fn', 'run_fn',
     "TPUTrainer(run_fn='run_fn'): run_fn is the import path of the "
     'function, `package.module.function` (e.g. '
     "run_fn='models.keras_model.model.run_fn', as the TFX templates name "
     "it), or pass the module file instead: "
     "module_file='models/keras_model/model.py'."),
    ('run_fn', 'models.estimator_model.model.train',
     "TPUTrainer(run_fn='models.estimator_model.model.train'): "
     '{template}/models/estimator_model/model.py defines no \'train\' (its '
     "functions: ['_build_estimator', "),
    ('trainer_fn', 'models.estimator_model.nothing.trainer_fn',
     "TPUTrainer(trainer_fn='models.estimator_model.nothing.trainer_fn'): the "
     "module 'models.estimator_model.nothing' is not found: no 'nothing' in "
     "the package 'models.estimator_model' (searched "
     "['{template}/models/estimator_model']). Build the pipeline where "
     "'models' is importable (run from the folder that holds it, or put that "
     "folder on PYTHONPATH), or pass the file: "
     "module_file='models/estimator_model/nothing.py'."),
    ('run_fn', 'nowhere_pkg.model.run_fn',
     "TPUTrainer(run_fn='nowhere_pkg.model.run_fn'): the module "
     "'nowhere_pkg.model' is not found: no 'nowhere_pkg' on sys.path"),
])
def test_paths_that_cannot_work_are_refused_when_the_pipeline_is_built(
    template, examples, argument, path, message):
  with pytest.raises(function_paths.FunctionPathError) as error:
    TPUTrainer(examples=examples, **{argument: path})
  assert str(error.value).startswith(message.format(template=template))


def test_not_found_is_kept_when_the_image_holds_the_user_code(
    examples, monkeypatch):
  # compile --module-files-in-image: TFX packages nothing; the path is the
  # image's, imported by name where the trainer runs, as the stock Trainer.
  monkeypatch.setenv('UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES', '1')
  trainer = TPUTrainer(run_fn='in_image.model.run_fn', examples=examples)
  assert trainer.function_location is None
  assert trainer.exec_properties['run_fn'] == 'in_image.model.run_fn'


def test_a_package_module_file_is_named_by_its_package(template):
  assert function_paths.package_module_name(
      os.path.join(template, 'models', 'keras_model', 'model.py')) == (
          'models.keras_model.model', template)
  assert function_paths.package_module_name(
      os.path.join(conftest.TEST_MODULES_DIR, 'linear_module.py')) is None
