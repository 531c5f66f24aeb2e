"""TPUEstimator's features through the executor, on the taxi slice (CPU).

The knobs TPU users look for (issue 47): a random seed, warm-start
selection, bfloat16, host_call summaries, the params a tensorflow/tpu model
reads where it read its FLAGS, and export API v2.
"""

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer.publishing import export

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models
from tests.fixtures.run_settings import SMALL_BATCHES

pytestmark = pytest.mark.slow


def _module(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _trained_variables(model_run_uri):
  reader = tf.train.load_checkpoint(model_run_uri)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def _train_linear(taxi_artifacts, out, **custom_config):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(out), _module('linear_module.py'),
      custom_config=dict(SMALL_BATCHES, **custom_config), train_steps=6,
      eval_steps=1)
  pipeline_outputs.run_trainer(run)
  return run


def test_the_same_seed_trains_the_same_weights(taxi_artifacts, tmp_path):
  first, second = (
      _trained_variables(_train_linear(taxi_artifacts, tmp_path / name,
                                       tf_random_seed=7).model_run.uri)
      for name in ('first', 'second'))
  assert first['global_step'] == second['global_step'] == 6
  for name in ('weights', 'bias'):
    np.testing.assert_array_equal(first[name], second[name])
  # The initial weights come from the seed: another seed, other weights.
  other = _trained_variables(_train_linear(
      taxi_artifacts, tmp_path / 'other', tf_random_seed=8).model_run.uri)
  assert not np.array_equal(first['weights'], other['weights'])


def test_warm_start_takes_the_selected_variables_by_their_old_names(
    taxi_artifacts, tmp_path):
  base = _train_linear(taxi_artifacts, tmp_path / 'base')
  trained = _trained_variables(base.model_run.uri)
  assert trained['bias'].any()
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'warm'), _module('linear_module.py'),
      custom_config=dict(SMALL_BATCHES, params={'weights_name': 'kernel'},
                         vars_to_warm_start=['kernel'],
                         var_name_to_prev_var_name={'kernel': 'weights'}),
      train_steps=1, eval_steps=1, base_model=base.model)
  pipeline_outputs.run_trainer(run)
  initial = _trained_variables(
      os.path.join(run.model_run.uri, 'model.ckpt-0'))
  # `kernel` starts from the base model's `weights`; `bias`, not selected,
  # from its initializer (zeros).
  np.testing.assert_array_equal(initial['kernel'], trained['weights'])
  assert not initial['bias'].any()


def test_resnet_idioms_train_in_bfloat16_with_host_call_summaries(
    taxi_artifacts, tmp_path):
  probe = tmp_path / 'params.json'
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'),
      _module('resnet_idioms_module.py'),
      custom_config=dict(SMALL_BATCHES, bfloat16=True, iterations_per_loop=5,
                         params={'num_train_images': 320,
                                 'probe_file': str(probe)}),
      train_steps=10, eval_steps=2)
  pipeline_outputs.run_trainer(run)

  params = json.loads(probe.read_text())
  assert {key: params[key] for key in (
      'train_batch_size', 'eval_batch_size', 'iterations_per_loop',
      'train_steps', 'eval_steps', 'model_dir', 'precision', 'use_bfloat16',
      'num_train_images', 'batch_size', 'use_tpu')} == {
          'train_batch_size': 16, 'eval_batch_size': 16,
          'iterations_per_loop': 5, 'train_steps': 10, 'eval_steps': 2,
          'model_dir': run.model_run.uri, 'precision': 'bfloat16',
          'use_bfloat16': True, 'num_train_images': 320, 'batch_size': 16,
          'use_tpu': False}
  # The host_call's tf2 summaries, one point per step, in model_run.
  steps = {}
  for path in glob.glob(os.path.join(run.model_run.uri, 'events.out.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        steps.setdefault(value.tag, set()).add(event.step)
  assert steps['learning_rate'] == steps['current_epoch'] == set(range(10))
  # The estimator's own `loss` summary keeps its tag beside the host call's.
  assert set(range(10)) <= steps['loss'] and 'loss_1' not in steps
  # The served model computes in bfloat16 and answers in float32.
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 3)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  assert outputs['probabilities'].dtype == tf.float32
  assert outputs['probabilities'].shape == (3, 1)
  meta_graph = tf.compat.v1.saved_model.loader.load(
      tf.compat.v1.Session(graph=tf.Graph()), ['serve'], path)
  assert any(node.attr['DstT'].type == tf.bfloat16.as_datatype_enum
             for node in meta_graph.graph_def.node if node.op == 'Cast')


def test_export_api_v2_exports_the_module_s_own_tpu_inference(
    taxi_artifacts, tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), _module('tpu_inference_module.py'),
      custom_config=dict(SMALL_BATCHES, export_saved_model_api_version=2),
      train_steps=2, eval_steps=1)
  pipeline_outputs.run_trainer(run)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  assert 'TPUPartitionedCall' in saved_models.op_types(path, ['serve', 'tpu'])
  assert 'TPUPartitionedCall' not in saved_models.op_types(path, ['serve'])
