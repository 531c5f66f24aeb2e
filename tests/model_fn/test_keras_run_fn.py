"""Native-Keras run_fn modules: their model taken at model.fit, or advice.

TFX's own modules (penguin_utils_keras.py, mnist_utils_native_keras.py) are
copied out of the installed wheel unchanged; their labels and builders live
in the base modules they import.
"""

import os
import shutil

import pytest
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tfx.components.trainer import fn_args_utils
import tfx as tfx_package

from tfx_tpu_trainer.user_code import stock_contract
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.model_fn import keras_run_fn

from tests.conftest import TEST_MODULES_DIR

EXAMPLES_DIR = os.path.join(os.path.dirname(tfx_package.__file__), 'examples')


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _load(path):
  return user_module.load_user_module({'module_file': path})


def _copied(tmp_path, example, *names):
  """The wheel's modules copied unchanged into tmp_path; the first one."""
  for name in names:
    shutil.copy(os.path.join(EXAMPLES_DIR, example, name), tmp_path)
  return str(tmp_path / names[0])


def _fn_args(tmp_path):
  """FnArgs outside a pipeline run: no files, output dirs never written."""
  return fn_args_utils.FnArgs(
      train_files=[], eval_files=[], train_steps=3, eval_steps=1,
      serving_model_dir=str(tmp_path / 'serving'),
      model_run_dir=str(tmp_path / 'model_run'))


def test_penguin_utils_keras_is_taken_with_the_label_of_its_base(tmp_path):
  path = _copied(tmp_path, 'penguin', 'penguin_utils_keras.py',
                 'penguin_utils_base.py')
  module = _load(path)
  assert module.run_fn.where == f'run_fn in {path}'
  assert module.trainer_fn is None and module.build_keras_model is None
  # penguin_utils_base's input_fn reads label_key=transformed_name(...).
  assert module.label_key_candidates == ('species_xf', 'species')


def test_mnist_native_keras_label_and_builder_are_followed_into_its_base(
    tmp_path):
  path = _copied(tmp_path, 'mnist', 'mnist_utils_native_keras.py',
                 'mnist_utils_native_keras_base.py')
  module = _load(path)
  assert module.run_fn is not None
  assert module.label_key_candidates == ('image_class_xf', 'image_class')
  imported = user_module.import_module_file(path)
  assert [m.__name__ for m in stock_contract.followed_modules(imported)] == [
      'mnist_utils_native_keras',
      'tfx.examples.mnist.mnist_utils_native_keras_base']
  assert stock_contract.keras_model_builders(imported) == [
      'base.build_keras_model']


def test_imports_outside_the_module_folder_are_not_followed(tmp_path):
  # Alone in its folder, without a copy of penguin_utils_base beside it.
  path = _copied(tmp_path, 'penguin', 'penguin_utils_keras.py')
  imported = user_module.import_module_file(path)
  assert stock_contract.followed_modules(imported) == [imported]
  assert stock_contract.label_key_candidates(imported) == ()


def test_penguin_builder_call_is_spelled_out(tmp_path):
  path = _copied(tmp_path, 'penguin', 'penguin_utils_keras.py',
                 'penguin_utils_base.py')
  imported = user_module.import_module_file(path)
  builders = stock_contract.keras_model_builders(imported)
  assert builders == ['_make_keras_model']
  assert stock_contract.fit_calls(imported, imported.run_fn) == 1
  assert stock_contract.builder_calls(imported.run_fn, builders) == [
      '_make_keras_model(_get_hyperparameters())']


def test_model_label_and_served_output_are_taken_at_fit_and_save(tmp_path):
  module = _load(_path('keras_run_fn_module.py'))
  call = keras_run_fn.take_fit_call(module.run_fn, _fn_args(tmp_path))
  assert isinstance(call.model, tf.keras.Model)
  assert call.model.input_names == ['x_xf', 'y_xf']
  assert call.label_keys == ('label_xf',)
  assert call.served_outputs == ('scores',)
  # What run_fn set on the model after fit is gone; nothing was written.
  assert not hasattr(call.model, 'serving_layer')
  assert not os.listdir(tmp_path)


def test_taken_model_trains_and_serves_under_the_module_output_name(
    tmp_path):
  module = _load(_path('keras_run_fn_module.py'))
  taken = keras_run_fn.run_fn_model(module.run_fn, _fn_args(tmp_path))
  assert taken.label_key == 'label_xf'
  assert taken.source == (
      f'the Functional that run_fn in {_path("keras_run_fn_module.py")} fits')
  params = {'batch_size': 4, 'use_tpu': False}

  def features():
    return {'x_xf': tf.zeros([4]), 'y_xf': tf.ones([4])}

  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    train = taken.model_fn(features(), tf.zeros([4], tf.int64),
                           tf_estimator.ModeKeys.TRAIN, params)
  assert train.train_op is not None
  with tf.Graph().as_default():
    predict = taken.model_fn(features(), None,
                             tf_estimator.ModeKeys.PREDICT, params)
  assert list(predict.predictions) == ['scores']
  assert list(predict.export_outputs['serving_default'].outputs) == ['scores']


