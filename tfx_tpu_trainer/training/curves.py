"""Training curves as summaries: the loss to the last step, the speed alone."""

import math
import time
from typing import Optional

import tensorflow as tf

from tfx_tpu_trainer.training import step_fetch

__all__ = ['LOSS_TAG', 'STEP_RATE_TAG', 'EXAMPLE_RATE_TAG']

# The curves the trainer writes beside the estimator's: the loss at the
# summary cadence to the last step, and one training speed over training
# time without evaluations (publishing/training_report.py plots them).
LOSS_TAG = 'training/loss'
STEP_RATE_TAG = 'training/steps_per_sec'
EXAMPLE_RATE_TAG = 'training/examples_per_sec'
# TensorBoard's summary cadence (RunConfig.save_summary_steps), and the
# fewest intervals a short training is cut into.
DEFAULT_CADENCE_STEPS = 100
MIN_POINTS = 10


def cadence_steps(train_steps: int,
                  summary_steps: Optional[int] = None) -> int:
  """Steps between two points: the summary cadence, shorter for short runs."""
  summary_steps = summary_steps or DEFAULT_CADENCE_STEPS
  return max(1, min(summary_steps, math.ceil(train_steps / MIN_POINTS)))


class TrainingClock:
  """Seconds spent training: sessions' runs, saves and evaluations left out.

  `start` when a training session starts or a step runs, `stop` when a
  checkpoint save begins (`saving_listener`) or a session ends.
  """

  def __init__(self, clock=time.monotonic):
    self._clock = clock
    self._seconds = 0.0
    self._since = None

  def start(self) -> None:
    if self._since is None:
      self._since = self._clock()

  def stop(self) -> None:
    if self._since is not None:
      self._seconds += self._clock() - self._since
      self._since = None

  def seconds(self) -> float:
    """Training seconds so far."""
    running = 0.0 if self._since is None else self._clock() - self._since
    return self._seconds + running

  def saving_listener(self) -> tf.compat.v1.train.CheckpointSaverListener:
    """Stops the clock as each save begins (evaluations follow saves)."""
    return _StopAtSave(self)


class _StopAtSave(tf.compat.v1.train.CheckpointSaverListener):

  def __init__(self, training_clock: TrainingClock):
    self._training_clock = training_clock

  def before_save(self, session, global_step_value):
    del session, global_step_value
    self._training_clock.stop()


class CurvesHook(tf.compat.v1.train.SessionRunHook):
  """Writes the loss and the training speed every `cadence` steps."""

  def __init__(self, model_dir: str, train_steps: int, batch_size: int,
               training_clock: TrainingClock, cadence: int):
    self._model_dir = model_dir
    self._train_steps = train_steps
    self._batch_size = batch_size
    self._training_clock = training_clock
    self._cadence = cadence
    self._fetch = step_fetch.StepFetch()
    self._writer = None
    self._next_point = 0
    self._last_point = None  # (step, training seconds) of the last point.

  def begin(self):
    self._fetch.begin()
    self._writer = tf.compat.v1.summary.FileWriterCache.get(self._model_dir)

  def after_create_session(self, session, coord):
    del coord
    # The first run writes a point. A rate spans sessions (the alternating
    # schedule's, one per evaluation): the clock leaves out what lies
    # between them.
    self._next_point = self._fetch.start(session)
    self._training_clock.start()

  def before_run(self, run_context):
    del run_context
    self._training_clock.start()
    reach = self._fetch.reach()
    if reach < self._next_point and reach < self._train_steps:
      return None
    return self._fetch.run_args()

  def after_run(self, run_context, run_values):
    del run_context
    step = self._fetch.fetched(run_values.results)
    if step is None or (step < self._next_point and step < self._train_steps):
      return
    self._next_point = (step // self._cadence + 1) * self._cadence
    self._write(step, run_values.results.get('loss'))

  def end(self, session):
    del session
    self._training_clock.stop()
    self._writer.flush()

  def _write(self, step: int, loss) -> None:
    values = []
    if loss is not None and math.isfinite(float(loss)):
      values.append(_value(LOSS_TAG, float(loss)))
    seconds = self._training_clock.seconds()
    if self._last_point is not None:
      last_step, last_seconds = self._last_point
      if step > last_step and seconds > last_seconds:
        steps_per_sec = (step - last_step) / (seconds - last_seconds)
        values.append(_value(STEP_RATE_TAG, steps_per_sec))
        values.append(_value(EXAMPLE_RATE_TAG,
                             steps_per_sec * self._batch_size))
    self._last_point = (step, seconds)
    if values:
      self._writer.add_summary(tf.compat.v1.Summary(value=values), step)


def _value(tag: str, number: float) -> tf.compat.v1.Summary.Value:
  return tf.compat.v1.Summary.Value(tag=tag, simple_value=number)
