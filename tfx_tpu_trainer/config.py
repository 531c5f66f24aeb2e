"""The `custom_config` schema of TPUTrainer: one typed object and its checks."""

import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from tfx_tpu_trainer import estimator_arguments
from tfx_tpu_trainer.config_keys import checkpoints as checkpoint_keys
from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare
from tfx_tpu_trainer.config_keys import export as export_keys
from tfx_tpu_trainer.config_keys import inputs as input_keys
from tfx_tpu_trainer.config_keys import model as model_keys
from tfx_tpu_trainer.config_keys import schedule as schedule_keys
from tfx_tpu_trainer.config_keys import slice as slice_keys
from tfx_tpu_trainer.config_keys import tpu as tpu_keys
from tfx_tpu_trainer.slice import addresses

__all__ = ['TPU_NAME_ENV', 'GKE_TPU_ENDPOINTS_ENV', 'INPUT_CACHE_MODES',
           'INPUT_SHUFFLE_MODES', 'RESERVED_PARAMS_KEYS', 'AUTO',
           'HOST_LOOP_END_KEYS', 'tpu_entry', 'ConfigError', 'TPUSpec',
           'is_uri', 'CHECK', 'TrainerConfig', 'RUN_PARAMS',
           'check_derived_params']

# TPUEstimator's arguments that are no key, and the params TPUTrainer sets
# from the run (estimator_arguments.py).
KEYS_TAKEN_ELSEWHERE = estimator_arguments.KEYS_TAKEN_ELSEWHERE
RUN_PARAMS = estimator_arguments.RUN_PARAMS

TPU_NAME_ENV = 'TPU_NAME'
# Set by GKE in pods that requested a (non-VM) Cloud TPU node.
GKE_TPU_ENDPOINTS_ENV = 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS'

# The names of the groups' (config_keys/) that the rest of the library reads
# from here, where `TrainerConfig` is.
ConfigError = declare.ConfigError
CHECK = declare.CHECK
HELP = declare.HELP
SHOWN_DEFAULT = declare.SHOWN_DEFAULT
MAX_INT64 = checks.MAX_INT64
is_uri = checks.is_uri
TPUSpec = tpu_keys.TPUSpec
tpu_entry = tpu_keys.tpu_entry
BATCH_SIZE_KEYS = input_keys.BATCH_SIZE_KEYS
INPUT_CACHE_MODES = input_keys.INPUT_CACHE_MODES
INPUT_SHUFFLE_MODES = input_keys.INPUT_SHUFFLE_MODES
AUTO = schedule_keys.AUTO
HOST_LOOP_END_KEYS = schedule_keys.HOST_LOOP_END_KEYS
RESERVED_PARAMS_KEYS = model_keys.RESERVED_PARAMS_KEYS


def check_derived_params(given: Mapping[str, Any], derived: Mapping[str, Any],
                         where: str) -> None:
  """Params a user set that TPUTrainer also sets must agree with its values.

  Args:
    given: params from the user (custom_config['params'], hyperparameters).
    derived: the values TPUTrainer sets (`config_params`, RUN_PARAMS).
    where: how errors name `given` (e.g. "custom_config['params']").

  Raises:
    ConfigError: naming the param, both values and where each comes from.
  """
  problem = estimator_arguments.param_disagreement(given, derived, where)
  if problem:
    raise ConfigError(problem)


