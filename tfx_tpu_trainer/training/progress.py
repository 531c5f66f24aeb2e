"""Training progress: a tqdm bar on a terminal, periodic lines elsewhere."""

import contextlib
import datetime
import io
import math
import os
import sys
import time
from typing import Any, Callable, Iterator, Mapping, Optional, TextIO

from absl import logging
import tensorflow as tf
import tqdm

from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.training import step_fetch

__all__ = ['TERMINAL_INTERVAL_SECS', 'LINE_INTERVAL_SECS', 'EXPORTER_NAME',
           'console', 'format_metrics', 'ProgressReporter', 'ProgressHook',
           'EvaluationReporter']

# How often a terminal bar is redrawn, and how often a plain line is written.
TERMINAL_INTERVAL_SECS = 0.5
LINE_INTERVAL_SECS = 15.0
# The weight of the newest interval in the smoothed rate.
_RATE_SMOOTHING = 0.3
EXPORTER_NAME = 'tfx_tpu_trainer_progress'
# The bar without tqdm's own rate and time left (they count evaluations):
# the postfix carries the one rate and the ETA.
_BAR_FORMAT = ('{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} '
               '[{elapsed}{postfix}]')
# The narrowest bar drawn: on a narrow terminal the postfix gets shorter
# (examples/s, then the rate, then the loss left out) rather than cut.
_MIN_BAR_COLUMNS = 3

# Where progress goes when no stream is given: set by `console()`.
_console: Optional[TextIO] = None


@contextlib.contextmanager
def console(stream: TextIO) -> Iterator[None]:
  """Sends progress of trainings run inside the block to `stream`.

  For a program that sends its stdout/stderr to a log file and keeps the
  terminal for its own lines (`tfx-tpu-trainer run`).

  Args:
    stream: the console; a bar when it is a terminal, plain lines otherwise.

  Yields:
    Nothing.
  """
  global _console
  saved, _console = _console, stream
  try:
    yield
  finally:
    _console = saved


def format_metrics(metrics: Mapping[str, Any]) -> str:
  """`name=value, ...` of the scalar metrics, sorted; the step left out."""
  parts = []
  for name, value in sorted(metrics.items()):
    if name == tf.compat.v1.GraphKeys.GLOBAL_STEP:
      continue
    try:
      number = float(value)
    except (TypeError, ValueError):
      continue
    parts.append(f'{name}={number:.4g}')
  return ', '.join(parts)


def _duration(seconds: Optional[float]) -> str:
  if seconds is None or not math.isfinite(seconds):
    return '?'
  return str(datetime.timedelta(seconds=int(round(seconds))))