def test_given_label_key_wins_over_the_one_the_input_reads(tmp_path):
  module = _load(_path('keras_run_fn_module.py'))
  taken = keras_run_fn.run_fn_model(module.run_fn, _fn_args(tmp_path),
                                    label_key='other_xf')
  assert taken.label_key == 'other_xf'


def test_custom_training_loop_is_told_how_to_call_its_builder():
  path = _path('keras_run_fn_loop_module.py')
  with pytest.raises(user_module.UserModuleError) as error:
    _load(path)
  message = str(error.value)
  assert message.startswith(
      f'Module {path} defines run_fn(fn_args), the stock TFX Trainer\'s '
      'contract for Keras. TPUTrainer takes the model of such a run_fn at '
      'its one model.fit call and trains it itself, but here run_fn calls '
      'no model.fit (it trains in a loop of its own, or not at all), so '
      'TPUTrainer cannot run it on TPU.')
  assert ('`def build_keras_model(params): return '
          '_build_keras_model(_get_feature_names())` (as run_fn calls it; '
          'take the arguments from params if they are tuned)' in message)
  assert "LABEL_KEY = 'label' is a guess" in message


def test_two_fit_calls_are_told_how_to_call_the_builder():
  path = _path('keras_run_fn_two_fits_module.py')
  with pytest.raises(user_module.UserModuleError) as error:
    _load(path)
  message = str(error.value)
  assert 'but here run_fn calls model.fit 2 times, not once' in message
  assert '`def build_keras_model(params): return _build_keras_model()`' in (
      message)


def test_run_fn_that_raises_before_fit_is_named(tmp_path):
  module = _load(_path('keras_run_fn_module.py'))
  broken = user_module.ModuleFunction(
      name='run_fn', module_file=module.module_file,
      fn=lambda fn_args: fn_args.no_such_attribute)
  with pytest.raises(user_module.UserModuleError) as error:
    keras_run_fn.take_fit_call(broken, _fn_args(tmp_path))
  assert str(error.value).startswith(
      f'run_fn in {module.module_file} raised AttributeError before its '
      'model.fit: ')


def test_run_fn_that_never_fits_at_run_time_is_refused(tmp_path):
  module = _load(_path('keras_run_fn_module.py'))
  idle = user_module.ModuleFunction(name='run_fn',
                                    module_file=module.module_file,
                                    fn=lambda fn_args: None)
  with pytest.raises(keras_run_fn.KerasRunFnError) as error:
    keras_run_fn.take_fit_call(idle, _fn_args(tmp_path))
  assert str(error.value) == (
      f'run_fn in {module.module_file} returned without calling model.fit, '
      'so TPUTrainer found no model to train. Define '
      'build_keras_model(params) returning the compiled model instead.')


def test_fit_and_save_are_the_originals_outside_the_call(tmp_path):
  fit, save = tf.keras.Model.fit, tf.keras.Model.save
  module = _load(_path('keras_run_fn_module.py'))
  keras_run_fn.take_fit_call(module.run_fn, _fn_args(tmp_path))
  assert tf.keras.Model.fit is fit and tf.keras.Model.save is save


def test_taken_model_passes_the_tpu_preflight(tmp_path):
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.preflight import checks as preflight  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.preflight import sample as preflight_sample  # pylint: disable=g-import-not-at-top
  module = _load(_path('keras_run_fn_module.py'))
  taken = keras_run_fn.run_fn_model(module.run_fn, _fn_args(tmp_path))
  spec = {name: tf.io.FixedLenFeature([], tf.float32)
          for name in ('x_xf', 'y_xf')}
  spec['label_xf'] = tf.io.FixedLenFeature([], tf.int64)
  report = preflight.run_preflight(
      taken.model_fn, config_lib.TrainerConfig(), {},
      preflight_sample.from_feature_spec(spec, taken.label_key, 8,
                                         'synthetic'),
      module.module_file)
  assert not report.errors, [f.message for f in report.errors]


def test_model_built_after_fit_is_refused(tmp_path):
  path = _path('keras_run_fn_model_after_fit_module.py')
  module = _load(path)  # One fit: only running run_fn shows the second model.
  with pytest.raises(keras_run_fn.KerasRunFnError) as error:
    keras_run_fn.take_fit_call(module.run_fn, _fn_args(tmp_path))
  assert str(error.value) == (
      f'run_fn in {path} saves another model than the one it fits (a model '
      'built after fit), so TPUTrainer cannot tell which model to train and '
      'export. Define build_keras_model(params) returning the compiled model '
      'to train instead, e.g. `def build_keras_model(params): return '
      '_build_keras_model()`.')
  assert not os.listdir(tmp_path)
