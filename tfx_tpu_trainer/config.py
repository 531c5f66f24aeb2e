"""The `custom_config` schema of TPUTrainer: one typed object and its checks."""

import dataclasses
import json
import math
import os
import re
from typing import (Any, Callable, Dict, List, Mapping, Optional, Tuple,
                    Union)
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import estimator_arguments

__all__ = ['TPU_NAME_ENV', 'GKE_TPU_ENDPOINTS_ENV', 'PER_HOST_INPUT_MODES',
           'EVAL_STRATEGIES', 'INPUT_CACHE_MODES', 'INPUT_SHUFFLE_MODES',
           'EXPORT_API_VERSIONS',
           'RESERVED_PARAMS_KEYS', 'TPU_SPEC_KEYS', 'MAX_INT64',
           'BATCH_SIZE_KEYS', 'AUTO', 'AUTO_HOST_LOOP_MAX',
           'HOST_LOOP_END_KEYS', 'tpu_entry', 'ConfigError', 'TPUSpec',
           'is_uri', 'CHECK', 'HELP', 'SHOWN_DEFAULT', 'TrainerConfig',
           'keys_table', 'MULTI_HOST_INPUT_MODES', 'KEYS_TAKEN_ELSEWHERE',
           'RUN_PARAMS', 'check_derived_params']

# TPUEstimator's arguments that are no key, and the params TPUTrainer sets
# from the run (estimator_arguments.py).
KEYS_TAKEN_ELSEWHERE = estimator_arguments.KEYS_TAKEN_ELSEWHERE
RUN_PARAMS = estimator_arguments.RUN_PARAMS

TPU_NAME_ENV = 'TPU_NAME'
# The port of a TPU worker server (training/tpu_slice.py).
TPU_WORKER_PORT = 8470
_HOST = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$')
# ASCII digits only: str.isdigit() takes '²' and other digits int() refuses.
_PORT = re.compile(r'^[0-9]{1,5}$')
# What a list of hosts is written with instead of commas.
_SEPARATOR = re.compile(r'[;|\s]+')
# The hosts of a multi-host slice, comma-separated (GKE sets it on TPU pods).
TPU_WORKER_HOSTNAMES_ENV = 'TPU_WORKER_HOSTNAMES'
# The worker group spec a compiled multi-host step's driver carries
# (tpu/worker_group.py).
WORKER_GROUP_ENV = 'TFX_TPU_TRAINER_WORKER_GROUP'
# Set by GKE in pods that requested a (non-VM) Cloud TPU node.
GKE_TPU_ENDPOINTS_ENV = 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS'

PER_HOST_INPUT_MODES = ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2',
                        'BROADCAST')
EVAL_STRATEGIES = ('train_and_evaluate', 'alternate')
# The default input chain's cache modes (input_fns.CACHE_MODES).
INPUT_CACHE_MODES = ('auto', 'parsed', 'disk', 'serialized', 'none')
# How the default chain mixes training input it does not table
# (input_fns.SHUFFLE_MODES).
INPUT_SHUFFLE_MODES = ('window', 'record')
EXPORT_API_VERSIONS = (1, 2)
# TPUEstimator reserves these (`batch_size`, `context`); `use_tpu` it sets
# itself in every mode, so a user value would be silently overwritten.
RESERVED_PARAMS_KEYS = ('batch_size', 'context', 'use_tpu')
TPU_SPEC_KEYS = ('name', 'zone', 'project')
# The largest value of a TensorFlow int64 (step counters, batch sizes).
MAX_INT64 = 2**63 - 1
BATCH_SIZE_KEYS = ('train_batch_size', 'eval_batch_size',
                   'predict_batch_size')