class ProgressReporter:
  """Shows one training's progress: a bar or lines, and evaluation lines.

  Attributes:
    train_steps: the global step training ends at.
    batch_size: the global training batch size (for examples/s).
  """

  def __init__(self, train_steps: int, batch_size: int,
               stream: Optional[TextIO] = None,
               clock=time.monotonic,
               training_clock: Optional[curves.TrainingClock] = None):
    self.train_steps = train_steps
    self.batch_size = batch_size
    self._explicit_stream = stream or _console
    self._stream = self._explicit_stream or sys.stderr
    self._terminal = _is_terminal(self._stream)
    self._clock = clock
    # Rates count training time only: the clock the CurvesHook stops for
    # evaluations (without one, all the time since the start).
    self._training_clock = training_clock or curves.TrainingClock(clock)
    self._bar = None
    self._first = None  # (time, step) when the first session started.
    self._last = None  # (training seconds, step) of the last update.
    self._last_time = None  # The clock at the last update.
    self._steps_per_sec = None
    self._last_is_start = False
    self._loss = None
    self._last_line = -math.inf
    self._last_line_step = None  # The step of the last progress line.

  @property
  def interval_secs(self) -> float:
    """How often the hook should fetch the step and the loss."""
    return TERMINAL_INTERVAL_SECS if self._terminal else LINE_INTERVAL_SECS

  def hook(self) -> 'ProgressHook':
    """A SessionRunHook that feeds this reporter (one per `train` call)."""
    return ProgressHook(self)

  def exporter(self) -> 'EvaluationReporter':
    """An Exporter that reports each evaluation of `train_and_evaluate`."""
    return EvaluationReporter(self)

  def start(self, step: int) -> None:
    """Training (re)starts at `step`."""
    now = self._clock()
    self._training_clock.start()
    if self._first is None:
      self._first = (now, step)
      if self._terminal:
        self._bar = tqdm.tqdm(
            total=self.train_steps, initial=step, unit='step',
            file=self._stream, dynamic_ncols=True, mininterval=0,
            bar_format=_BAR_FORMAT, desc='Training')
    self._last = (self._training_clock.seconds(), step)
    self._last_time = now
    self._last_is_start = True

  def update(self, step: int, loss: Optional[float],
             final: bool = False) -> None:
    """Training has reached `step` with `loss`."""
    now = self._clock()
    if self._last is None:
      self.start(step)
    last_seconds, last_step = self._last
    seconds = self._training_clock.seconds()
    # Not from the session's start (its start-up); evaluations are not in
    # the training clock's seconds.
    if not self._last_is_start and seconds > last_seconds and step > last_step:
      rate = (step - last_step) / (seconds - last_seconds)
      self._steps_per_sec = (
          rate if self._steps_per_sec is None else
          _RATE_SMOOTHING * rate +
          (1 - _RATE_SMOOTHING) * self._steps_per_sec)
    self._last_is_start = False
    self._last = (seconds, step)
    self._last_time = now
    if loss is not None:
      self._loss = loss
    if self._bar is not None:
      self._bar.set_postfix_str(self._postfix(step, self._fits_bar(step)),
                                refresh=False)
      self._bar.update(max(0, step - self._bar.n))
    if step == self._last_line_step:
      return  # The last line said it (a session's end after its last run).
    if final or now - self._last_line >= LINE_INTERVAL_SECS:
      self._last_line = now
      self._last_line_step = step
      self._line(self.progress_line(step))

  def progress_line(self, step: int) -> str:
    """`step S/T (P%), R steps/s (E examples/s), loss L, ETA H:MM:SS`.

    The rate and the ETA appear once a rate is known, the loss once one was
    fetched.
    """
    percent = 100.0 * step / self.train_steps if self.train_steps else 100.0
    postfix = self._postfix(step)
    return (f'Training: step {step}/{self.train_steps} ({percent:.0f}%)' +
            (f', {postfix}' if postfix else ''))

  def evaluation(self, metrics: Mapping[str, Any]) -> None:
    """Prints a line for an evaluation's metrics."""
    step = metrics.get(tf.compat.v1.GraphKeys.GLOBAL_STEP, '?')
    self._line(f'Evaluation at step {step}: {format_metrics(metrics)}',
               always_to_stream=True)

  def close(self) -> None:
    """Ends the bar (training is over or failed)."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    if self._first is not None and self._last is not None:
      (start, first_step), (seconds, last_step) = self._first, self._last
      logging.info('Training progress: steps %d to %d in %s (%s training).',
                   first_step, last_step, _duration(self._last_time - start),
                   _duration(seconds))

  def _postfix(self, step: int,
               fits: Callable[[str], bool] = lambda postfix: True) -> str:
    """`R steps/s (E examples/s), loss L, ETA H:MM:SS`, the known parts.

    The longest form that `fits`: without the examples/s, then without the
    rate, then without the loss.
    """
    rate = examples = loss = eta = ''
    if self._steps_per_sec:
      rate = f'{_rate(self._steps_per_sec)} steps/s'
      examples = (f' ({self._steps_per_sec * self.batch_size:,.0f} '
                  'examples/s)')
      eta = f'ETA {_duration(self._eta(step))}'
    if self._loss is not None:
      loss = f'loss {self._loss:.4g}'
    forms = [(rate + examples, loss, eta), (rate, loss, eta), (loss, eta),
             (eta,)]
    postfixes = [', '.join(part for part in form if part) for form in forms]
    return next((p for p in postfixes if fits(p)), postfixes[-1])

  def _fits_bar(self, step: int) -> Callable[[str], bool]:
    """Whether a postfix leaves the bar line whole on the terminal's width."""
    state = dict(self._bar.format_dict, n=step)
    columns = state.get('ncols')

    def fits(postfix: str) -> bool:
      if not columns:
        return True
      line = tqdm.tqdm.format_meter(**dict(
          state, postfix=postfix, ncols=None,
          bar_format=_BAR_FORMAT.replace('{bar}', '')))
      return len(line) + _MIN_BAR_COLUMNS <= columns

    return fits

  def _eta(self, step: int) -> float:
    """The time left at the pace so far, evaluations and saves included.

    (The rate shown leaves them out; the time left has them to come.)
    """
    (start, first_step), now = self._first, self._last_time
    if step <= first_step or now <= start:
      return max(0, self.train_steps - step) / self._steps_per_sec
    return (max(0, self.train_steps - step) * (now - start) /
            (step - first_step))

  def _line(self, text: str, always_to_stream: bool = False) -> None:
    """Logs `text`; shows it too unless it is a progress line under a bar."""
    logging.info('%s', text)
    if self._bar is not None:
      if always_to_stream:
        self._bar.write(text, file=self._stream)
    elif self._explicit_stream is not None and (always_to_stream or
                                                not self._terminal):
      print(text, file=self._explicit_stream, flush=True)


