"""The keys of where the TPU is and how TPUEstimator drives it."""

import dataclasses
from typing import Any, Dict, Mapping, Optional

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['TPU_SPEC_KEYS', 'PER_HOST_INPUT_MODES', 'MULTI_HOST_INPUT_MODES',
           'TPUSpec', 'tpu_entry', 'TPUKeys']

TPU_SPEC_KEYS = ('name', 'zone', 'project')
PER_HOST_INPUT_MODES = ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2',
                        'BROADCAST')
# The input modes TPUEstimator evaluates with on several hosts
# (tpu_context.py: PER_HOST_V1 and PER_SHARD_V1 raise at the first
# evaluation, after a whole training loop).
MULTI_HOST_INPUT_MODES = ('PER_HOST_V2', 'BROADCAST')


@dataclasses.dataclass(frozen=True)
class TPUSpec:
  """Where the TPU is: the arguments of `TPUClusterResolver`."""
  name: str
  zone: Optional[str] = None
  project: Optional[str] = None


def tpu_entry(name: str, zone: Optional[str] = None,
              project: Optional[str] = None) -> Dict[str, str]:
  """The `custom_config['tpu']` entry: the name, and zone/project if given."""
  return {key: value
          for key, value in zip(TPU_SPEC_KEYS, (name, zone, project)) if value}


def tpu_spec(value: Any) -> Optional[TPUSpec]:
  """`custom_config['tpu']`: a TPU name or `{name, zone, project}`."""
  if value is None:
    return None
  if isinstance(value, str):
    value = {'name': value}
  if not isinstance(value, Mapping):
    raise declare.ConfigError(
        "custom_config['tpu'] must be a dict {name, zone, project} or a TPU "
        f'name, got {value!r}.')
  unknown = sorted(set(value) - set(TPU_SPEC_KEYS))
  if unknown:
    raise declare.ConfigError(f"Unknown custom_config['tpu'] key(s) {unknown}. "
                      f'Accepted keys: {list(TPU_SPEC_KEYS)}.')
  for key in TPU_SPEC_KEYS:
    checks.optional_str(f'tpu.{key}', value.get(key))
  if not value.get('name'):
    raise declare.ConfigError("custom_config['tpu'] needs a 'name' (the TPU node, "
                      "or 'local' on a TPU VM).")
  return TPUSpec(**value)


@dataclasses.dataclass(frozen=True)
class TPUKeys:
  """The TPU: whether to use one, where it is, and TPUConfig's knobs.

  Attributes:
    use_tpu: train on the TPU (resolved when absent: `TrainerConfig`).
    tpu: where the TPU is, for `TPUClusterResolver`.
    tpu_wait_secs: how long to wait for a named TPU to answer.
    num_shards: the replicas (None: from the TPU).
    per_host_input: TPUConfig's `per_host_input_for_training`.
    experimental_allow_per_host_v2_parallel_get_next: TPUConfig's flag.
    initial_infeed_sleep_secs: TPUConfig's first-infeed delay.
    experimental_host_call_every_n_steps: TPUConfig's host_call period.
    eval_on_tpu: evaluate on the TPU (else on CPU).
    embedding_host_memory_gb: each host's memory for TPU embedding tables.
  """
  use_tpu: bool = declare.key(
      False, check=lambda k, v: None if v is None else checks.boolean(k, v),
      shown_default='auto',
      help='train on the TPU; auto: true when a TPU is named (`tpu`, '
      '`TPU_NAME`, GKE\'s endpoints) or `tpu_workers` is given')
  tpu: Optional[TPUSpec] = declare.key(
      None, check=lambda k, v: tpu_spec(v), shown_default='none',
      help='`{name, zone, project}` for `TPUClusterResolver`, or just the '
      'name')
  tpu_wait_secs: int = declare.key(
      60, check=checks.positive_int,
      help='seconds to wait before training for a named TPU to list its '
      'devices')
  num_shards: Optional[int] = declare.key(
      None, check=checks.optional_positive_int, shown_default='from the TPU',
      help='replicas')
  per_host_input: str = declare.key(
      'PER_HOST_V2',
      check=lambda k, v: checks.choice(k, v, PER_HOST_INPUT_MODES),
      help='TPUConfig\'s `per_host_input_for_training`: `PER_SHARD_V1`, '
      '`PER_HOST_V1`, `PER_HOST_V2` or `BROADCAST`')
  experimental_allow_per_host_v2_parallel_get_next: bool = declare.key(
      False, check=checks.boolean,
      help='true: with `PER_HOST_V2`, each host reads its cores\' batches '
      'concurrently (TPUConfig\'s flag)')
  initial_infeed_sleep_secs: Optional[int] = declare.key(
      None, check=checks.optional_positive_int, shown_default='none',
      help='on TPU: seconds the infeed waits before its first batch '
      '(TPUConfig\'s)')
  experimental_host_call_every_n_steps: int = declare.key(
      1, check=checks.positive_int,
      help='on TPU: run the `host_call` every N steps of a loop (TPUConfig\'s)')
  eval_on_tpu: bool = declare.key(
      True, check=checks.boolean,
      help='false: evaluate on CPU instead of the TPU')
  embedding_host_memory_gb: Optional[float] = declare.key(
      None, check=checks.optional_positive_number,
      shown_default="this machine's available memory",
      help='with TPU embeddings: the memory, in GB, each host gives the '
      'tables and their slots')

  def check_input_mode(self, num_hosts: int) -> None:
    """The input mode suits the hosts; parallel get_next needs PER_HOST_V2.

    Args:
      num_hosts: the TPU hosts the run drives (1: a single host).

    Raises:
      ConfigError: naming the mode and what to use.
    """
    if (self.experimental_allow_per_host_v2_parallel_get_next and
        self.per_host_input != 'PER_HOST_V2'):
      raise declare.ConfigError(
          "custom_config['experimental_allow_per_host_v2_parallel_get_next'] "
          "is true, but custom_config['per_host_input']="
          f'{self.per_host_input!r}: it acts only on PER_HOST_V2 input. Set '
          "per_host_input to 'PER_HOST_V2' (the default), or drop the flag.")
    if (self.use_tpu and num_hosts > 1 and
        self.per_host_input not in MULTI_HOST_INPUT_MODES):
      raise declare.ConfigError(
          f"custom_config['per_host_input']={self.per_host_input!r} cannot "
          f'evaluate on a TPU slice of {num_hosts} hosts: TPUEstimator '
          f'evaluates on several hosts only with {list(MULTI_HOST_INPUT_MODES)}'
          ' and would stop at the first evaluation, after training. Use '
          "'PER_HOST_V2' (the default).")