# `host_iterations_per_loop`: the library picks the loop length off TPU.
AUTO = 'auto'
# The longest automatic host loop, and the step-rate logging period it must
# divide (RunConfig's `log_step_count_steps`, which TPUTrainer leaves at its
# default): loops end at every multiple of 100 steps.
AUTO_HOST_LOOP_MAX = 100
# Config keys whose step counts the automatic host loop must end at (it
# divides each one that is set). A key that sets checkpoint or evaluation
# steps belongs here.
HOST_LOOP_END_KEYS = ('save_checkpoints_steps',)
# The input modes TPUEstimator evaluates with on several hosts
# (tpu_context.py: PER_HOST_V1 and PER_SHARD_V1 raise at the first
# evaluation, after a whole training loop).
MULTI_HOST_INPUT_MODES = ('PER_HOST_V2', 'BROADCAST')
def _hostnames(environ: Mapping[str, str]) -> List[str]:
  """The hosts `TPU_WORKER_HOSTNAMES` names (GKE sets it on TPU pods)."""
  return [h.strip() for h in environ.get(TPU_WORKER_HOSTNAMES_ENV, '').split(',')
          if h.strip()]


def tpu_entry(name: str, zone: Optional[str] = None,
              project: Optional[str] = None) -> Dict[str, str]:
  """The `custom_config['tpu']` entry: the name, and zone/project if given."""
  return {key: value
          for key, value in zip(TPU_SPEC_KEYS, (name, zone, project)) if value}


class ConfigError(errors.TPUTrainerError, ValueError):
  """A `custom_config` entry is unknown or has an invalid value."""


@dataclasses.dataclass(frozen=True)
class TPUSpec:
  """Where the TPU is: the arguments of `TPUClusterResolver`."""
  name: str
  zone: Optional[str] = None
  project: Optional[str] = None


def _bool(key: str, value: Any) -> bool:
  if not isinstance(value, bool):
    raise ConfigError(
        f'custom_config[{key!r}] must be true or false, got {value!r}.')
  return value


def _positive_int(key: str, value: Any,
                  accepted: str = 'a positive integer') -> int:
  """`value` if a positive int64, else an error saying what is `accepted`."""
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ConfigError(
        f'custom_config[{key!r}] must be {accepted}, got {value!r}.')
  _check_int64(key, value)
  return value


def _check_int64(key: str, value: int) -> None:
  # TensorFlow holds sizes and steps in int64; a larger Python int passes
  # every other check and fails deep inside TensorFlow instead.
  if value > MAX_INT64:
    raise ConfigError(
        f'custom_config[{key!r}]={value} is too large: TensorFlow holds it '
        f'in a 64-bit integer, so it must be at most {MAX_INT64}.')


def _auto_or_positive_int(key: str, value: Any) -> Any:
  if value == AUTO:
    return value
  return _positive_int(key, value, f'{AUTO!r} or a positive integer')


# `iterations_per_loop` as a time, the form TPUConfig accepts
# (tensorflow_estimator's tpu/util.py): a positive integer without leading
# zeros and a unit, seconds, minutes or hours ("300s", "5m", "1h").
_LOOP_TIME = re.compile(r'^[1-9][0-9]*[smh]$')


def _steps_or_time(key: str, value: Any) -> Union[int, str]:
  """A positive step count, or a time such as "300s", "5m" or "1h"."""
  if isinstance(value, str):
    if not _LOOP_TIME.match(value):
      raise ConfigError(
          f'custom_config[{key!r}]={value!r} is not a time TPUConfig '
          'accepts: give a positive integer of steps, or of seconds, minutes '
          'or hours with its unit and no space or sign (e.g. "300s", "5m", '
          '"1h").')
    _check_int64(key, int(value[:-1]) * {'s': 1, 'm': 60, 'h': 3600}[
        value[-1]])
    return value
  return _positive_int(key, value, 'a positive integer (steps) or a time '
                       'such as "300s", "5m" or "1h"')


def _optional_positive_int(key: str, value: Any) -> Optional[int]:
  return None if value is None else _positive_int(key, value)


def _optional_positive_number(key: str, value: Any) -> Optional[float]:
  """None, or a finite number > 0 as a float."""
  if value is None:
    return None
  if (isinstance(value, bool) or not isinstance(value, (int, float)) or
      not math.isfinite(value) or value <= 0):
    raise ConfigError(
        f'custom_config[{key!r}] must be a positive number, got {value!r}.')
  return float(value)


def _optional_non_negative_int(key: str, value: Any,
                               meaning: str = '0: keep all') -> Optional[int]:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise ConfigError(
        f'custom_config[{key!r}] must be an integer >= 0 ({meaning}), got '
        f'{value!r}.')
  _check_int64(key, value)
  return value


