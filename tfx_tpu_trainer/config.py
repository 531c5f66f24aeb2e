"""The `custom_config` schema of TPUTrainer: one typed object and its checks.

Nothing else in the library reads the raw `custom_config` dict: the executor
calls `TrainerConfig.from_custom_config` once, before any training, and every
later step reads the typed fields.

Keys (all optional; defaults in brackets):
  use_tpu: [auto] true when a TPU is named (`tpu.name`), or `TPU_NAME` or
    GKE's `KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS` is set (then the TPU's name).
  tpu: {name, zone, project} for `TPUClusterResolver` (a plain string is the
    name).
  train_batch_size [64], eval_batch_size [64], predict_batch_size [8]: global
    batch sizes; functions get per-shard sizes in `params['batch_size']`.
  iterations_per_loop [100]: training steps per session.run on TPU.
  host_iterations_per_loop [1]: off TPU (CPU/GPU), training steps per
    session.run. N > 1 runs N steps in an in-graph while loop, as
    `iterations_per_loop` does on TPU (see host_loop.py): checkpoints, the
    NaN-loss check and step-rate summaries happen at loop ends;
    `save_checkpoints_steps` must be a multiple of N. Ignored on TPU.
  num_shards [None: from the TPU system],
  per_host_input ["PER_HOST_V2"]: one of PER_SHARD_V1, PER_HOST_V1,
    PER_HOST_V2, BROADCAST.
  eval_on_tpu [true], export_to_tpu [true], export_saved_model_api_version [1].
  eval_strategy ["train_and_evaluate"]: or "alternate" (train/evaluate in
    turns, one cycle per `save_checkpoints_steps`).
  save_checkpoints_steps [None: estimator default], keep_checkpoint_max
    [None: estimator default, 5]; keep_checkpoint_max 0 keeps every
    checkpoint (TensorFlow's convention).
  label_key [module's LABEL_KEY]: the label feature.
  raw_label_key [found from the transform graph]: the raw feature the served
    model must not require (Transform's raw label, e.g. `tips` for the
    transformed label `tips_xf`); by default the raw features that only the
    transformed label is computed from. Must be a raw schema feature that no
    served feature is computed from (checked in prepare.prepare_run).
  checkpoint_dir [<pipeline root>/_checkpoints]: base directory of the
    checkpoints a retry resumes from (see checkpoints.py): an absolute path
    or a URI such as gs://bucket/dir (a relative path would land under
    whatever the working directory of the step is). It is created and
    probed for writing before training.
  allow_nonfinite_metrics [false]: publish a model whose final eval metrics
    hold NaN or infinity; by default such an execution fails (metrics.py).
  allow_nonfinite_variables [false]: publish a model whose final checkpoint
    holds NaN or infinite variable values; by default such an execution
    fails before export (training/finite_variables.py).
  input_cache ["auto"]: how the default input chain caches a split: "parsed"
    (one in-memory table of parsed dense tensors), "serialized" (the
    serialized records), "none", or "auto" (the table for training input
    that fits, see input_fns.py).
  params [{}]: merged into the `params` that model_fn/input_fn receive.
"""

import dataclasses
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple
from tfx_tpu_trainer import errors

TPU_NAME_ENV = 'TPU_NAME'
# Set by GKE in pods that requested a (non-VM) Cloud TPU node.
GKE_TPU_ENDPOINTS_ENV = 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS'

PER_HOST_INPUT_MODES = ('PER_SHARD_V1', 'PER_HOST_V1', 'PER_HOST_V2',
                        'BROADCAST')
EVAL_STRATEGIES = ('train_and_evaluate', 'alternate')
# The default input chain's cache modes (input_fns.CACHE_MODES).
INPUT_CACHE_MODES = ('auto', 'parsed', 'serialized', 'none')
EXPORT_API_VERSIONS = (1, 2)
# TPUEstimator reserves these (`batch_size`, `context`); `use_tpu` it sets
# itself in every mode, so a user value would be silently overwritten.
RESERVED_PARAMS_KEYS = ('batch_size', 'context', 'use_tpu')
TPU_SPEC_KEYS = ('name', 'zone', 'project')
# The largest value of a TensorFlow int64 (step counters, batch sizes).
MAX_INT64 = 2**63 - 1
BATCH_SIZE_KEYS = ('train_batch_size', 'eval_batch_size',
                   'predict_batch_size')


def tpu_entry(name: str, zone: Optional[str] = None,
              project: Optional[str] = None) -> Dict[str, str]:
  """The `custom_config['tpu']` entry: the name, and zone/project if given."""
  return {key: value
          for key, value in zip(TPU_SPEC_KEYS, (name, zone, project)) if value}


class ConfigError(errors.TPUTrainerError):
  """A `custom_config` entry is unknown or has an invalid value."""


