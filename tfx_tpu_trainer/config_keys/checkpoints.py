"""The keys of checkpoints: where, how often, how many, and a warm start."""

import dataclasses
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['save_checkpoints_steps', 'CheckpointKeys']

WARM_START_KEYS = ('vars_to_warm_start', 'var_name_to_prev_var_name')


def save_checkpoints_steps(every: Optional[int],
                            steps: Optional[int]) -> Optional[int]:
  """save_checkpoints_steps, which eval_every_steps sets (evals need one)."""
  if every is None:
    return steps
  if steps is not None and steps != every:
    raise declare.ConfigError(
        f"custom_config['eval_every_steps']={every} and "
        f"['save_checkpoints_steps']={steps} differ: an evaluation reads a "
        'checkpoint, so eval_every_steps sets save_checkpoints_steps. Drop '
        'save_checkpoints_steps, or give both the same value.')
  return every


def _checkpoint_dir(value: Any) -> Optional[str]:
  """An absolute path or a URI: the directory of resumable checkpoints."""
  value = checks.optional_str('checkpoint_dir', value)
  if value is not None and not (checks.is_uri(value) or os.path.isabs(value)):
    raise declare.ConfigError(
        f"custom_config['checkpoint_dir']={value!r} is a relative path, which "
        'would resolve against the working directory of whichever process '
        'runs the step. Give an absolute path or a URI (e.g. '
        'gs://bucket/checkpoints).')
  return value


def _regex(key: str, value: Any) -> str:
  if not isinstance(value, str) or not value:
    raise declare.ConfigError(
        f'custom_config[{key!r}] must hold non-empty regular expressions '
        f'(strings), got {value!r}.')
  try:
    re.compile(value)
  except re.error as e:
    raise declare.ConfigError(
        f'custom_config[{key!r}]: {value!r} is not a regular expression: '
        f'{e}.') from e
  return value


def _vars_to_warm_start(key: str,
                        value: Any) -> Union[None, str, Tuple[str, ...]]:
  """A regex over trainable variables, or a list of regex scopes (all)."""
  if value is None:
    return None
  if isinstance(value, (list, tuple)):
    if not value:
      raise declare.ConfigError(
          f'custom_config[{key!r}] is an empty list, which warm-starts '
          'nothing; leave the key out to warm-start every trainable variable.')
    return tuple(_regex(key, v) for v in value)
  return _regex(key, value)


def _var_renames(key: str, value: Any) -> Dict[str, str]:
  if value is None:
    return {}
  if not isinstance(value, Mapping) or not all(
      isinstance(k, str) and k and isinstance(v, str) and v
      for k, v in value.items()):
    raise declare.ConfigError(
        f'custom_config[{key!r}] must map variable names of this model to '
        'their names in the base model (non-empty strings), got '
        f'{value!r}.')
  return dict(value)


@dataclasses.dataclass(frozen=True)
class CheckpointKeys:
  """Checkpoints: where they live, how often and how many; a warm start.

  Attributes:
    checkpoint_dir: where resumable checkpoints live.
    save_checkpoints_steps: checkpoint frequency in steps.
    keep_checkpoint_max: how many checkpoints are kept.
    vars_to_warm_start: which variables start from the base model.
    var_name_to_prev_var_name: renamed variables' names in the base model.
  """
  checkpoint_dir: Optional[str] = declare.key(
      None, check=lambda k, v: _checkpoint_dir(v),
      shown_default='`<pipeline root>/_checkpoints`',
      help='where resumable checkpoints live: an absolute path or a URI '
      '(e.g. `gs://...`)')
  save_checkpoints_steps: Optional[int] = declare.key(
      None, check=checks.optional_positive_int,
      shown_default='estimator default',
      help='checkpoint frequency in steps')
  keep_checkpoint_max: Optional[int] = declare.key(
      None, check=checks.optional_non_negative_int,
      shown_default='estimator default (5)',
      help='checkpoint retention (`0` keeps every checkpoint, as in '
      'TensorFlow)')
  vars_to_warm_start: Union[None, str, Tuple[str, ...]] = declare.key(
      None, check=_vars_to_warm_start,
      shown_default='every trainable variable',
      help='with a `base_model` input: which variables start from it (a '
      'regular expression, or a list of them)')
  var_name_to_prev_var_name: Mapping[str, str] = declare.key(
      check=_var_renames, default_factory=dict, shown_default='`{}`',
      help='with a `base_model` input: `{name in this model: name in the '
      'base model}` of renamed variables')

  def check_warm_start(self, has_base_model: bool) -> None:
    """The warm-start keys select from a base model: one must be given."""
    given = [key for key in WARM_START_KEYS if getattr(self, key)]
    if given and not has_base_model:
      named = ' and '.join(f'custom_config[{key!r}]' for key in given)
      raise declare.ConfigError(
          f'{named} select variables of the base model to '
          'warm-start from, but the TPUTrainer has no base_model input. Pass '
          'base_model=<a Model channel> (e.g. a Resolver of the latest '
          'blessed model), or drop the key(s).')
