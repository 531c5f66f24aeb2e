"""The multi-step host loop (`host_iterations_per_loop`) off TPU.

A linear model on a synthetic dataset, trained by the TPUEstimator that
estimator_builder builds: the loop must stop exactly at max_steps, write
checkpoints at the steps asked for, stop at a NaN loss, resume from a
checkpoint in the middle of a loop, and train the same weights as one step
per session.run. The default (`auto`) length: 100 or the divisor of the
checkpoint steps, the step-rate log every 100 steps, a NaN stop, and one step
per run for an input or model the loop cannot run. Two training tests are in
`make test-fast`; the others are marked slow.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.training import estimator_builder
from tfx_tpu_trainer.training import host_loop

BATCH = 8
ROWS = 64


def _data(nan_row=None):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(ROWS, 3)).astype(np.float32)
  if nan_row is not None:
    x[nan_row] = np.nan
  y = (x.sum(axis=1) > 0).astype(np.float32)
  return x, y


def _input_fn(nan_row=None):
  def input_fn(params):
    x, y = _data(nan_row)
    return tf.data.Dataset.from_tensor_slices(({'x': x}, y)).repeat().batch(
        params['batch_size'], drop_remainder=True)
  return input_fn


def _model_fn(features, labels, mode, params):
  del params
  weights = tf.compat.v1.get_variable('w', [3, 1],
                                      initializer=tf.zeros_initializer())
  logits = tf.matmul(features['x'], weights)
  loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.reshape(labels, [-1, 1]), logits=logits))
  if mode == tf.estimator.ModeKeys.EVAL:
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss)
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss,
                                                     train_op=train_op)


def _estimator(model_dir, model_fn=_model_fn, **custom_config):
  config = config_lib.TrainerConfig.from_custom_config(
      dict(train_batch_size=BATCH, eval_batch_size=BATCH, use_tpu=False,
           **custom_config))
  run_config = estimator_builder.build_run_config(config, str(model_dir))
  return estimator_builder.build_estimator(model_fn, config, run_config, {})


class _RunCounter(tf.compat.v1.train.SessionRunHook):
  """Counts session.run calls of training."""

  def __init__(self):
    self.runs = 0

  def after_run(self, run_context, run_values):
    self.runs += 1


def _checkpoint_steps(model_dir):
  state = tf.train.get_checkpoint_state(str(model_dir))
  return sorted(int(path.rsplit('-', 1)[1])
                for path in state.all_model_checkpoint_paths)


def _step_rate_log_steps(model_dir):
  """The steps at which the estimator wrote its `global_step/sec` summary."""
  steps = []
  for path in tf.io.gfile.glob(os.path.join(str(model_dir), 'events.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      if any(value.tag == 'global_step/sec' for value in event.summary.value):
        steps.append(event.step)
  return sorted(steps)


@pytest.mark.parametrize('value', [0, -3, 2.5, True, '100', 'Auto'])
def test_host_iterations_per_loop_must_be_auto_or_a_positive_integer(value):
  with pytest.raises(config_lib.ConfigError,
                     match="'host_iterations_per_loop'.*'auto' or a positive"):
    config_lib.TrainerConfig.from_custom_config(
        {'host_iterations_per_loop': value})


@pytest.mark.parametrize('custom_config, length', [
    ({}, 100),
    ({'save_checkpoints_steps': 1000}, 100),
    ({'save_checkpoints_steps': 250}, 50),
    ({'save_checkpoints_steps': 64}, 4),
    ({'save_checkpoints_steps': 101}, 1),
    ({'host_iterations_per_loop': 'auto', 'save_checkpoints_steps': 30}, 10),
    # An explicit value wins.
    ({'host_iterations_per_loop': 64, 'save_checkpoints_steps': 128}, 64),
    ({'host_iterations_per_loop': 1}, 1),
    # On TPU, iterations_per_loop is TPU's own loop.
    ({'use_tpu': True}, 1),
])
def test_auto_loop_length_divides_100_and_the_checkpoint_steps(
    custom_config, length):
  config = config_lib.TrainerConfig.from_custom_config(custom_config)
  assert config.host_loop_iterations == length
  assert config.host_loop_is_auto == (
      custom_config.get('host_iterations_per_loop', 'auto') == 'auto' and
      not custom_config.get('use_tpu'))
  for key in config_lib.HOST_LOOP_END_KEYS:
    steps = getattr(config, key)
    assert steps is None or steps % config.host_loop_iterations == 0


def test_checkpoint_steps_must_be_a_multiple_of_the_loop():
  with pytest.raises(config_lib.ConfigError,
                     match="save_checkpoints_steps.*host_iterations_per_loop"):
    config_lib.TrainerConfig.from_custom_config(
        {'host_iterations_per_loop': 100, 'save_checkpoints_steps': 250})
  config = config_lib.TrainerConfig.from_custom_config(
      {'host_iterations_per_loop': 100, 'save_checkpoints_steps': 300})
  assert config.host_loop_iterations == 100
  # On TPU the key is ignored: iterations_per_loop is TPU's own loop (which
  # the checkpoint steps must be a multiple of: tests/test_config.py).
  on_tpu = config_lib.TrainerConfig.from_custom_config(
      {'host_iterations_per_loop': 100, 'save_checkpoints_steps': 250,
       'iterations_per_loop': 50, 'use_tpu': True})
  assert on_tpu.host_loop_iterations == 1


def test_loops_end_at_multiples_and_at_the_last_step():
  hook = host_loop.HostLoopStopHook(100, last_step=250)
  steps = []
  hook._step = 0  # pylint: disable=protected-access
  while hook._step < 250:  # pylint: disable=protected-access
    hook._step += hook.next_iterations()  # pylint: disable=protected-access
    steps.append(hook._step)  # pylint: disable=protected-access
  assert steps == [100, 200, 250]
  resumed = host_loop.HostLoopStopHook(100, num_steps=100)
  resumed._step, resumed._last_step = 130, 230  # pylint: disable=protected-access
  assert resumed.next_iterations() == 70


def test_trains_to_exactly_max_steps_with_checkpoints_at_loop_ends(tmp_path):
  estimator = _estimator(tmp_path, host_iterations_per_loop=20,
                         save_checkpoints_steps=40, keep_checkpoint_max=10)
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=90, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 90
  assert counter.runs == 5  # 20, 40, 60, 80, 90
  assert _checkpoint_steps(tmp_path) == [0, 40, 80, 90]

  # A resumed run (from step 90) first loops to the next multiple of 20;
  # the checkpoint timer restarts at 90, as the estimator's own does.
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=170, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 170
  assert counter.runs == 5  # 100, 120, 140, 160, 170
  assert _checkpoint_steps(tmp_path)[-3:] == [90, 140, 170]
  metrics = estimator.evaluate(_input_fn(), steps=2)
  assert metrics['global_step'] == 170


def test_default_config_loops_to_checkpoint_steps_and_the_last_step(tmp_path):
  # Default (auto) with checkpoints every 150 steps: loops of 50 steps.
  estimator = _estimator(tmp_path, save_checkpoints_steps=150,
                         keep_checkpoint_max=10)
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=330, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 330
  assert counter.runs == 7  # 50, 100, ..., 300, 330
  assert _checkpoint_steps(tmp_path) == [0, 150, 300, 330]


def _summary_tags(model_dir):
  tags = set()
  for path in tf.io.gfile.glob(os.path.join(str(model_dir), 'events.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(value.tag for value in event.summary.value)
  return tags


def test_default_config_trains_a_model_fn_with_v1_summaries(tmp_path,
                                                           absl_warnings):
  # A canned Estimator's model_fn writes v1 summaries (TFX's taxi_utils):
  # inside the loop they are dropped with a warning, and training runs.
  def model_fn_with_summary(features, labels, mode, params):
    spec = _model_fn(features, labels, mode, params)
    weights = tf.compat.v1.trainable_variables()[0]
    tf.compat.v1.summary.scalar('weight_sum', tf.reduce_sum(weights))
    return spec

  estimator = _estimator(tmp_path, model_fn=model_fn_with_summary)
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=120, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 120
  assert counter.runs == 2  # 100, 120
  assert 'weight_sum' in absl_warnings.text
  assert 'not written' in absl_warnings.text
  tags = _summary_tags(tmp_path)
  assert 'loss' in tags and 'weight_sum' not in tags


@pytest.mark.slow
def test_default_config_logs_the_step_rate_every_100_steps(tmp_path):
  # The first trigger (at the first loop end) starts the timer; the log then
  # comes every 100 steps, with the default loop of 100 and with 20.
  auto = tmp_path / 'auto'
  _estimator(auto).train(_input_fn(), max_steps=400)
  assert _step_rate_log_steps(auto) == [200, 300, 400]
  twenty = tmp_path / 'twenty'
  _estimator(twenty, host_iterations_per_loop=20).train(_input_fn(),
                                                         max_steps=330)
  assert _step_rate_log_steps(twenty) == [120, 220, 320]


@pytest.mark.slow
def test_default_config_stops_at_a_nan_loss(tmp_path):
  estimator = _estimator(tmp_path, save_checkpoints_steps=4,
                         keep_checkpoint_max=10)
  # Row 43 is in the 6th batch of 8: the loss of step 6 is NaN; the loop of
  # 4 (auto: gcd(100, 4)) that holds it ends there, and no later checkpoint
  # is written.
  with pytest.raises(tf.compat.v1.train.NanLossDuringTrainingError):
    estimator.train(_input_fn(nan_row=43), max_steps=100)
  assert _checkpoint_steps(tmp_path) == [0, 4]


@pytest.mark.slow
def test_default_config_trains_a_tensor_input_one_step_per_run(tmp_path):
  # Not a tf.data.Dataset: auto trains one step per run; an explicit length
  # is an error (test_input_without_a_dataset_is_a_clear_error).
  def tensors_input_fn(params):
    x, y = _data()
    return {'x': tf.constant(x[:params['batch_size']])}, tf.constant(
        y[:params['batch_size']])

  estimator = _estimator(tmp_path)
  counter = _RunCounter()
  estimator.train(tensors_input_fn, max_steps=7, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 7
  assert counter.runs == 7


class _LossRecorder(tf.compat.v1.train.SessionRunHook):
  """A model_fn training hook that fetches the loss tensor every run."""

  def __init__(self, loss):
    self._loss = loss
    self.losses = []

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    self.losses.append(float(run_values.results))


@pytest.mark.slow
def test_default_config_runs_training_hooks_of_the_model_fn_every_step(
    tmp_path):
  recorders = []

  def model_fn_with_hooks(features, labels, mode, params):
    spec = _model_fn(features, labels, mode, params)
    if mode != tf.estimator.ModeKeys.TRAIN:
      return spec
    recorder = _LossRecorder(spec.loss)
    recorders.append(recorder)
    return spec._replace(training_hooks=(recorder,))

  estimator = _estimator(tmp_path, model_fn=model_fn_with_hooks)
  estimator.train(_input_fn(), max_steps=12)
  assert estimator.get_variable_value('global_step') == 12
  # The scratch graph's hook never runs; the training graph's runs 12 times.
  assert [len(recorder.losses) for recorder in recorders] == [0, 12]
  assert all(np.isfinite(recorders[-1].losses))


def _warm_model_fn(checkpoint):
  """_model_fn, its weights initialized from `checkpoint`, never trained.

  As tensorflow/tpu's MnasNet warm-starts off TPU: init_from_checkpoint in
  the model_fn.
  """

  def model_fn(features, labels, mode, params):
    spec = _model_fn(features, labels, mode, params)
    tf.compat.v1.train.init_from_checkpoint(checkpoint, {'w': 'w'})
    if mode != tf.estimator.ModeKeys.TRAIN:
      return spec
    return spec._replace(train_op=tf.compat.v1.assign_add(
        tf.compat.v1.train.get_global_step(), 1))

  return model_fn


@pytest.fixture(scope='module')
def trained_checkpoint(tmp_path_factory):
  model_dir = tmp_path_factory.mktemp('trained')
  _estimator(model_dir, host_iterations_per_loop=1).train(_input_fn(),
                                                          max_steps=5)
  return tf.train.latest_checkpoint(str(model_dir))


def test_default_config_trains_a_model_fn_that_inits_from_a_checkpoint(
    tmp_path, trained_checkpoint, absl_info):
  estimator = _estimator(tmp_path,
                         model_fn=_warm_model_fn(trained_checkpoint))
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=3, hooks=[counter])
  # One step per session.run, from the checkpoint's weights.
  assert counter.runs == 3
  np.testing.assert_array_equal(
      estimator.get_variable_value('w'),
      tf.train.load_variable(trained_checkpoint, 'w'))
  assert ('host_iterations_per_loop=\'auto\': the model_fn calls '
          'tf.compat.v1.train.init_from_checkpoint, whose initializers cannot '
          'be built inside the loop, so training runs one step per '
          'session.run.') in absl_info.text


def test_init_from_checkpoint_with_a_loop_length_names_the_key(
    tmp_path, trained_checkpoint):
  estimator = _estimator(tmp_path, model_fn=_warm_model_fn(
      trained_checkpoint), host_iterations_per_loop=4)
  with pytest.raises(host_loop.HostLoopError) as error:
    estimator.train(_input_fn(), max_steps=3)
  assert str(error.value) == (
      'The model_fn calls tf.compat.v1.train.init_from_checkpoint, which '
      "custom_config['host_iterations_per_loop'] > 1 cannot run (it would "
      'build the variable initializers inside the loop). Set '
      "host_iterations_per_loop to 1 or 'auto' (one step per session.run for "
      'such a model_fn), or warm-start from base_model instead.')


@pytest.mark.slow
def test_same_weights_as_one_step_per_run(tmp_path):
  looped = _estimator(tmp_path / 'looped', host_iterations_per_loop=16)
  looped.train(_input_fn(), max_steps=50)
  single = _estimator(tmp_path / 'single', host_iterations_per_loop=1)
  single.train(_input_fn(), max_steps=50)
  np.testing.assert_allclose(looped.get_variable_value('w'),
                             single.get_variable_value('w'), rtol=1e-5)
  assert looped.get_variable_value('global_step') == 50


@pytest.mark.slow
def test_nan_loss_stops_training_at_its_step(tmp_path):
  estimator = _estimator(tmp_path, host_iterations_per_loop=20)
  # Row 43 is in the 6th batch of 8: the loss of step 6 is NaN.
  with pytest.raises(tf.compat.v1.train.NanLossDuringTrainingError):
    estimator.train(_input_fn(nan_row=43), max_steps=100)


@pytest.mark.slow
def test_input_without_a_dataset_is_a_clear_error(tmp_path):
  estimator = _estimator(tmp_path, host_iterations_per_loop=10)

  def tensors_input_fn(params):
    x, y = _data()
    return {'x': tf.constant(x[:params['batch_size']])}, tf.constant(
        y[:params['batch_size']])

  with pytest.raises(host_loop.HostLoopError, match='tf.data.Dataset'):
    estimator.train(tensors_input_fn, max_steps=10)


@pytest.mark.slow
def test_keras_model_fn_trains_in_the_loop(tmp_path):
  def build_keras_model(params):
    del params
    x = tf.keras.Input(shape=(3,), name='x')
    output = tf.keras.layers.Dense(1, activation='sigmoid',
                                   name='probabilities')(x)
    model = tf.keras.Model(x, output)
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01),
                  loss='binary_crossentropy')
    return model

  model_fn = keras_adapter.make_keras_model_fn(user_module.ModuleFunction(
      'build_keras_model', 'test', build_keras_model))
  estimator = _estimator(tmp_path, model_fn=model_fn,
                         host_iterations_per_loop=10)
  counter = _RunCounter()
  estimator.train(_input_fn(), max_steps=25, hooks=[counter])
  assert estimator.get_variable_value('global_step') == 25
  assert counter.runs == 3
  assert os.path.exists(os.path.join(tmp_path, 'checkpoint'))


@pytest.mark.slow
def test_executor_trains_the_keras_taxi_module_in_the_loop(taxi_artifacts,
                                                           tmp_path):
  # pylint: disable=g-import-not-at-top
  import json
  from tfx_tpu_trainer_cli import paths
  from tfx.utils import path_utils
  from tfx_tpu_trainer import executor
  from tfx_tpu_trainer.publishing import export
  from tfx_tpu_trainer.publishing import metrics as metrics_lib
  from tests.fixtures import pipeline_outputs
  # pylint: enable=g-import-not-at-top
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path),
      os.path.join(paths.COMPONENTS_DIR, 'taxi_keras_module.py'),
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16,
                     'host_iterations_per_loop': 20,
                     'save_checkpoints_steps': 40},
      train_steps=50, eval_steps=3)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    assert json.load(f)['global_step'] == 50
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
