"""Loading user modules and the contract's errors."""

import os

import pytest

from tfx_tpu_trainer.user_code import user_module

from tests.conftest import TEST_MODULES_DIR


def _load(name):
  return user_module.load_user_module(
      {'module_file': os.path.join(TEST_MODULES_DIR, name)})


def test_loads_taxi_module_with_label_key():
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  module = user_module.load_user_module(
      {'module_file': paths.TRAINER_MODULE_FILE})
  assert callable(module.model_fn)
  assert module.label_key == 'big_tipper'
  assert module.input_fn is None and module.build_keras_model is None


@pytest.mark.parametrize('module_name,message', [
    ('no_model_fn.py', 'defines neither model_fn(features, labels, mode, params) nor build_keras_model'),
    ('wrong_signature.py', "missing argument(s) ['mode', 'params']"),
    ('fails_to_import.py', "failed to import: ModuleNotFoundError: No module named 'tensorflow_does_not_have_this_module'"),
])
def test_broken_modules(module_name, message):
  with pytest.raises(user_module.UserModuleError) as error:
    _load(module_name)
  assert message in str(error.value)
  assert module_name in str(error.value)


def test_missing_module_file():
  with pytest.raises(user_module.UserModuleError,
                     match=r"module_file '/no/such/module.py' does not exist"):
    user_module.load_user_module({'module_file': '/no/such/module.py'})


def test_no_module_at_all():
  with pytest.raises(user_module.UserModuleError, match='needs a module_file'):
    user_module.load_user_module({})


def test_signature_with_extra_required_argument(tmp_path):
  path = tmp_path / 'extra_arg.py'
  path.write_text('def model_fn(features, labels, mode, params, scale):\n'
                  '  pass\n')
  with pytest.raises(user_module.UserModuleError,
                     match=r"unexpected required argument\(s\) \['scale'\]"):
    user_module.load_user_module({'module_file': str(path)})


def test_model_fn_may_take_config_and_defaults(tmp_path):
  path = tmp_path / 'with_config.py'
  path.write_text('def model_fn(features, labels, mode, params, config,\n'
                  '             scale=2):\n  pass\n')
  module = user_module.load_user_module({'module_file': str(path)})
  assert module.model_fn is not None