class ProgressHook(tf.compat.v1.train.SessionRunHook):
  """Fetches the global step and the loss every `interval_secs`, no oftener.

  Besides: on the first run of a session (the loss from the start) and on
  the run expected to be the last (the final loss), which it foresees from
  the steps the runs between two fetches took. Other runs fetch nothing.
  """

  def __init__(self, reporter: ProgressReporter, clock=time.monotonic):
    self._reporter = reporter
    self._clock = clock
    self._next_fetch = 0.0
    self._fetch = step_fetch.StepFetch()

  def begin(self):
    self._fetch.begin()

  def after_create_session(self, session, coord):
    del coord
    self._reporter.start(self._fetch.start(session))
    self._next_fetch = 0.0  # The first run fetches.

  def before_run(self, run_context):
    del run_context
    if (self._fetch.reach() < self._reporter.train_steps and
        self._clock() < self._next_fetch):
      return None
    return self._fetch.run_args()

  def after_run(self, run_context, run_values):
    del run_context
    step = self._fetch.fetched(run_values.results)
    if step is None:
      return
    self._next_fetch = self._clock() + self._reporter.interval_secs
    self._reporter.update(step, _float(run_values.results.get('loss')))

  def end(self, session):
    # The step only: running the loss again would compute another batch (in
    # a host loop, train another loop); the last fetched loss stands.
    self._reporter.update(self._fetch.read_step(session), None, final=True)


class EvaluationReporter(tf.estimator.Exporter):
  """An Exporter that exports nothing and reports the evaluation's metrics."""

  def __init__(self, reporter: ProgressReporter):
    self._reporter = reporter

  @property
  def name(self) -> str:
    return EXPORTER_NAME

  def export(self, estimator, export_path, checkpoint_path, eval_result,
             is_the_final_export):
    del estimator, export_path, checkpoint_path, is_the_final_export
    self._reporter.evaluation(eval_result or {})
    return None


def _float(value) -> Optional[float]:
  if value is None:
    return None
  try:
    return float(value)
  except (TypeError, ValueError):
    return None


def _rate(steps_per_sec: float) -> str:
  return (f'{steps_per_sec:,.0f}' if steps_per_sec >= 100 else
          f'{steps_per_sec:.3g}')


def _is_terminal(stream) -> bool:
  """A terminal a bar can be drawn on: one that reports its size.

  A terminal of 0 columns or 0 rows (`script` started from a non-terminal)
  makes tqdm draw nothing at all: it gets the plain lines.
  """
  try:
    if not stream.isatty():
      return False
  except (AttributeError, ValueError):  # No isatty, or a closed stream.
    return False
  try:
    size = os.get_terminal_size(stream.fileno())
  except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
    return True  # A terminal without a descriptor (a test's, a notebook's).
  return size.columns > 0 and size.lines > 0
