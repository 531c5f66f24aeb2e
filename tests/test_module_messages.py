"""Smaller module findings: labels [batch, 1], params['mode'], one finding per
cause, no internal class names, the user's module_file in errors."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer.preflight import sample as preflight_sample

from tests.conftest import TEST_MODULES_DIR

FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def _load(name):
  return user_module.load_user_module(
      {'module_file': os.path.join(TEST_MODULES_DIR, name)})


def _sample(extra=None):
  spec = {name: tf.io.FixedLenFeature([], tf.float32)
          for name in FLOAT_FEATURES}
  spec['big_tipper'] = tf.io.FixedLenFeature([], tf.int64)
  spec.update(extra or {})
  return preflight_sample.from_feature_spec(spec, 'big_tipper', 8, 'synthetic')


def test_label_of_shape_batch_1_is_explained():
  module = _load('flat_label_module.py')
  model_fn = dispatch.model_fn_for_module(module)
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    with pytest.raises(user_module.UserModuleError) as error:
      model_fn({'fare_xf': tf.zeros([8])}, tf.zeros([8, 1], tf.int64),
               tf.estimator.ModeKeys.TRAIN, {'batch_size': 8}, None)
  message = str(error.value)
  assert message.startswith(
      f"model_fn in {module.module_file} raised ValueError in mode 'train'")
  assert ('the labels reach the model_fn with shape (8, 1), [batch, 1], as '
          'TFX schemas give a scalar feature the shape [1]; a model_fn '
          'written for [batch] labels can use tf.reshape(labels, [-1])'
          in message)


def test_module_input_fn_is_told_train_or_eval():
  seen = []

  def input_fn(file_pattern, data_accessor, schema, params):
    del file_pattern, data_accessor, schema
    seen.append(params['mode'])
    return tf.data.Dataset.from_tensors(({'x': [1.0]}, [0]))

  function = user_module.ModuleFunction('input_fn', 'm.py', input_fn)
  for training in (True, False):
    input_fns.make_input_fn([], None, None, None, training=training,
                            repeat=False, module_input_fn=function)(
                                {'batch_size': 1})
  assert seen == ['train', 'eval']


def _preflight(module_name, sample=None):
  module = _load(module_name)
  return preflight.run_preflight(
      dispatch.model_fn_for_module(module), config_lib.TrainerConfig(), {},
      sample or _sample(), module.module_file)


def test_py_function_is_one_finding_with_its_knock_on_findings_folded():
  report = _preflight('preflight_py_function_module.py')
  assert [f.code for f in report.errors] == ['xla-unsupported-op']
  message = report.errors[0].message
  assert message.startswith("op 'EagerPyFunc' (EagerPyFunc) in the train step "
                            'cannot be compiled by XLA')
  assert 'Knock-on findings of this cause, folded here: dynamic-shape' in message
  assert 'depends on the data' not in message


def test_boolean_mask_is_one_finding():
  report = _preflight('preflight_boolean_mask_module.py')
  assert [f.code for f in report.errors] == ['dynamic-shape']
  assert report.errors[0].message.startswith("op 'boolean_mask/Where' (Where)")


def test_no_internal_class_name_in_a_model_fn_error():

  def model_fn(features, labels, mode, params):
    del labels, mode, params
    return features / 2.0  # Written for a single feature tensor.

  report = preflight.run_preflight(
      model_fn, config_lib.TrainerConfig(), {},
      _sample({'company': tf.io.FixedLenFeature([], tf.string)}), 'm.py')
  messages = ' '.join(f.message for f in report.findings)
  assert "unsupported operand type(s) for /: 'dict' and 'float'" in messages
  assert 'WithheldFeatures' not in messages


def test_component_keeps_the_module_file_for_packaged_runs(monkeypatch):
  from tfx_tpu_trainer import component  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx.types import channel_utils  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv('UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES', raising=False)
  examples = channel_utils.as_channel([standard_artifacts.Examples()])
  trainer = component.TPUTrainer(module_file='my_module.py', examples=examples,
                                 custom_config={'train_batch_size': 8})
  # An exec property declared in the component's spec, not a config key.
  assert isinstance(trainer.spec, component.TPUTrainerSpec)
  assert user_module.USER_MODULE_FILE_KEY in (
      component.TPUTrainer.SPEC_CLASS.PARAMETERS)
  assert trainer.exec_properties[user_module.USER_MODULE_FILE_KEY] == (
      os.path.abspath('my_module.py'))
  assert json.loads(trainer.exec_properties['custom_config']) == {
      'train_batch_size': 8}
  assert trainer.exec_properties['module_file'] == 'my_module.py'
  assert trainer.outputs['model'].producer_component_id == trainer.id


def test_packaged_module_is_named_by_its_module_file(tmp_path):
  # As in a pipeline run: TFX passes 'name@wheel' and no module_file.
  with pytest.raises(user_module.UserModuleError) as error:
    user_module.load_user_module(
        {'module_path': 'no_such_module_xyz@' + str(tmp_path / 'x.whl')},
        module_file_name='/home/me/my_module.py')
  assert str(error.value).startswith(
      "module_file '/home/me/my_module.py' failed to import")


@pytest.mark.parametrize('exec_properties,expected', [
    ({'module_path': 'm@/p/x.whl', 'user_module_file': '/home/me/m.py',
      'custom_config': '{"a": 1}'}, '/home/me/m.py'),
    ({'module_file': '/h/m.py', 'user_module_file': '/h/m.py'}, '/h/m.py'),
    ({'module_file': '/h/m.py', 'custom_config': 'null'}, '/h/m.py'),
    ({'module_path': 'm@/p/x.whl', 'custom_config': 'not json'}, 'm@/p/x.whl'),
    ({}, 'the user module'),
])
def test_errors_name_the_module_file_the_user_wrote(exec_properties, expected):
  assert user_module.module_name(exec_properties) == expected


def test_a_module_with_resnet_model_fn_is_told_to_name_it(tmp_path):
  path = tmp_path / 'resnet_main.py'
  path.write_text('def resnet_model_fn(features, labels, mode, params):\n'
                  '  pass\n')
  with pytest.raises(user_module.UserModuleError) as error:
    user_module.load_user_module({'module_file': str(path)})
  assert str(error.value).endswith(
      'Define one of them. It defines resnet_model_fn: if that is the '
      'model_fn TPUEstimator should run, name it model_fn, e.g. add '
      '`model_fn = resnet_model_fn` at the end of the module.')


def _resnet_idioms_train_step(params):
  module = _load('resnet_idioms_module.py')
  model_fn = dispatch.model_fn_for_module(module)
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    features = {name: tf.zeros([8]) for name in FLOAT_FEATURES}
    return module, model_fn(features, tf.zeros([8, 1], tf.int64),
                            tf.estimator.ModeKeys.TRAIN, params, None)


def test_a_param_the_model_reads_and_nobody_set_is_named():
  config = config_lib.TrainerConfig()
  params = prepare.build_params(config, None, train_steps=100,
                                model_dir='/tmp/m')
  params.update(batch_size=8, use_tpu=False)
  with pytest.raises(user_module.UserModuleError) as error:
    _resnet_idioms_train_step(params)
  message = str(error.value)
  assert "raised KeyError in mode 'train': 'num_train_images'" in message
  assert message.endswith(
      "(Note: the model_fn read params['num_train_images'], which params do "
      "not hold: give it in custom_config['params'] ({'num_train_images': "
      '...}), as a tensorflow/tpu model passes its flags and config in '
      "params. params holds 'batch_size', 'eval_batch_size', 'iterations_per_"
      "loop', 'model_dir', 'precision', 'predict_batch_size', "
      "'train_batch_size', 'train_steps', 'use_bfloat16', 'use_tpu'; see "
      'docs/reference/tpu_estimator.md, "Where flags go".)')
  # Where the run's steps are unknown (the preflight command): said so.
  params = dict(prepare.build_params(config, None, model_dir='/tmp/m'),
                num_train_images=100, batch_size=8, use_tpu=False)
  with pytest.raises(user_module.UserModuleError,
                     match=re.escape(
                         "read params['train_steps'], which params do not "
                         'hold: TPUTrainer sets it from train_args.num_steps '
                         'in a pipeline run')):
    _resnet_idioms_train_step(params)
  params['train_steps'] = 100
  _, spec = _resnet_idioms_train_step(params)
  assert spec.host_call is not None


def test_params_from_train_args_and_the_tuner_must_agree_with_the_run():
  config = config_lib.TrainerConfig.from_custom_config(
      {'params': {'train_steps': 500}}, environ={})
  assert prepare.build_params(config, None, train_steps=500)[
      'train_steps'] == 500
  with pytest.raises(config_lib.ConfigError) as error:
    prepare.build_params(config, None, train_steps=1000)
  assert str(error.value) == (
      "custom_config['params'] sets 'train_steps'=500, but TPUTrainer sets "
      "params['train_steps']=1000 from train_args.num_steps, which the "
      'estimator uses: the model would read one value while training runs '
      'with the other. Set train_args.num_steps instead, and drop '
      "'train_steps' from custom_config['params'].")
  with pytest.raises(config_lib.ConfigError, match=re.escape(
      "the tuned hyperparameters sets 'train_batch_size'=128, but TPUTrainer "
      "sets params['train_batch_size']=64")):
    prepare.build_params(config_lib.TrainerConfig(),
                         {'values': {'train_batch_size': 128}})


@pytest.mark.parametrize('module_file,custom_config,message', [
    (os.path.join(TEST_MODULES_DIR, 'stock_estimator_module.py'),
     {'bfloat16': True},
     "custom_config['bfloat16'] is true, but trainer_fn in {path} returns a "
     'stock Estimator, which builds its own float32 graph'),
    (os.path.join(os.path.dirname(TEST_MODULES_DIR), '..', '..', 'components',
                  'taxi_keras_module.py'),
     {'export_saved_model_api_version': 2},
     "custom_config['export_saved_model_api_version']=2 leaves the TPU "
     'rewrite of inference to the model_fn, but {path} has no model_fn of '
     'its own'),
])
def test_keys_a_kind_of_module_cannot_honour_are_refused(module_file,
                                                         custom_config,
                                                         message):
  path = os.path.normpath(module_file)
  module = user_module.load_user_module({'module_file': path})
  config = config_lib.TrainerConfig.from_custom_config(custom_config,
                                                       environ={})
  with pytest.raises(config_lib.ConfigError) as error:
    prepare.prepare_run(config, module, None)
  assert message.format(path=path) in str(error.value)