@dataclasses.dataclass(frozen=True)
class TpuSpec:
  """Where the TPU is: the arguments of `TPUClusterResolver`."""
  name: str
  zone: Optional[str] = None
  project: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """Validated `custom_config` of a TPUTrainer (see the module docstring)."""
  use_tpu: bool = False
  tpu: Optional[TpuSpec] = None
  train_batch_size: int = 64
  eval_batch_size: int = 64
  predict_batch_size: int = 8
  iterations_per_loop: int = 100
  host_iterations_per_loop: int = 1
  num_shards: Optional[int] = None
  per_host_input: str = 'PER_HOST_V2'
  eval_on_tpu: bool = True
  export_to_tpu: bool = True
  export_saved_model_api_version: int = 1
  eval_strategy: str = 'train_and_evaluate'
  save_checkpoints_steps: Optional[int] = None
  keep_checkpoint_max: Optional[int] = None
  label_key: Optional[str] = None
  raw_label_key: Optional[str] = None
  checkpoint_dir: Optional[str] = None
  allow_nonfinite_metrics: bool = False
  allow_nonfinite_variables: bool = False
  input_cache: str = 'auto'
  params: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @classmethod
  def from_custom_config(
      cls,
      custom_config: Optional[Mapping[str, Any]],
      environ: Optional[Mapping[str, str]] = None) -> 'TrainerConfig':
    """Validates a raw `custom_config` dict and returns the typed config.

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
    unknown = sorted(set(raw) - set(_FIELD_NAMES))
    if unknown:
      raise ConfigError(
          f'Unknown custom_config key(s) {unknown}. Accepted keys: '
          f'{sorted(_FIELD_NAMES)}.')

    tpu = _tpu_spec(raw.get('tpu'))
    for variable in (TPU_NAME_ENV, GKE_TPU_ENDPOINTS_ENV):
      if tpu is None and environ.get(variable):
        tpu = TpuSpec(name=environ[variable])
    use_tpu = raw.get('use_tpu')
    if use_tpu is None:
      use_tpu = tpu is not None
    else:
      use_tpu = _bool('use_tpu', use_tpu)

    config = cls(
        use_tpu=use_tpu,
        tpu=tpu,
        train_batch_size=_positive_int(
            'train_batch_size', raw.get('train_batch_size', 64)),
        eval_batch_size=_positive_int(
            'eval_batch_size', raw.get('eval_batch_size', 64)),
        predict_batch_size=_positive_int(
            'predict_batch_size', raw.get('predict_batch_size', 8)),
        iterations_per_loop=_positive_int(
            'iterations_per_loop', raw.get('iterations_per_loop', 100)),
        host_iterations_per_loop=_positive_int(
            'host_iterations_per_loop', raw.get('host_iterations_per_loop',
                                                1)),
        num_shards=_optional_positive_int('num_shards', raw.get('num_shards')),
        per_host_input=_choice('per_host_input',
                               raw.get('per_host_input', 'PER_HOST_V2'),
                               PER_HOST_INPUT_MODES),
        eval_on_tpu=_bool('eval_on_tpu', raw.get('eval_on_tpu', True)),
        export_to_tpu=_bool('export_to_tpu', raw.get('export_to_tpu', True)),
        export_saved_model_api_version=_choice(
            'export_saved_model_api_version',
            raw.get('export_saved_model_api_version', 1), EXPORT_API_VERSIONS),
        eval_strategy=_choice('eval_strategy',
                              raw.get('eval_strategy', 'train_and_evaluate'),
                              EVAL_STRATEGIES),
        save_checkpoints_steps=_optional_positive_int(
            'save_checkpoints_steps', raw.get('save_checkpoints_steps')),
        keep_checkpoint_max=_optional_non_negative_int(
            'keep_checkpoint_max', raw.get('keep_checkpoint_max')),
        label_key=_optional_str('label_key', raw.get('label_key')),
        raw_label_key=_optional_str('raw_label_key',
                                    raw.get('raw_label_key')),
        checkpoint_dir=_checkpoint_dir(raw.get('checkpoint_dir')),
        allow_nonfinite_metrics=_bool(
            'allow_nonfinite_metrics', raw.get('allow_nonfinite_metrics',
                                               False)),
        allow_nonfinite_variables=_bool(
            'allow_nonfinite_variables',
            raw.get('allow_nonfinite_variables', False)),
        input_cache=_choice('input_cache', raw.get('input_cache', 'auto'),
                            INPUT_CACHE_MODES),
        params=_params(raw.get('params')),
    )
    config.check_shard_divisibility()
    config.check_host_loop()
    return config

  @property
  def host_loop_iterations(self) -> int:
    """Steps per session.run of the host loop; 1 (no loop) on TPU."""
    return 1 if self.use_tpu else self.host_iterations_per_loop

  def check_host_loop(self) -> None:
    """Checkpoints of the host loop come at loop ends: steps must align."""
    iterations = self.host_loop_iterations
    if (iterations > 1 and self.save_checkpoints_steps is not None and
        self.save_checkpoints_steps % iterations):
      raise ConfigError(
          f"custom_config['save_checkpoints_steps']="
          f'{self.save_checkpoints_steps} is not a multiple of '
          f"custom_config['host_iterations_per_loop']={iterations}: "
          'checkpoints are written at the ends of host loops. Use a '
          f'multiple of {iterations}, or a smaller host_iterations_per_loop.')

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


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(TrainerConfig))


def _bool(key: str, value: Any) -> bool:
  if not isinstance(value, bool):
    raise ConfigError(
        f'custom_config[{key!r}] must be true or false, got {value!r}.')
  return value


def _positive_int(key: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise ConfigError(
        f'custom_config[{key!r}] must be a positive integer, got {value!r}.')
  _check_int64(key, value)
  return value


def _check_int64(key: str, value: int) -> None:
  # TensorFlow holds sizes and steps in int64; a larger Python int passes
  # every other check and fails deep inside TensorFlow instead.
  if value > MAX_INT64:
    raise ConfigError(
        f'custom_config[{key!r}]={value} is too large: TensorFlow holds it '
        f'in a 64-bit integer, so it must be at most {MAX_INT64}.')


def _optional_positive_int(key: str, value: Any) -> Optional[int]:
  return None if value is None else _positive_int(key, value)


def _optional_non_negative_int(key: str, value: Any) -> Optional[int]:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise ConfigError(
        f'custom_config[{key!r}] must be an integer >= 0 (0: keep all), got '
        f'{value!r}.')
  _check_int64(key, value)
  return value


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


def _tpu_spec(value: Any) -> Optional[TpuSpec]:
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
  return TpuSpec(**value)


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
