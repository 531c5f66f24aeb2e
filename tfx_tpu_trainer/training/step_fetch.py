"""The global step and the loss, fetched on the runs that need them only."""

from typing import Any, Mapping, Optional

import tensorflow as tf

from tfx_tpu_trainer.training import host_loop


class StepFetch:
  """What a hook fetches, the step at its last fetch, and the runs' pace.

  A hook calls `begin` in its own `begin`, `start` when a session is made,
  `reach` in each `before_run` (the step the run may end at), and `fetched`
  in `after_run`; between fetches the step is foreseen from the steps the
  runs between two fetches took.
  """

  def __init__(self):
    self.fetches = None
    self.step = None  # At the last fetch.
    self._runs = 0  # Since the last fetch.
    self._steps_per_run = 1.0

  def begin(self) -> None:
    # The step as the estimator's own hooks read it: in a host loop
    # (host_loop.py) the step after the run's loop, which a plain read of the
    # variable would race (and see the step before it).
    reads = tf.compat.v1.get_collection(host_loop.GLOBAL_STEP_READ_KEY)
    global_step = (reads[0] if len(reads) == 1 else
                   tf.compat.v1.train.get_global_step())
    self.fetches = {'step': global_step}
    losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
    if losses:
      self.fetches['loss'] = losses[-1]

  def start(self, session: tf.compat.v1.Session) -> int:
    """Reads the step a new session starts at."""
    self.step = self.read_step(session)
    self._runs = 0
    return self.step

  def read_step(self, session: tf.compat.v1.Session) -> int:
    """The step now, the loss left alone (running it would train a batch)."""
    return int(session.run(self.fetches['step']))

  def reach(self) -> float:
    """Counts a run; the step it may end at, with a run of margin.

    The step fetched with a run may be read before the run's steps (as
    StopAtStepHook notes): the margin keeps the last run from being missed.
    """
    self._runs += 1
    return self.step + (self._runs + 1) * self._steps_per_run

  def run_args(self) -> tf.compat.v1.train.SessionRunArgs:
    return tf.compat.v1.train.SessionRunArgs(self.fetches)

  def fetched(self, results: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The step a run's fetch read (None when the run fetched nothing)."""
    if results is None:
      return None
    step = int(results['step'])
    if step > self.step:
      self._steps_per_run = (step - self.step) / self._runs
    self.step, self._runs = step, 0
    return step
