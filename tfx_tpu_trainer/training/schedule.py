"""Runs training and evaluation of a TPUEstimator."""

from typing import Any, Dict, Optional

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.slice import cluster
from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.training import evaluation
from tfx_tpu_trainer.training import progress

__all__ = ['train_and_evaluate']

EVAL_NAME = evaluation.EVAL_NAME


def train_and_evaluate(estimator: tf.compat.v1.estimator.tpu.TPUEstimator,
                       config: config_lib.TrainerConfig,
                       train_input_fn: input_fns.InputFn,
                       eval_input_fn: input_fns.InputFn,
                       train_steps: int,
                       eval_steps: Optional[int]) -> Optional[Dict[str, Any]]:
  """Trains to `train_steps` and returns the final evaluation's metrics.

  "train_and_evaluate" runs `tf.estimator.train_and_evaluate`; "alternate"
  runs `train(max_steps)` and `evaluate(steps)` in turns, one cycle per
  `save_checkpoints_steps` (one cycle when unset), which avoids re-initialising
  the TPU system inside training. With `eval_every_steps`, both evaluate at
  every checkpoint (train_and_evaluate: no throttle). The chief writes the
  loss and the training speed (evaluations left out) as summaries
  (curves.py); with `show_progress`, progress.py shows the steps and a line
  per evaluation.

  Args:
    estimator: the TPUEstimator.
    config: the validated trainer config.
    train_input_fn: training input.
    eval_input_fn: evaluation input.
    train_steps: the global step to train to.
    eval_steps: evaluation steps (None: the whole eval split, CPU only).

  Returns:
    The metrics of the final evaluation (evaluation.final_metrics: the final
    checkpoint is evaluated again when training recorded none, and NaN or
    infinite metrics are refused); None where this task does not publish
    (a worker or evaluator of a distributed run).
  """
  training_clock = curves.TrainingClock()
  reporter = (progress.ProgressReporter(train_steps, config.train_batch_size,
                                        training_clock=training_clock)
              if config.show_progress else None)
  hooks = _curves_hooks(estimator, config, train_steps, training_clock)
  hooks += [reporter.hook()] if reporter else []
  try:
    if config.eval_strategy == 'alternate':
      metrics = _alternate(estimator, config, train_input_fn, eval_input_fn,
                           train_steps, eval_steps, reporter, hooks)
    else:
      train_spec = tf_estimator.TrainSpec(
          train_input_fn, max_steps=train_steps, hooks=hooks,
          saving_listeners=[training_clock.saving_listener()])
      eval_spec = tf_estimator.EvalSpec(
          eval_input_fn, steps=eval_steps, name=EVAL_NAME, start_delay_secs=0,
          throttle_secs=_throttle_secs(config),
          exporters=[reporter.exporter()] if reporter else None)
      result = tf_estimator.train_and_evaluate(estimator, train_spec,
                                               eval_spec)
      metrics = result[0] if result else None
  finally:
    if reporter:
      reporter.close()
  return evaluation.final_metrics(estimator, config, eval_input_fn,
                                  eval_steps, metrics)


def _curves_hooks(estimator, config: config_lib.TrainerConfig,
                  train_steps: int, training_clock: curves.TrainingClock):
  """The CurvesHook, on the chief only (the one that writes summaries)."""
  if not estimator.config.is_chief:
    return []
  cadence = curves.cadence_steps(train_steps,
                                 estimator.config.save_summary_steps)
  return [curves.CurvesHook(estimator.model_dir, train_steps,
                            config.train_batch_size, training_clock, cadence)]


def _throttle_secs(config: config_lib.TrainerConfig) -> int:
  """With eval_every_steps, training evaluates every checkpoint it saves.

  An evaluator task keeps its short poll (0 would poll without pause).
  """
  throttle = cluster.eval_throttle_secs()
  if config.eval_every_steps and throttle == cluster.DEFAULT_THROTTLE_SECS:
    return 0
  return throttle


def _alternate(estimator, config, train_input_fn, eval_input_fn, train_steps,
               eval_steps, reporter=None, hooks=None):
  cycle = config.save_checkpoints_steps or train_steps
  current = _global_step(estimator)
  metrics = None
  while current < train_steps:
    target = min(current + cycle, train_steps)
    logging.info('Training from step %d to %d of %d.', current, target,
                 train_steps)
    estimator.train(train_input_fn, max_steps=target, hooks=hooks)
    metrics = estimator.evaluate(eval_input_fn, steps=eval_steps,
                                 name=EVAL_NAME)
    logging.info('Evaluation at step %d: %s', target, metrics)
    if reporter:
      reporter.evaluation(metrics)
    current = target
  if metrics is None:
    metrics = estimator.evaluate(eval_input_fn, steps=eval_steps,
                                 name=EVAL_NAME)
  return metrics


def _global_step(estimator) -> int:
  try:
    return int(estimator.get_variable_value(tf.compat.v1.GraphKeys.GLOBAL_STEP))
  except ValueError:  # No checkpoint yet.
    return 0
