"""Reads the step rates that estimators write to their TensorBoard events.

StepCounterHook writes `global_step/sec` every `log_step_count_steps`
steps; TPUEstimator's ExamplesPerSecondHook every
`ceil(log_step_count_steps / iterations_per_loop)` session runs, which off a
TPU is one step each. So samples are merged into windows of at least
`WINDOW_STEPS` steps before a run's median rate is taken.
"""

import dataclasses
import os
import statistics
from typing import Iterable, List, Optional, Sequence

STEP_RATE_TAG = 'global_step/sec'
EVENT_FILE_MARKER = 'events.out.tfevents.'
WINDOW_STEPS = 100
# The step at which StepCounterHook starts its clock.
FIRST_COUNTED_STEP = 1


@dataclasses.dataclass(frozen=True)
class ScalarEvent:
  """One scalar value of an event file."""
  path: str
  step: int
  wall_time: float
  value: float


def event_files(model_dir: str) -> List[str]:
  """All TensorBoard event files under `model_dir` (recursively), sorted."""
  found = []
  for root, _, files in os.walk(model_dir):
    found.extend(
        os.path.join(root, name) for name in files if EVENT_FILE_MARKER in name)
  return sorted(found)


def read_scalars(path: str, tag: Optional[str] = None) -> List[ScalarEvent]:
  """The scalar summaries of one event file (all tags, or only `tag`).

  Reads both v1 `simple_value` scalars (what estimator hooks write) and v2
  tensor scalars (what `tf.summary.scalar` writes).

  Args:
    path: an event file.
    tag: keep only this tag; None keeps every scalar.

  Returns:
    The scalars in file order.
  """
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  # pylint: enable=g-import-not-at-top
  scalars = []
  for event in tf.compat.v1.train.summary_iterator(path):
    for value in event.summary.value:
      if tag is not None and value.tag != tag:
        continue
      if value.HasField('simple_value'):
        number = float(value.simple_value)
      elif value.HasField('tensor') and not value.tensor.tensor_shape.dim:
        array = tf.make_ndarray(value.tensor)
        if not (np.issubdtype(array.dtype, np.number) or
                array.dtype == np.bool_):
          continue  # e.g. the string `checkpoint_path` of evaluations.
        number = float(array)
      else:
        continue
      scalars.append(ScalarEvent(path, int(event.step), event.wall_time,
                                 number))
  return scalars


def step_rates(model_dir: str) -> List[ScalarEvent]:
  """The `global_step/sec` samples under `model_dir`, in wall-time order."""
  samples = []
  for path in event_files(model_dir):
    samples.extend(read_scalars(path, STEP_RATE_TAG))
  return sorted(samples, key=lambda sample: (sample.wall_time, sample.step))


def training_window(model_dir: str) -> Optional[tuple]:
  """(first, last) wall time of any scalar in the files that hold step rates.

  Those are the training event files (evaluation writes to its own
  sub-directory). The first scalar is written after the first training step,
  the last one at or near the final step.

  Args:
    model_dir: the estimator's model directory.

  Returns:
    (first_wall_time, last_wall_time), or None without step-rate files.
  """
  times = []
  for path in {sample.path for sample in step_rates(model_dir)}:
    times.extend(scalar.wall_time for scalar in read_scalars(path))
  if not times:
    return None
  return min(times), max(times)


def last_eval_time(model_dir: str) -> Optional[float]:
  """The wall time of the last scalar outside the training event files.

  Evaluation writes its metrics to its own sub-directory when it finishes,
  so this is when the final evaluation ended.

  Args:
    model_dir: the estimator's model directory.

  Returns:
    The wall time, or None without such scalars.
  """
  training_files = {sample.path for sample in step_rates(model_dir)}
  times = [
      scalar.wall_time
      for path in event_files(model_dir) if path not in training_files
      for scalar in read_scalars(path)
  ]
  return max(times) if times else None


def window_rates(samples: Sequence[ScalarEvent],
                 window_steps: int = WINDOW_STEPS) -> List[float]:
  """Merges step-rate samples into windows of at least `window_steps` steps.

  A sample covers the steps since the previous sample and took
  `steps / rate` seconds. The hooks start counting at global step 1 (their
  first trigger records a time and writes nothing), so the first sample
  covers the steps since step 1.

  Args:
    samples: `global_step/sec` samples in order (see `step_rates`).
    window_steps: the minimum steps per window; samples already that far
      apart make one window each. A trailing partial window is dropped
      unless there is no other.

  Returns:
    The steps/s of each window, in order.
  """
  rates = []
  previous_step = FIRST_COUNTED_STEP
  steps = 0
  seconds = 0.0
  for sample in samples:
    elapsed_steps = sample.step - previous_step
    previous_step = sample.step
    if elapsed_steps <= 0 or sample.value <= 0:
      continue
    steps += elapsed_steps
    seconds += elapsed_steps / sample.value
    if steps >= window_steps:
      rates.append(steps / seconds)
      steps, seconds = 0, 0.0
  if steps and not rates:
    rates.append(steps / seconds)
  return rates


def rate_after_step(samples: Sequence[Sequence[float]],
                    after_step: int) -> Optional[float]:
  """Steps/s over the `[step, steps/s]` samples of steps past `after_step`.

  A sample covers the steps since the previous sample; only samples whose
  previous one is at or past `after_step` count.

  Args:
    samples: `[step, steps_per_sec]` pairs in step order.
    after_step: the last step not to count (e.g. a first epoch's).

  Returns:
    The steps/s of those steps, or None when no sample covers them.
  """
  steps, seconds = 0, 0.0
  for (previous, _), (step, rate) in zip(samples, samples[1:]):
    if previous >= after_step and step > previous and rate > 0:
      steps += step - previous
      seconds += (step - previous) / rate
  return steps / seconds if seconds else None


def median_after_warmup(values: Sequence[float], warmup: int = 1) -> float:
  """The median of `values` without the first `warmup` ones.

  Args:
    values: samples in the order they were taken.
    warmup: how many leading samples to drop (kept when nothing else is left).

  Returns:
    The median.

  Raises:
    ValueError: when `values` is empty.
  """
  if not values:
    raise ValueError('No samples to take the median of.')
  kept = list(values[warmup:]) or list(values)
  return statistics.median(kept)


def median(values: Iterable[float]) -> Optional[float]:
  """The median, or None for no values (None values are skipped)."""
  kept = [value for value in values if value is not None]
  return statistics.median(kept) if kept else None
