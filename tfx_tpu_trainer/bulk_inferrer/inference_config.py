"""The TPUBulkInferrer's `custom_config`: one typed field per key, checked once."""

import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Union

from tfx_tpu_trainer import config as config_lib

__all__ = ['USE_TPU_KEY', 'TPU_KEY', 'BATCH_SIZE_KEY', 'DEFAULT_BATCH_SIZE',
           'MAX_BATCH_SIZE', 'KEYS', 'InferenceConfig', 'keys_table']

USE_TPU_KEY, TPU_KEY, BATCH_SIZE_KEY = 'use_tpu', 'tpu', 'batch_size'
KEYS = (USE_TPU_KEY, TPU_KEY, BATCH_SIZE_KEY)
# The examples of a full model call (benchmarks/bulk_inference.py measured
# it); a bundle's last call is padded to the next power of two below it.
DEFAULT_BATCH_SIZE = 256
# The most examples one call takes: a call holds its serialized examples and
# their outputs in memory (and a batch of 2**16 is past where larger batches
# score faster: benchmarks/bulk_inference.py).
MAX_BATCH_SIZE = 2**16
# Each key's default as users read it and what it does (markdown), as
# docs/reference/custom_config.md shows them (`keys_table`).
_KEY_DOCS = {
    USE_TPU_KEY: (
        'auto',
        'true when a TPU is named (`tpu`, `TPU_NAME`, GKE\'s '
        '`KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS`), as for the TPUTrainer: score the '
        '`{serve, tpu}` graph on the TPU; false: the `{serve}` graph on '
        'CPU/GPU'),
    TPU_KEY: (
        'none (`local` when `use_tpu`)',
        '`{name, zone, project}` for `TPUClusterResolver`, or just the name'),
    BATCH_SIZE_KEY: (
        f'`{DEFAULT_BATCH_SIZE}`',
        'examples per model call, at most `65536`; a full call gets exactly '
        'this many, the last batch of a bundle is padded to the next power '
        'of two (at most this many) and the padding\'s predictions dropped, '
        'so XLA compiles the TPU graph for a few sizes only'),
}


def _trainer_check(key: str):
  """The TPUTrainer's check of a key both components take (one definition)."""
  fields = {f.name: f for f in dataclasses.fields(config_lib.TrainerConfig)}
  return fields[key].metadata[config_lib.CHECK]


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
  """Validated `custom_config` of a TPUBulkInferrer.

  Attributes:
    use_tpu: score on the TPU with the `{serve, tpu}` graph; auto (absent or
      None): true when a TPU is named (`tpu`, `TPU_NAME`, GKE's
      `KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS`), as for the TPUTrainer.
    tpu: `{name, zone, project}` for `TPUClusterResolver`, or just the name
      (`local` on a TPU VM).
    batch_size: examples per model call, at most `MAX_BATCH_SIZE`; a
      smaller batch (the end of a bundle) is padded to the next power of
      two (at most `batch_size`), the padding's predictions dropped, so XLA
      compiles the TPU graph for a few shapes only.
  """
  use_tpu: bool = False
  tpu: Optional[config_lib.TPUSpec] = None
  batch_size: int = DEFAULT_BATCH_SIZE

  @classmethod
  def from_custom_config(
      cls, custom_config: Union[None, str, Mapping[str, Any]],
      environ: Optional[Mapping[str, str]] = None) -> 'InferenceConfig':
    """Checks a raw `custom_config` (a dict, or its JSON) and types it.

    Args:
      custom_config: the component's `custom_config` (None: all defaults).
      environ: where `TPU_NAME` is read (default `os.environ`).

    Returns:
      The config, `use_tpu` resolved.

    Raises:
      config_lib.ConfigError: naming the bad key and what is accepted.
    """
    environ = os.environ if environ is None else environ
    if isinstance(custom_config, str):
      custom_config = json.loads(custom_config) if custom_config else None
    if not isinstance(custom_config or {}, Mapping):
      raise config_lib.ConfigError(
          'The TPUBulkInferrer\'s custom_config must be a dict, got '
          f'{type(custom_config).__name__}.')
    raw = dict(custom_config or {})
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
      raise config_lib.ConfigError(
          f'Unknown TPUBulkInferrer custom_config key(s) {unknown}. Accepted '
          f'keys: {list(KEYS)}.')
    use_tpu = _trainer_check(USE_TPU_KEY)(USE_TPU_KEY, raw.get(USE_TPU_KEY))
    tpu = _trainer_check(TPU_KEY)(TPU_KEY, raw.get(TPU_KEY))
    for variable in (config_lib.TPU_NAME_ENV, config_lib.GKE_TPU_ENDPOINTS_ENV):
      if tpu is None and environ.get(variable):
        tpu = config_lib.TPUSpec(name=environ[variable])
    if use_tpu is None:
      use_tpu = tpu is not None
    batch_size = _trainer_check('train_batch_size')(
        BATCH_SIZE_KEY, raw.get(BATCH_SIZE_KEY, DEFAULT_BATCH_SIZE))
    if batch_size > MAX_BATCH_SIZE:
      raise config_lib.ConfigError(
          f'custom_config[{BATCH_SIZE_KEY!r}]={batch_size} is over the most '
          f'examples one model call takes ({MAX_BATCH_SIZE}): a call holds '
          'its batch of serialized examples and their outputs in memory. '
          f'Use a batch_size of at most {MAX_BATCH_SIZE} (default '
          f'{DEFAULT_BATCH_SIZE}).')
    return cls(use_tpu=use_tpu, tpu=tpu, batch_size=batch_size)


def keys_table() -> str:
  """The TPUBulkInferrer's keys as a markdown table (docs/reference/)."""
  rows = ['| key | default | meaning |', '|---|---|---|']
  for key in KEYS:
    shown_default, meaning = _KEY_DOCS[key]
    rows.append(f'| `{key}` | {shown_default} | {meaning} |')
  return '\n'.join(rows) + '\n'


if __name__ == '__main__':
  print(keys_table(), end='')
