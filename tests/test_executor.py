"""TPUTrainer executor `Do()` on real TFX artifacts of the taxi slice."""

import inspect
import json
import os

import pytest
import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib

from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models
from tests.conftest import TEST_MODULES_DIR
from tests.fixtures.run_settings import SMALL_BATCHES

pytestmark = pytest.mark.slow



def _module(name):
  return os.path.join(TEST_MODULES_DIR, name)


_do = pipeline_outputs.run_trainer


def _assert_dual_tag_model(model_uri):
  path = path_utils.serving_model_path(model_uri)
  assert path == path_utils.serving_model_dir(model_uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  tpu_ops = saved_models.op_types(path, ['serve', 'tpu'])
  assert 'TPUPartitionedCall' in tpu_ops
  assert 'TPUPartitionedCall' not in saved_models.op_types(path, ['serve'])
  return path


def _assert_no_model(run):
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))
  if os.path.exists(run.model.uri):
    assert os.listdir(run.model.uri) == []


def test_taxi_module_on_transformed_examples(taxi_artifacts,
                                             taxi_trainer_run):
  # The session's shared run: conftest.TAXI_TRAIN_STEPS (30) steps.
  run = taxi_trainer_run
  path = _assert_dual_tag_model(run.model.uri)
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 7)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  probabilities = outputs['probabilities'].numpy()
  assert probabilities.shape == (7, 1)
  assert ((probabilities > 0) & (probabilities < 1)).all()
  scores = loaded.signatures['classification'](inputs=tf.constant(raw))
  assert scores['scores'].shape == (7, 2)

  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert metrics['global_step'] == 30
  assert 0.0 <= metrics['accuracy'] <= 1.0 and 0.0 <= metrics['auc'] <= 1.0
  assert metrics['loss'] > 0
  properties = run.model.mlmd_artifact.custom_properties
  assert properties['eval_global_step'].int_value == 30
  assert properties['eval_accuracy'].double_value == pytest.approx(
      metrics['accuracy'])
  assert properties['eval_auc'].double_value == pytest.approx(metrics['auc'])

  model_run_files = os.listdir(run.model_run.uri)
  assert 'checkpoint' in model_run_files
  assert any(name.startswith('events.out.tfevents') for name in
             model_run_files)
  assert os.listdir(os.path.join(run.model_run.uri, 'eval_eval'))
  # The training report, its curves embedded and as files.
  with open(os.path.join(run.model_run.uri, 'training_report.html')) as f:
    page = f.read()
  assert '<tr><th>train_args.num_steps</th><td>30</td></tr>' in page
  # Loss, training speed and each eval metric: a short training ends its
  # host loops at a tenth of its steps, so 30 steps give the curves points
  # enough for a speed plot.
  assert page.count('src="data:image/png;base64,') == 5
  assert 'No training &quot;training/steps_per_sec&quot;' not in page
  assert sorted(os.listdir(os.path.join(run.model_run.uri,
                                        'training_report'))) == [
      'eval_accuracy.png', 'eval_auc.png', 'eval_loss.png', 'loss.png',
      'steps_per_sec.png']


def test_raw_examples_without_transform(taxi_artifacts, tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), _module('raw_module.py'),
      custom_config=SMALL_BATCHES, train_steps=10, eval_steps=3,
      transformed=False)
  _do(run)
  path = _assert_dual_tag_model(run.model.uri)
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 5)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  assert outputs['probabilities'].shape == (5, 1)
  assert run.model.mlmd_artifact.custom_properties[
      'eval_global_step'].int_value == 10


def test_alternate_strategy_and_params(taxi_artifacts, tmp_path,
                                       monkeypatch):
  built = []
  default_dataset = input_fns.default_dataset

  def recording_default_dataset(*args, **kwargs):
    arguments = inspect.signature(default_dataset).bind(*args, **kwargs)
    arguments.apply_defaults()
    built.append((arguments.arguments['training'],
                  arguments.arguments['table_first']))
    return default_dataset(*args, **kwargs)

  monkeypatch.setattr(input_fns, 'default_dataset', recording_default_dataset)
  probe = tmp_path / 'params.json'
  hyperparameters = standard_artifacts.HyperParameters()
  hyperparameters.uri = str(tmp_path / 'hparams')
  os.makedirs(hyperparameters.uri)
  with open(os.path.join(hyperparameters.uri, 'best_hyperparameters.txt'),
            'w') as f:
    json.dump({'space': [], 'values': {'learning_rate': 0.05}}, f)
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), _module('linear_module.py'),
      custom_config=dict(SMALL_BATCHES, eval_strategy='alternate',
                         save_checkpoints_steps=6,
                         params={'probe_file': str(probe), 'depth': 3}),
      train_steps=12, eval_steps=2, hyperparameters=hyperparameters)
  _do(run)
  params = json.loads(probe.read_text())
  assert params['learning_rate'] == 0.05
  assert params['depth'] == 3
  assert params['batch_size'] == 16 and params['use_tpu'] is False
  # What a tensorflow/tpu model reads from FLAGS
  # (docs/reference/tpu_estimator.md).
  assert (params['train_batch_size'], params['train_steps'],
          params['eval_steps'], params['model_dir']) == (
              16, 12, 2, run.model_run.uri)
  # Two train/evaluate cycles of 6 steps each; each cycle's training input
  # builds its table before the first batch (a cycle may stop inside an
  # epoch, before a streamed first epoch would have filled it).
  assert [table_first for training, table_first in built if training] == [
      True, True]
  eval_events = os.listdir(os.path.join(run.model_run.uri, 'eval_eval'))
  assert eval_events
  assert run.model.mlmd_artifact.custom_properties[
      'eval_global_step'].int_value == 12
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]


