"""The trainer's curves: the loss to the last step, the speed alone."""

import time

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.publishing import training_events
from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.training import estimator_builder
from tfx_tpu_trainer.training import host_loop
from tfx_tpu_trainer.training import schedule

# Each evaluation takes at least this long: an interval of the curves that
# holds one is at least this much longer on the wall clock than the
# training time its rate gives.
EVAL_SECONDS = 0.5


def _model_fn(features, labels, mode, params):
  del params
  weights = tf.compat.v1.get_variable('w', [1, 1])
  loss = tf.reduce_mean(tf.square(tf.matmul(features['x'], weights) - labels))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode, loss=loss, train_op=train_op,
      eval_metrics=(lambda labels: {'mean_label': tf.compat.v1.metrics.mean(
          labels)}, [labels]))


def _input_fn(params):
  x = np.ones((8, 1), np.float32)
  return tf.data.Dataset.from_tensor_slices(({'x': x}, 2 * x)).repeat().batch(
      params['batch_size'], drop_remainder=True)


def _slow_eval_input_fn(params):
  def wait(x):
    time.sleep(EVAL_SECONDS)
    return x
  dataset = _input_fn(params)
  return dataset.map(lambda features, label: (
      features, tf.numpy_function(wait, [label], tf.float32,
                                  stateful=True)))


def _train(tmp_path, strategy, train_steps=100, eval_every_steps=20):
  config = config_lib.TrainerConfig.from_custom_config(dict(
      train_batch_size=4, eval_batch_size=4, use_tpu=False,
      eval_every_steps=eval_every_steps, eval_strategy=strategy,
      show_progress=False))
  model_dir = str(tmp_path / 'model_run')
  # As the executor builds it: the loop ends at every point of the curves.
  estimator = estimator_builder.build_estimator(
      _model_fn, config, estimator_builder.build_run_config(config, model_dir),
      {}, train_steps=train_steps)
  schedule.train_and_evaluate(estimator, config, _input_fn,
                              _slow_eval_input_fn, train_steps, eval_steps=1)
  return training_events.read_scalars(model_dir), _point_wall_times(model_dir)


def _point_wall_times(model_dir):
  """Step -> when the curves' point at that step was written (wall clock)."""
  wall_times = {}
  for path in tf.io.gfile.glob(f'{model_dir}/events.out.tfevents.*'):
    for event in tf.compat.v1.train.summary_iterator(path):
      if any(v.tag == curves.LOSS_TAG for v in event.summary.value):
        wall_times[event.step] = event.wall_time
  return wall_times


@pytest.mark.parametrize('strategy', ['train_and_evaluate', 'alternate'])
def test_loss_to_the_last_step_and_speed_without_evaluations(tmp_path,
                                                             strategy):
  scalars, wall_times = _train(tmp_path, strategy)
  loss_steps = [step for step, _ in scalars.series[curves.LOSS_TAG]]
  # The cadence of a 100-step run is 10 steps, and the loop ends there:
  # a tenth of the training, as TensorBoard's 100 steps for longer ones.
  assert curves.cadence_steps(100, 100) == 10
  assert loss_steps == list(range(10, 101, 10))
  rates = scalars.series[curves.STEP_RATE_TAG]
  # From the second point of each session on (no rate across a start-up).
  assert [step for step, _ in rates][-1] == 100
  assert len(rates) >= 5
  # Every other interval of 10 steps held an evaluation (after the
  # checkpoint at its start) of >= EVAL_SECONDS: the training time its rate
  # gives is shorter than the interval on the wall clock by at least that.
  rate_at = dict(rates)
  for step in (30, 50, 70, 90):
    left_out = wall_times[step] - wall_times[step - 10] - 10 / rate_at[step]
    assert left_out >= EVAL_SECONDS, (step, left_out, rates)
  examples = dict(scalars.series[curves.EXAMPLE_RATE_TAG])
  for step, rate in rates:
    assert examples[step] == pytest.approx(4 * rate, rel=1e-5)
  # The estimator's own step rate counts the evaluations (what the report
  # no longer plots).
  assert 'loss' in scalars.series


@pytest.mark.parametrize('train_steps,summary_steps,expected', [
    (1000, 100, 100), (100, 100, 10), (5, 100, 1), (1000, 20, 20),
    (1000, None, 100)])
def test_cadence(train_steps, summary_steps, expected):
  assert curves.cadence_steps(train_steps, summary_steps) == expected


@pytest.mark.parametrize('train_steps', [30, 100, 150, 400, 999, 1000, 5000])
@pytest.mark.parametrize('custom_config', [
    {}, {'eval_every_steps': 20}, {'save_checkpoints_steps': 250}])
def test_the_automatic_loop_ends_at_every_point_of_the_curves(train_steps,
                                                             custom_config):
  config = config_lib.TrainerConfig.from_custom_config(
      dict(custom_config, use_tpu=False))
  cadence = curves.cadence_steps(train_steps)
  length = host_loop.loop_length(config, cadence)
  # Points every `cadence` steps: at least MIN_POINTS, or one every 100.
  assert cadence % length == 0 and 100 % length == 0
  assert train_steps // cadence >= min(curves.MIN_POINTS, train_steps // 100)
  for key in config_lib.HOST_LOOP_END_KEYS:
    steps = getattr(config, key)
    assert steps is None or steps % length == 0
  # Longer trainings keep the loop of 100 steps (no more session runs).
  if train_steps >= 1000 and not custom_config:
    assert length == 100


def test_an_explicit_loop_length_is_kept():
  config = config_lib.TrainerConfig.from_custom_config(
      {'host_iterations_per_loop': 50, 'use_tpu': False})
  assert host_loop.loop_length(config, curves.cadence_steps(100)) == 50


def test_training_clock_leaves_out_stopped_time():
  now = [0.0]
  clock = curves.TrainingClock(lambda: now[0])
  clock.start()
  now[0] = 2.0
  clock.stop()
  now[0] = 100.0  # An evaluation.
  assert clock.seconds() == 2.0
  clock.start()
  clock.start()  # Already running: no effect.
  now[0] = 103.0
  assert clock.seconds() == 5.0
