"""Scalar series read from a training's TensorBoard event files.

A series keeps one value per step, the last written (a resumed run or a
repeated final evaluation writes a step twice); unreadable files and
non-finite values are described, never raised.
"""

import dataclasses
import math
import os
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

EVENT_FILE_PATTERN = 'events.out.tfevents.*'

Series = List[Tuple[int, float]]


@dataclasses.dataclass
class Scalars:
  """The scalar series of one directory's event files.

  Attributes:
    directory: where the event files were looked for.
    series: tag -> [(step, value)] sorted by step, finite values only.
    problems: sentences naming what could not be read or was left out.
    first_wall_time: the wall time of the first event read (None if none).
    last_wall_time: the wall time of the last event read (None if none).
  """
  directory: str
  series: Dict[str, Series] = dataclasses.field(default_factory=dict)
  problems: List[str] = dataclasses.field(default_factory=list)
  first_wall_time: float = None
  last_wall_time: float = None


def read_scalars(directory: str) -> Scalars:
  """Reads every scalar summary of the event files directly in `directory`.

  Args:
    directory: a model directory or an `eval_<name>` directory.

  Returns:
    The series and what was missing (never raises for unreadable files).
  """
  result = Scalars(directory)
  try:
    paths = sorted(tf.io.gfile.glob(os.path.join(directory,
                                                 EVENT_FILE_PATTERN)))
  except tf.errors.OpError as e:
    result.problems.append(f'Could not list {directory}: {e.message}')
    return result
  if not paths:
    result.problems.append(f'No event files in {directory}.')
    return result
  values: Dict[str, Dict[int, float]] = {}
  nonfinite: Dict[str, List[int]] = {}
  for path in paths:
    _read_file(path, values, nonfinite, result)
  for tag, by_step in sorted(values.items()):
    result.series[tag] = sorted(by_step.items())
  for tag, steps in sorted(nonfinite.items()):
    result.problems.append(
        f'{tag}: {len(steps)} non-finite value(s) (NaN or infinity) at '
        f'step(s) {_steps_text(steps)} left out of the plot.')
  return result


def _read_file(path: str, values: Dict[str, Dict[int, float]],
               nonfinite: Dict[str, List[int]], result: Scalars) -> None:
  records = 0
  try:
    for event in tf.compat.v1.train.summary_iterator(path):
      records += 1
      if result.first_wall_time is None:
        result.first_wall_time = event.wall_time
      result.last_wall_time = event.wall_time
      for value in event.summary.value:
        number = _scalar(value)
        if number is None:
          continue
        if not math.isfinite(number):
          nonfinite.setdefault(value.tag, []).append(int(event.step))
          continue
        values.setdefault(value.tag, {})[int(event.step)] = number
  except (tf.errors.OpError, OSError, ValueError) as e:
    message = getattr(e, 'message', None) or str(e)
    result.problems.append(
        f'{path} could not be read after {records} record(s) ({message}); '
        'what it held after that is missing.')


def _scalar(value) -> float:
  """The float of a scalar summary value, None for images, histograms..."""
  if value.HasField('simple_value'):
    return float(value.simple_value)
  if value.HasField('tensor'):
    try:
      array = tf.make_ndarray(value.tensor)
    except (TypeError, ValueError):
      return None
    if array.size == 1 and np.issubdtype(array.dtype, np.number):
      return float(array.reshape(()))
  return None


def _steps_text(steps: List[int], most: int = 5) -> str:
  shown = ', '.join(str(step) for step in steps[:most])
  return shown + (f' and {len(steps) - most} more' if len(steps) > most
                  else '')
