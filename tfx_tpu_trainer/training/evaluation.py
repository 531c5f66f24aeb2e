"""The final evaluation a published model carries.

`train_and_evaluate` returns no metrics when training had nothing left to
do (a retry after the final checkpoint) nor in a distributed run, so the
final checkpoint is then evaluated here.
"""

import math
from typing import Any, Dict, Mapping, Optional

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.slice import cluster
from tfx_tpu_trainer.training import checkpoints

EVAL_NAME = 'eval'


class NonFiniteMetricsError(errors.TPUTrainerError, ValueError):
  """The final evaluation produced NaN or infinite metrics."""


def final_metrics(estimator: tf.compat.v1.estimator.tpu.TPUEstimator,
                  config: config_lib.TrainerConfig,
                  eval_input_fn: Any,
                  eval_steps: Optional[int],
                  metrics: Optional[Mapping[str, Any]]
                 ) -> Optional[Dict[str, Any]]:
  """The metrics of the final checkpoint, evaluated again when missing.

  Args:
    estimator: the trained estimator.
    config: the validated trainer config.
    eval_input_fn: evaluation input.
    eval_steps: evaluation steps (None: the whole eval split).
    metrics: what training returned (None or {} when it did not evaluate).

  Returns:
    The metrics; None on a task that does not publish (worker, evaluator).

  Raises:
    NonFiniteMetricsError: a metric is NaN or infinite and
      `allow_nonfinite_metrics` is false.
  """
  if not cluster.is_chief():
    return None
  final_step = checkpoints.latest_step(estimator.model_dir)
  recorded_step = (metrics or {}).get(tf.compat.v1.GraphKeys.GLOBAL_STEP)
  if not metrics or recorded_step is None or recorded_step < final_step:
    logging.info('No evaluation of the final checkpoint (step %d) was '
                 'recorded (got %s); evaluating it now.', final_step, metrics)
    metrics = estimator.evaluate(eval_input_fn, steps=eval_steps,
                                 name=EVAL_NAME)
  metrics = dict(metrics)
  if not config.allow_nonfinite_metrics:
    check_finite(metrics)
  return metrics


def check_finite(metrics: Mapping[str, Any]) -> None:
  """Raises NonFiniteMetricsError when a scalar metric is NaN or infinite."""
  bad = {}
  for name, value in metrics.items():
    try:
      number = float(value)
    except (TypeError, ValueError):
      continue  # Not a scalar: not recorded either.
    if not math.isfinite(number):
      bad[name] = number
  if bad:
    raise NonFiniteMetricsError(
        f'The final evaluation (step '
        f'{metrics.get(tf.compat.v1.GraphKeys.GLOBAL_STEP)}) produced '
        f'non-finite metrics {bad}, so no model was published. Check the '
        'eval split for NaN/inf feature or label values and the eval loss '
        'and metric_fn of the module for divisions by zero or log(0); to '
        "publish such a model anyway set custom_config['allow_nonfinite_"
        "metrics']=true.")