def test_base_model_warm_starts(taxi_artifacts, tmp_path):
  first = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'first'), _module('linear_module.py'),
      custom_config=SMALL_BATCHES, train_steps=8, eval_steps=2)
  _do(first)
  trained_weights = tf.train.load_variable(first.model_run.uri, 'weights')

  second = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'second'), _module('linear_module.py'),
      custom_config=dict(SMALL_BATCHES,
                         params={'probe_file': str(tmp_path / 'p.json')}),
      train_steps=1, eval_steps=1, base_model=first.model)
  _do(second)
  # The initial checkpoint of the second run holds the base model's weights.
  initial = tf.train.load_variable(
      os.path.join(second.model_run.uri, 'model.ckpt-0'), 'weights')
  assert (initial == trained_weights).all()


def test_parsed_cache_of_sparse_raw_features_fails_before_training(
    taxi_artifacts, tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), _module('raw_module.py'),
      custom_config=dict(SMALL_BATCHES, input_cache='parsed'), train_steps=10,
      eval_steps=3, transformed=False)
  with pytest.raises(errors.TPUTrainerError) as error:
    _do(run)
  assert 'input_cache="parsed" needs fixed-length features' in str(
      error.value)
  assert "'fare'" in str(error.value)
  _assert_no_model(run)
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))


@pytest.mark.parametrize('custom_config,train_steps,eval_steps,message', [
    ({'bogus_key': 1}, 10, 2, "Unknown custom_config key(s) ['bogus_key']"),
    ({'train_batch_size': -4}, 10, 2,
     "custom_config['train_batch_size'] must be a positive integer"),
    ({'use_tpu': True, 'num_shards': 8, 'train_batch_size': 12}, 10, 2,
     "custom_config['train_batch_size']=12 does not divide by num_shards=8"),
    ({'use_tpu': True}, 10, None,
     'eval_args.num_steps is required when use_tpu is true'),
    ({}, 0, 2, 'train_args.num_steps must be a positive integer'),
    ({'input_cache': 'memory'}, 10, 2,
     "custom_config['input_cache']='memory' is not accepted"),
    ({'label_key': 'no_such_feature'}, 10, 2,
     "Label key 'no_such_feature' is not a feature of the transformed schema"),
])
def test_invalid_config_fails_before_training(taxi_artifacts, tmp_path,
                                              custom_config, train_steps,
                                              eval_steps, message):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), _module('linear_module.py'),
      custom_config=custom_config, train_steps=train_steps,
      eval_steps=eval_steps)
  with pytest.raises(errors.TPUTrainerError) as error:
    _do(run)
  assert message in str(error.value)
  _assert_no_model(run)
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))


@pytest.mark.parametrize('module_name,message', [
    ('no_model_fn.py', 'defines neither model_fn'),
    ('wrong_signature.py', "missing argument(s) ['mode', 'params']"),
    # The first graph built is the eval graph of the check before training.
    ('raising_model_fn.py',
     "model_fn in {path} raised ValueError in mode 'eval': the model cannot "
     'be built'),
    ('wrong_return_type.py',
     'model_fn in {path} must return a '
     'tf.compat.v1.estimator.tpu.TPUEstimatorSpec, got dict'),
    ('estimator_spec_module.py', 'returned a tf.estimator.EstimatorSpec'),
    ('fails_to_import.py', 'failed to import'),
])
def test_broken_module_leaves_no_model(taxi_artifacts, tmp_path, module_name,
                                       message):
  path = _module(module_name)
  run = pipeline_outputs.trainer_run(taxi_artifacts, str(tmp_path), path,
                                     custom_config=SMALL_BATCHES)
  with pytest.raises(user_module.UserModuleError) as error:
    _do(run)
  assert message.format(path=path) in str(error.value)
  _assert_no_model(run)
