"""The keys of the training schedule: loops, evaluations and progress."""

import dataclasses
import re
from typing import Any, Optional, Union

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['AUTO', 'EVAL_STRATEGIES', 'HOST_LOOP_END_KEYS', 'ScheduleKeys']

# `host_iterations_per_loop`: the library picks the loop length off TPU
# (training/host_loop.py).
AUTO = 'auto'
EVAL_STRATEGIES = ('train_and_evaluate', 'alternate')
# Config keys whose step counts host loops must end at (an automatic loop
# divides each one that is set). A key that sets checkpoint or evaluation
# steps belongs here.
HOST_LOOP_END_KEYS = ('save_checkpoints_steps',)


def _auto_or_positive_int(key: str, value: Any) -> Any:
  if value == AUTO:
    return value
  return checks.positive_int(key, value, f'{AUTO!r} or a positive integer')


# `iterations_per_loop` as a time, the form TPUConfig accepts
# (tensorflow_estimator's tpu/util.py): a positive integer without leading
# zeros and a unit, seconds, minutes or hours ("300s", "5m", "1h").
_LOOP_TIME = re.compile(r'^[1-9][0-9]*[smh]$')


def _steps_or_time(key: str, value: Any) -> Union[int, str]:
  """A positive step count, or a time such as "300s", "5m" or "1h"."""
  if isinstance(value, str):
    if not _LOOP_TIME.match(value):
      raise declare.ConfigError(
          f'custom_config[{key!r}]={value!r} is not a time TPUConfig '
          'accepts: give a positive integer of steps, or of seconds, minutes '
          'or hours with its unit and no space or sign (e.g. "300s", "5m", '
          '"1h").')
    checks.check_int64(key, int(value[:-1]) * {'s': 1, 'm': 60, 'h': 3600}[
        value[-1]])
    return value
  return checks.positive_int(key, value, 'a positive integer (steps) or a time '
                       'such as "300s", "5m" or "1h"')


@dataclasses.dataclass(frozen=True)
class ScheduleKeys:
  """The schedule: steps per session call, when to evaluate, progress.

  Attributes:
    iterations_per_loop: steps (or a time) per TPU session call.
    host_iterations_per_loop: steps per session call off TPU, or `auto`.
    eval_strategy: `train_and_evaluate` or `alternate`.
    eval_every_steps: evaluate every N training steps.
    show_progress: live progress while training.
  """
  iterations_per_loop: Union[int, str] = declare.key(
      100, check=_steps_or_time,
      help='training steps per TPU session call, or a time per call '
      '(`"300s"`, `"5m"`, `"1h"`)')
  host_iterations_per_loop: Union[str, int] = declare.key(
      AUTO, check=_auto_or_positive_int,
      help='off TPU: training steps per session call in an in-graph loop; '
      '`auto` picks it, `1`: no loop')
  eval_strategy: str = declare.key(
      'train_and_evaluate',
      check=lambda k, v: checks.choice(k, v, EVAL_STRATEGIES),
      help='`alternate`: `train(max_steps)` / `evaluate(steps)` in turns, a '
      'cycle per `save_checkpoints_steps`')
  eval_every_steps: Optional[int] = declare.key(
      None, check=checks.optional_positive_int, shown_default='none',
      help='evaluate every N training steps (sets `save_checkpoints_steps` '
      'to N)')
  show_progress: bool = declare.key(
      True, check=checks.boolean,
      help='live progress: a bar on a terminal, a log line every 15 s '
      'elsewhere')