def _save_checkpoints_steps(every: Optional[int],
                            steps: Optional[int]) -> Optional[int]:
  """save_checkpoints_steps, which eval_every_steps sets (evals need one)."""
  if every is None:
    return steps
  if steps is not None and steps != every:
    raise ConfigError(
        f"custom_config['eval_every_steps']={every} and "
        f"['save_checkpoints_steps']={steps} differ: an evaluation reads a "
        'checkpoint, so eval_every_steps sets save_checkpoints_steps. Drop '
        'save_checkpoints_steps, or give both the same value.')
  return every


def _checkpoint_dir(value: Any) -> Optional[str]:
  value = _optional_str('checkpoint_dir', value)
  if value is not None and not (is_uri(value) or os.path.isabs(value)):
    raise ConfigError(
        f"custom_config['checkpoint_dir']={value!r} is a relative path, which "
        'would resolve against the working directory of whichever process '
        'runs the step. Give an absolute path or a URI (e.g. '
        'gs://bucket/checkpoints).')
  return value


def is_uri(path: str) -> bool:
  """True for `scheme://...` paths (gs://, s3://, hdfs://, ...)."""
  return re.match(r'^[A-Za-z][A-Za-z0-9+.-]*://', path) is not None


def _optional_str(key: str, value: Any) -> Optional[str]:
  if value is not None and (not isinstance(value, str) or not value):
    raise ConfigError(
        f'custom_config[{key!r}] must be a non-empty string, got {value!r}.')
  return value


def _choice(key: str, value: Any, accepted: tuple) -> Any:  # pylint: disable=g-bare-generic
  if isinstance(value, bool) or value not in accepted:
    raise ConfigError(
        f'custom_config[{key!r}]={value!r} is not accepted; use one of '
        f'{list(accepted)}.')
  return value


def _tpu_spec(value: Any) -> Optional[TPUSpec]:
  if value is None:
    return None
  if isinstance(value, str):
    value = {'name': value}
  if not isinstance(value, Mapping):
    raise ConfigError(
        "custom_config['tpu'] must be a dict {name, zone, project} or a TPU "
        f'name, got {value!r}.')
  unknown = sorted(set(value) - set(TPU_SPEC_KEYS))
  if unknown:
    raise ConfigError(f"Unknown custom_config['tpu'] key(s) {unknown}. "
                      f'Accepted keys: {list(TPU_SPEC_KEYS)}.')
  for key in TPU_SPEC_KEYS:
    _optional_str(f'tpu.{key}', value.get(key))
  if not value.get('name'):
    raise ConfigError("custom_config['tpu'] needs a 'name' (the TPU node, "
                      "or 'local' on a TPU VM).")
  return TPUSpec(**value)


def _tpu_workers(key: str, value: Any) -> Tuple[str, ...]:
  """A list of `host[:port]` worker addresses (training/tpu_slice.py)."""
  if value is None:
    return ()
  if not isinstance(value, (list, tuple)) or not value:
    raise ConfigError(
        f'custom_config[{key!r}] must be a non-empty list of worker '
        f'addresses HOST or HOST:PORT (one per host of the slice), got '
        f'{value!r}.')
  return worker_addresses(value, f'custom_config[{key!r}]')


def worker_address(text: Any, where: str) -> str:
  """`host` or `host:port` (or `grpc://host:port`) as `host:port`.

  Raises:
    ConfigError: naming `where` and the accepted form.
  """
  accepted = ('a worker address is HOST or HOST:PORT (e.g. '
              f'trainer-workers-0.trainer-workers:{TPU_WORKER_PORT}); PORT '
              f'defaults to {TPU_WORKER_PORT}.')
  if not isinstance(text, str):
    raise ConfigError(f'{where}: {text!r} is not a string; {accepted}')
  address = text.strip()
  if address.startswith('grpc://'):
    address = address[len('grpc://'):]
  host, sep, port = address.rpartition(':')
  if not sep:
    host, port = address, str(TPU_WORKER_PORT)
  if not _HOST.match(host) or not _PORT.match(port) or not (
      0 < int(port) < 65536):
    separator = _SEPARATOR.search(address)
    hint = (f' Separate the hosts with commas, not {separator.group()!r}.'
            if separator else '')
    raise ConfigError(
        f'{where}: {text!r} is not a worker address; {accepted}{hint}')
  return f'{host}:{int(port)}'