@dataclasses.dataclass(frozen=True)
class TrainerConfig(export_keys.ExportKeys, model_keys.ModelKeys,
                    checkpoint_keys.CheckpointKeys,
                    schedule_keys.ScheduleKeys, input_keys.InputKeys,
                    slice_keys.SliceKeys, tpu_keys.TPUKeys):
  """Validated `custom_config` of a TPUTrainer: one field per key.

  The keys are declared in groups by concern (`KEY_GROUPS`, config_keys/),
  flat as users write them. To add a key, add a field to its group with
  `declare.key(default, check=..., help=...)`: the parser
  (`from_custom_config`), the accepted-keys message and the table of
  docs/reference/custom_config.md (`keys_table`, checked by
  tests/test_config.py) follow.
  """

  @classmethod
  def from_custom_config(
      cls,
      custom_config: Optional[Mapping[str, Any]],
      environ: Optional[Mapping[str, str]] = None) -> 'TrainerConfig':
    """Validates a raw `custom_config` dict and returns the typed config.

    Each key given is checked by its field's check; an absent key takes the
    field's default.

    Args:
      custom_config: the Trainer's `custom_config` (None means all defaults).
      environ: environment to read `TPU_NAME` from (default `os.environ`).

    Returns:
      The validated config, with `use_tpu` resolved.

    Raises:
      ConfigError: naming the first bad key and the accepted values.
    """
    environ = os.environ if environ is None else environ
    if not isinstance(custom_config or {}, Mapping):
      raise ConfigError(
          f'custom_config must be a dict, got {type(custom_config).__name__}.')
    raw = dict(custom_config or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    elsewhere = sorted(set(raw) & set(KEYS_TAKEN_ELSEWHERE))
    if elsewhere:
      raise ConfigError(
          f'custom_config[{elsewhere[0]!r}] is not a TPUTrainer key: '
          f'{KEYS_TAKEN_ELSEWHERE[elsewhere[0]]}')
    unknown = sorted(set(raw) - set(fields))
    if unknown:
      raise ConfigError(
          f'Unknown custom_config key(s) {unknown}. Accepted keys: '
          f'{sorted(fields)}.')
    values = {name: fields[name].metadata[CHECK](name, raw[name])
              for name in fields if name in raw}

    tpu = values.get('tpu')
    for variable in (TPU_NAME_ENV, GKE_TPU_ENDPOINTS_ENV):
      if tpu is None and environ.get(variable):
        tpu = TPUSpec(name=environ[variable])
    values['tpu'] = tpu
    if values.get('use_tpu') is None:
      values['use_tpu'] = (tpu is not None or bool(values.get('tpu_workers'))
                           or len(addresses.hostnames(environ)) > 1)
    values['save_checkpoints_steps'] = checkpoint_keys.save_checkpoints_steps(
        values.get('eval_every_steps'), values.get('save_checkpoints_steps'))
    config = cls(**values)
    config.check_shard_divisibility()
    config.check_host_loop()
    config.check_tpu_loop()
    config.check_input_mode(max(len(values.get('tpu_workers') or ()),
                                len(addresses.hostnames(environ)), 1))
    check_derived_params(config.params, config.config_params(),
                         "custom_config['params']")
    return config

  def config_params(self) -> Dict[str, Any]:
    """The params TPUTrainer sets from this config (and RUN_PARAMS, the run)."""
    return {
        'train_batch_size': self.train_batch_size,
        'eval_batch_size': self.eval_batch_size,
        'predict_batch_size': self.predict_batch_size,
        'iterations_per_loop': self.iterations_per_loop,
        'precision': 'bfloat16' if self.bfloat16 else 'float32',
        'use_bfloat16': self.bfloat16,
    }

  def check_tpu_loop(self) -> None:
    """On TPU, checkpoints come at loop ends: their steps must align.

    TPUEstimator saves only between two loops of `iterations_per_loop`
    steps, so a `save_checkpoints_steps` that is no multiple of it saves
    late (and `eval_every_steps` evaluates late) without a word.
    """
    loop = self.iterations_per_loop
    steps = self.save_checkpoints_steps
    if not self.use_tpu or isinstance(loop, str) or steps is None:
      return
    if steps % loop:
      key = 'eval_every_steps' if self.eval_every_steps else (
          'save_checkpoints_steps')
      raise ConfigError(
          f"custom_config['{key}']={steps} is not a multiple of "
          f"custom_config['iterations_per_loop']={loop}: on a TPU, "
          f'TPUEstimator saves checkpoints only between two loops of {loop} '
          f'steps, so it would save at other steps than asked. Use a '
          f'multiple of {loop}, or an iterations_per_loop that divides {steps}.')

  def check_host_loop(self) -> None:
    """Checkpoints of the host loop come at loop ends: steps must align.

    An explicit `host_iterations_per_loop` must divide every step count of
    `HOST_LOOP_END_KEYS`; `auto` divides them by its choice
    (training/host_loop.py), and on TPU the key is ignored.
    """
    iterations = self.host_iterations_per_loop
    if self.use_tpu or iterations == AUTO:
      return
    for key in HOST_LOOP_END_KEYS:
      steps = getattr(self, key)
      if iterations > 1 and steps is not None and steps % iterations:
        # eval_every_steps sets save_checkpoints_steps: name what was given.
        if key == 'save_checkpoints_steps' and self.eval_every_steps:
          key = 'eval_every_steps'
        raise ConfigError(
            f"custom_config['{key}']={steps} is not a multiple of "
            f"custom_config['host_iterations_per_loop']={iterations}: "
            'checkpoints are written at the ends of host loops. Use a '
            f'multiple of {iterations}, a smaller host_iterations_per_loop, '
            f'or {AUTO!r} (the default).')

  def indivisible_batch_sizes(self, num_shards: int) -> List[Tuple[str, int]]:
    """(key, value) of the TPU batch sizes that do not divide by num_shards.

    The eval batch size counts only when evaluation runs on the TPU.
    """
    return [(key, getattr(self, key)) for key in BATCH_SIZE_KEYS
            if (key != 'eval_batch_size' or self.eval_on_tpu) and
            getattr(self, key) % num_shards]

  def check_shard_divisibility(self) -> None:
    """On TPU, every global batch size must divide by `num_shards`."""
    if not self.use_tpu or self.num_shards is None:
      return
    indivisible = self.indivisible_batch_sizes(self.num_shards)
    if indivisible:
      key, value = indivisible[0]
      raise ConfigError(
          f'custom_config[{key!r}]={value} does not divide by '
          f'num_shards={self.num_shards}: TPU splits each global batch '
          f'evenly across shards. Use a multiple of {self.num_shards}.')

  def check_steps(self, train_steps: Optional[int],
                  eval_steps: Optional[int]) -> None:
    """Checks train_args/eval_args steps against this config.

    Args:
      train_steps: `train_args.num_steps` (None when unset or 0).
      eval_steps: `eval_args.num_steps` (None when unset or 0).

    Raises:
      ConfigError: when training has no positive step count, or a TPU
        evaluation has no step count.
    """
    if train_steps is None or train_steps <= 0:
      raise ConfigError(
          f'train_args.num_steps must be a positive integer, got '
          f'{train_steps or 0}. Set TrainArgs(num_steps=N) on the TPUTrainer.')
    if train_steps > MAX_INT64:
      raise ConfigError(
          f'train_args.num_steps={train_steps} does not fit a 64-bit step '
          f'counter; use at most {MAX_INT64}.')
    if eval_steps is not None and not 0 < eval_steps <= MAX_INT64:
      raise ConfigError(
          f'eval_args.num_steps must be positive when set, at most '
          f'{MAX_INT64}, got {eval_steps}.')
    if self.use_tpu and self.eval_on_tpu and eval_steps is None:
      raise ConfigError(
          'eval_args.num_steps is required when use_tpu is true: TPU '
          'evaluation runs a fixed number of steps over a repeating input. '
          'Set EvalArgs(num_steps=N), or custom_config eval_on_tpu=False.')
    self.check_params_steps(train_steps, eval_steps)

  def check_params_steps(self, train_steps: Optional[int],
                         eval_steps: Optional[int]) -> None:
    """`custom_config['params']` may repeat the run's steps only as they are.

    Raises:
      ConfigError: params['train_steps'] (or 'eval_steps') differs from
        train_args.num_steps (eval_args.num_steps).
    """
    run = {'train_steps': train_steps, 'eval_steps': eval_steps}
    check_derived_params(self.params,
                         {key: steps for key, steps in run.items() if steps},
                         "custom_config['params']")


# The groups of keys in the order of the reference table, with their titles.
KEY_GROUPS = (
    ('TPU', tpu_keys.TPUKeys),
    ('TPU slice', slice_keys.SliceKeys),
    ('Input', input_keys.InputKeys),
    ('Schedule', schedule_keys.ScheduleKeys),
    ('Checkpoints', checkpoint_keys.CheckpointKeys),
    ('Model', model_keys.ModelKeys),
    ('Export', export_keys.ExportKeys),
)


def keys_table() -> str:
  """The table of custom_config keys (docs/reference/custom_config.md).

  A row per group (its title and purpose), then a row per key of it.
  """
  rows = ['| key | default | meaning |', '|---|---|---|']
  for title, group in KEY_GROUPS:
    purpose = group.__doc__.splitlines()[0].split(': ', 1)[-1].rstrip('.')
    rows.append(f'| **{title}** | | {purpose} |')
    for field in dataclasses.fields(group):
      rows.append(f'| `{field.name}` | {field.metadata[SHOWN_DEFAULT]} | '
                  f'{field.metadata[HELP]} |')
  return '\n'.join(rows) + '\n'


if __name__ == '__main__':
  print(keys_table(), end='')