def worker_addresses(values: Any, where: str) -> Tuple[str, ...]:
  """Every address parsed (`worker_address`); a repeated one refused.

  Raises:
    ConfigError: naming `where` and the bad or repeated address.
  """
  addresses = tuple(worker_address(v, where) for v in values)
  repeated = sorted({a for a in addresses if addresses.count(a) > 1})
  if repeated:
    raise ConfigError(f'{where} names {", ".join(repeated)} more than once: '
                      'each host of the slice runs one worker.')
  return addresses


def _params(value: Any) -> Dict[str, Any]:
  if value is None:
    return {}
  if not isinstance(value, Mapping) or not all(
      isinstance(k, str) for k in value):
    raise ConfigError(
        f"custom_config['params'] must be a dict with string keys, got "
        f'{value!r}.')
  reserved = sorted(set(value) & set(RESERVED_PARAMS_KEYS))
  if reserved:
    raise ConfigError(
        f"custom_config['params'] may not set {reserved}: TPUEstimator sets "
        'these itself (batch sizes come from train/eval/predict_batch_size).')
  return dict(value)


def _regex(key: str, value: Any) -> str:
  if not isinstance(value, str) or not value:
    raise ConfigError(
        f'custom_config[{key!r}] must hold non-empty regular expressions '
        f'(strings), got {value!r}.')
  try:
    re.compile(value)
  except re.error as e:
    raise ConfigError(
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
      raise ConfigError(
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
    raise ConfigError(
        f'custom_config[{key!r}] must map variable names of this model to '
        'their names in the base model (non-empty strings), got '
        f'{value!r}.')
  return dict(value)


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


# The keys of `custom_config`, each declared once below as a field of
# `TrainerConfig`: its default (the field's), its check and its help text.
# `from_custom_config` and `keys_table` read them from the fields.
CHECK = 'check'  # f(key, raw value) -> the typed value, or raises ConfigError.
HELP = 'help'  # What the key does (markdown), as docs/reference/ shows it.
SHOWN_DEFAULT = 'shown_default'  # The default as users read it.


def _key(default: Any = None, *, check: Callable[[str, Any], Any],
         help: str,  # pylint: disable=redefined-builtin
         shown_default: Optional[str] = None,
         default_factory: Optional[Callable[[], Any]] = None) -> Any:
  """Declares one `custom_config` key: a `TrainerConfig` field.

  Args:
    default: the value when the key is absent (also `TrainerConfig()`'s).
    check: validates a raw value given for the key: `check(key, value)`
      returns the typed value or raises `ConfigError` naming the key.
    help: what the key does, one markdown paragraph (the reference table).
    shown_default: the default as the docs state it (default: `default`
      rendered as code).
    default_factory: for mutable defaults, instead of `default`.

  Returns:
    A `dataclasses.field` carrying the check and the help.
  """
  metadata = {CHECK: check, HELP: help,
              SHOWN_DEFAULT: shown_default if shown_default is not None
              else f'`{_as_written(default)}`'}
  if default_factory is not None:
    return dataclasses.field(default_factory=default_factory,
                             metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def _as_written(value: Any) -> str:
  """A default as a user writes it in custom_config (JSON, strings bare)."""
  return value if isinstance(value, str) else json.dumps(value)


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """Validated `custom_config` of a TPUTrainer: one field per key.

  To add a key, add a field here with `_key(default, check=..., help=...)`:
  the parser (`from_custom_config`), the accepted-keys message and the
  table of docs/reference/custom_config.md (`keys_table`, checked by
  tests/test_config.py) follow.
  """
  use_tpu: bool = _key(
      False, check=lambda k, v: None if v is None else _bool(k, v),
      shown_default='auto',
      help='true when a TPU is named (`tpu.name`), or `TPU_NAME` / GKE\'s '
      '`KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS` is set (then that names the TPU), '
      'or a multi-host slice is given (`tpu_workers`)')
  tpu: Optional[TPUSpec] = _key(
      None, check=lambda k, v: _tpu_spec(v), shown_default='none',
      help='`{name, zone, project}` for `TPUClusterResolver` (or just the '
      'name); passed as `master=`, never `cluster=`, so `train_and_evaluate` '
      'evaluates')
  tpu_wait_secs: int = _key(
      60, check=_positive_int,
      help='how long, in seconds, to wait before training for a TPU named by '
      'address or Cloud TPU name (`tpu.name`, `TPU_NAME`) to answer and list '
      'its TPU devices; then the run fails naming the address '
      '(training/tpu_connect.py)')
  tpu_workers: Tuple[str, ...] = _key(
      (), check=_tpu_workers, shown_default='`TPU_WORKER_HOSTNAMES` when it names several hosts, else none',
      help='a multi-host slice: the TPU worker of each host, `HOST` or '
      '`HOST:PORT` (port 8470 by default), in task order; each host runs '
      '`python -m tfx_tpu_trainer.tpu.worker`, and this process drives them '
      'all (training/tpu_slice.py). Data and checkpoints must then be on '
      'storage every host reaches (gs://)')
  train_batch_size: int = _key(
      64, check=_positive_int,
      help='global training batch size; functions get the per-shard size in '
      '`params[\'batch_size\']`; on TPU it must divide by `num_shards`')
  eval_batch_size: int = _key(
      64, check=_positive_int,
      help='global evaluation batch size; on TPU (with `eval_on_tpu`) it must '
      'divide by `num_shards`')
  predict_batch_size: int = _key(
      8, check=_positive_int,
      help='global prediction batch size; on TPU it must divide by '
      '`num_shards`')
  iterations_per_loop: Union[int, str] = _key(
      100, check=_steps_or_time,
      help='training steps per TPU session call (also the finest checkpoint '
      'grain on TPU), or a time per call as TPUConfig takes it: `"300s"`, '
      '`"5m"`, `"1h"` (TPUEstimator then sizes each loop to run about that '
      'long)')
  host_iterations_per_loop: Union[str, int] = _key(
      AUTO, check=_auto_or_positive_int,
      help='off TPU (CPU/GPU): training steps per session call, in an '
      'in-graph while loop as on TPU (training/host_loop.py); checkpoints, '
      'the NaN-loss check, step-rate summaries, progress and the stop at '
      '`train_args.num_steps` happen at loop ends (loops end at multiples of '
      'it, the last one exactly at the last step). `auto`: the largest '
      'divisor of 100 that also divides `save_checkpoints_steps` and the '
      'training curves\' cadence (a tenth of `train_args.num_steps` below '
      '1,000 steps), so loops end at every 100th step, at every checkpoint '
      'step and at every point of the curves; a model or input the loop cannot run (a training '
      'input that is not a `tf.data.Dataset` of dense tensors, a `host_call`, '
      '`training_hooks` or `init_from_checkpoint` in the `model_fn`) then '
      'trains one step per call. An '
      'explicit number must divide `save_checkpoints_steps`, and such a model '
      'or input is an error; `1`: no loop. v1 summaries the `model_fn` makes '
      '(a canned Estimator\'s) are not written inside the loop, as on TPU; '
      'a warning names them. See docs/guide/performance.md, "The host '
      'loop", for what it gains; ignored on TPU')
  num_shards: Optional[int] = _key(
      None, check=_optional_positive_int, shown_default='from the TPU',
      help='replicas')
  per_host_input: str = _key(
      'PER_HOST_V2', check=lambda k, v: _choice(k, v, PER_HOST_INPUT_MODES),
      help='`PER_SHARD_V1`, `PER_HOST_V1`, `PER_HOST_V2` or `BROADCAST` '
      '(TPUConfig\'s `per_host_input_for_training`); on a slice of several '
      'hosts only `PER_HOST_V2` and `BROADCAST`, which TPUEstimator can '
      'evaluate with')
  experimental_allow_per_host_v2_parallel_get_next: bool = _key(
      False, check=_bool,
      help='true: with `PER_HOST_V2`, each host reads the next batches of its '
      'cores concurrently instead of in turn (TPUConfig\'s flag of that '
      'name): faster input for short steps, but which core gets which batch '
      'is no longer fixed. Only with `per_host_input` `PER_HOST_V2`')
  initial_infeed_sleep_secs: Optional[int] = _key(
      None, check=_optional_positive_int, shown_default='none',
      help='on TPU: seconds the infeed waits before its first batch '
      '(TPUConfig\'s), for models whose compile takes long enough that the '
      'infeed would time out')
  experimental_host_call_every_n_steps: int = _key(
      1, check=_positive_int,
      help='on TPU: run the `host_call` of the TPUEstimatorSpec every N steps '
      'of a training loop instead of every step (TPUConfig\'s; the steps '
      'count from the start of each loop of `iterations_per_loop`)')
  eval_on_tpu: bool = _key(
      True, check=_bool, help='false: evaluate on CPU instead of the TPU')
  export_to_tpu: bool = _key(
      True, check=_bool,
      help='false: export only the `{serve}` meta graph, no `{serve, tpu}`')
  export_saved_model_api_version: int = _key(
      1, check=lambda k, v: _choice(k, v, EXPORT_API_VERSIONS),
      help='2: the module wraps its own TPU inference '
      '(`model_fn_inference_on_tpu`)')
  eval_strategy: str = _key(
      'train_and_evaluate', check=lambda k, v: _choice(k, v, EVAL_STRATEGIES),
      help='`alternate`: `train(max_steps)` / `evaluate(steps)` in turns, a '
      'cycle per `save_checkpoints_steps`')
  eval_every_steps: Optional[int] = _key(
      None, check=_optional_positive_int, shown_default='none',
      help='evaluate every N training steps (evaluation reads checkpoints, so '
      'this sets `save_checkpoints_steps` to N, and a different '
      '`save_checkpoints_steps` is an error; `train_and_evaluate` then '
      'evaluates every checkpoint, with no time throttle)')
  show_progress: bool = _key(
      True, check=_bool,
      help='live progress (training/progress.py): a tqdm bar on a terminal, a '
      'plain log line every 15 s elsewhere, a line per evaluation; it fetches '
      'the step and loss at most every 0.5 s (terminal) or 15 s, and on a '
      "session's first and last run, never on other steps (see "
      'docs/guide/performance.md, "The cost of the live progress")')
  save_checkpoints_steps: Optional[int] = _key(
      None, check=_optional_positive_int, shown_default='estimator default',
      help='checkpoint frequency in steps')
  keep_checkpoint_max: Optional[int] = _key(
      None, check=_optional_non_negative_int,
      shown_default='estimator default (5)',
      help='checkpoint retention (`0` keeps every checkpoint, as in '
      'TensorFlow)')
  tf_random_seed: Optional[int] = _key(
      None, check=lambda k, v: _optional_non_negative_int(
          k, v, 'the graph-level random seed'), shown_default='none',
      help='the graph-level random seed (RunConfig\'s): variable '
      'initializers, dropout and the input chain\'s shuffles repeat, so two '
      'runs with the same seed, data and steps train the same weights')
  label_key: Optional[str] = _key(
      None, check=_optional_str, shown_default="module's `LABEL_KEY`",
      help='the label feature')
  raw_label_key: Optional[str] = _key(
      None, check=_optional_str, shown_default='found from the transform graph',
      help='the raw feature served requests leave out (e.g. `tips` for the '
      'label `tips_xf`); by default the raw features only the transformed '
      'label is computed from. Must be a raw schema feature no served feature '
      'is computed from (checked in prepare.prepare_run)')
  checkpoint_dir: Optional[str] = _key(
      None, check=lambda k, v: _checkpoint_dir(v),
      shown_default='`<pipeline root>/_checkpoints`',
      help='where resumable checkpoints live (training/checkpoints.py): an '
      'absolute path or a URI (e.g. `gs://...`); created and probed for '
      'writing before training')
  allow_nonfinite_metrics: bool = _key(
      False, check=_bool,
      help='true: publish a model even when its final eval metrics hold NaN '
      'or infinity (by default the execution fails)')
  allow_nonfinite_variables: bool = _key(
      False, check=_bool,
      help='true: publish a model even when a variable of its final '
      'checkpoint holds NaN or infinity (by default the execution fails '
      'before export, naming the variable; training/finite_variables.py)')
  embedding_host_memory_gb: Optional[float] = _key(
      None, check=_optional_positive_number,
      shown_default="this machine's available memory",
      help='with TPU embeddings (`embedding_config_spec`): the memory, in GB '
      '(10^9 bytes), that each host gives the tables and their optimizer '
      'slots; the share of the busiest host (rows split over the hosts of '
      '`tpu_workers`, one host otherwise) must fit before training starts '
      '(docs/guide/tpu_embeddings.md)')
  input_cache: str = _key(
      'auto', check=lambda k, v: _choice(k, v, INPUT_CACHE_MODES),
      help="the default input chain's cache: `parsed` (the split parsed once "
      'into in-memory dense columns; each epoch a fresh permutation gathered '
      'in batches; training input streams its first epoch while the columns '
      'fill, unless eval_strategy is `alternate`), `disk` (training input: '
      'the split parsed once, while the first epoch streams, into blocks of '
      'dense columns in the resumable checkpoint directory, read back in a '
      'fresh order on later epochs and by a retry of the execution, removed '
      'after the export; at most 64 GB per host and 2 GB less than the free '
      'space of a local disk, else it streams; a run outside a pipeline '
      'streams), `serialized` (the serialized records cached in memory), '
      '`none` (streamed; both mixed as `input_shuffle` says); `auto` takes '
      '`parsed` for training input when all features are fixed-length numbers '
      'and building the table (about twice its size at peak, estimated from '
      'the start of a file) fits in 512 MB per host, else `disk` for training '
      'input of fixed-length features in a pipeline run whose checkpoint '
      'directory is on a local disk with room for it (logged, with the reason '
      'when not), else `serialized` when the gzip files add up to at most 128 '
      'MB, else `none` (evaluation input, read for a few steps, is never '
      'cached by `auto`)')
  input_shuffle: str = _key(
      'window', check=lambda k, v: _choice(k, v, INPUT_SHUFFLE_MODES),
      help='how training input that is not the parsed table (`serialized`, '
      '`none`) is mixed: `window` reads each file in chunks of 256 records, '
      'shuffles the chunks in a buffer of 64, parses 2,048 records per call '
      'and permutes the rows of each window of at least 16,384 (whole '
      'batches); rows move further than under `record`, and it reads 2-10x '
      'faster. `record` is the former chain: each record through a '
      '10,000-record shuffle buffer, then batched and parsed. Both shuffle '
      'the file order every epoch; see '
      'docs/guide/performance.md, "Streaming", for how far a row moves under '
      'each')
  params: Mapping[str, Any] = _key(
      check=lambda k, v: _params(v), default_factory=dict,
      shown_default='`{}`',
      help='merged into the `params` that model_fn/input_fn receive (may not '
      'set `batch_size`, `context`, `use_tpu`; what TPUTrainer sets itself, '
      'e.g. `train_batch_size`, `train_steps`, `model_dir`, it may repeat '
      'only with the same value: docs/reference/tpu_estimator.md, '
      '"Where flags go")')
  bfloat16: bool = _key(
      False, check=_bool,
      help='true: train in bfloat16. A `model_fn` gets `params[\'precision\']'
      '=\'bfloat16\'` and `params[\'use_bfloat16\']=True` (else '
      '`\'float32\'`, `False`), the flags of tensorflow/tpu\'s models, which '
      'build the network in `tf.compat.v1.tpu.bfloat16_scope()` and cast the '
      'logits to float32; a `build_keras_model` module is built under the '
      'Keras `mixed_bfloat16` policy and its outputs are cast to float32. '
      'Variables stay float32')
  vars_to_warm_start: Union[None, str, Tuple[str, ...]] = _key(
      None, check=_vars_to_warm_start,
      shown_default='every trainable variable',
      help='with a `base_model` input: which variables start from it, as '
      '`tf.estimator.WarmStartSettings` takes it: a regular expression over '
      'the trainable '
      'variables, or a list of regular expressions over all variables '
      '(optimizer slots, batch-norm statistics)')
  var_name_to_prev_var_name: Mapping[str, str] = _key(
      check=_var_renames, default_factory=dict, shown_default='`{}`',
      help='with a `base_model` input: `{name in this model: name in the base '
      'model}` for variables that were renamed (as '
      '`tf.estimator.WarmStartSettings` takes it)')

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
                           or len(_hostnames(environ)) > 1)
    values['save_checkpoints_steps'] = _save_checkpoints_steps(
        values.get('eval_every_steps'), values.get('save_checkpoints_steps'))
    config = cls(**values)
    config.check_shard_divisibility()
    config.check_host_loop()
    config.check_tpu_loop()
    config.check_input_mode(max(len(values.get('tpu_workers') or ()),
                                len(_hostnames(environ)), 1))
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

  def check_input_mode(self, num_hosts: int) -> None:
    """The input mode suits the hosts; parallel get_next needs PER_HOST_V2.

    Args:
      num_hosts: the TPU hosts the run drives (1: a single host).

    Raises:
      ConfigError: naming the mode and what to use.
    """
    if (self.experimental_allow_per_host_v2_parallel_get_next and
        self.per_host_input != 'PER_HOST_V2'):
      raise ConfigError(
          "custom_config['experimental_allow_per_host_v2_parallel_get_next'] "
          "is true, but custom_config['per_host_input']="
          f'{self.per_host_input!r}: it acts only on PER_HOST_V2 input. Set '
          "per_host_input to 'PER_HOST_V2' (the default), or drop the flag.")
    if (self.use_tpu and num_hosts > 1 and
        self.per_host_input not in MULTI_HOST_INPUT_MODES):
      raise ConfigError(
          f"custom_config['per_host_input']={self.per_host_input!r} cannot "
          f'evaluate on a TPU slice of {num_hosts} hosts: TPUEstimator '
          f'evaluates on several hosts only with {list(MULTI_HOST_INPUT_MODES)}'
          ' and would stop at the first evaluation, after training. Use '
          "'PER_HOST_V2' (the default).")

  def check_warm_start(self, has_base_model: bool) -> None:
    """The warm-start keys select from a base model: one must be given."""
    given = [key for key in ('vars_to_warm_start', 'var_name_to_prev_var_name')
             if getattr(self, key)]
    if given and not has_base_model:
      named = ' and '.join(f'custom_config[{key!r}]' for key in given)
      raise ConfigError(
          f'{named} select variables of the base model to '
          'warm-start from, but the TPUTrainer has no base_model input. Pass '
          'base_model=<a Model channel> (e.g. a Resolver of the latest '
          'blessed model), or drop the key(s).')

  @property
  def host_loop_is_auto(self) -> bool:
    """True when the library chose the host loop length (`auto`, off TPU)."""
    return not self.use_tpu and self.host_iterations_per_loop == AUTO

  @property
  def host_loop_iterations(self) -> int:
    """Steps per session.run of the host loop; 1 (no loop) on TPU.

    `auto`: the largest divisor of `AUTO_HOST_LOOP_MAX` (100) that divides
    every step count of `HOST_LOOP_END_KEYS` that is set, so loops end at
    each of those steps and at every 100th (the step-rate log).
    """
    return self.host_loop_length()

  def host_loop_length(self, summary_steps: Optional[int] = None) -> int:
    """`host_loop_iterations`, an `auto` loop also ending every `summary_steps`.

    Args:
      summary_steps: the training's curve cadence (training/curves.py: a
        tenth of a training shorter than 1,000 steps), which an automatic
        loop divides too, so a short training's curves get their points.
    """
    if self.use_tpu:
      return 1
    if self.host_iterations_per_loop != AUTO:
      return self.host_iterations_per_loop
    length = AUTO_HOST_LOOP_MAX
    for steps in [getattr(self, key) for key in HOST_LOOP_END_KEYS] + [
        summary_steps]:
      if steps is not None:
        length = math.gcd(length, steps)
    return length

  def check_host_loop(self) -> None:
    """Checkpoints of the host loop come at loop ends: steps must align."""
    iterations = self.host_loop_iterations
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


def keys_table() -> str:
  """The table of custom_config keys (docs/reference/custom_config.md)."""
  rows = ['| key | default | meaning |', '|---|---|---|']
  for field in dataclasses.fields(TrainerConfig):
    rows.append(f'| `{field.name}` | {field.metadata[SHOWN_DEFAULT]} | '
                f'{field.metadata[HELP]} |')
  return '\n'.join(rows) + '\n'


if __name__ == '__main__':
  print(keys_table(), end='')
