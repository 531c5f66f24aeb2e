"""The keys of the input: batch sizes, the label, the default chain's cache."""

import dataclasses
from typing import Optional

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['BATCH_SIZE_KEYS', 'INPUT_CACHE_MODES', 'INPUT_SHUFFLE_MODES',
           'InputKeys']

BATCH_SIZE_KEYS = ('train_batch_size', 'eval_batch_size',
                   'predict_batch_size')
# The default input chain's cache modes (data/cache_policy.py).
INPUT_CACHE_MODES = ('auto', 'parsed', 'disk', 'serialized', 'none')
# How the default chain mixes training input it does not table
# (data/dataset_builders.py).
INPUT_SHUFFLE_MODES = ('window', 'record')


@dataclasses.dataclass(frozen=True)
class InputKeys:
  """The input: global batch sizes, the label, the default chain's cache.

  Attributes:
    train_batch_size: the global training batch size.
    eval_batch_size: the global evaluation batch size.
    predict_batch_size: the global prediction batch size.
    label_key: the label feature (default: the module's `LABEL_KEY`).
    raw_label_key: the raw feature served requests leave out.
    input_cache: the default input chain's cache.
    input_shuffle: how the default chain mixes streamed training input.
  """
  train_batch_size: int = declare.key(
      64, check=checks.positive_int,
      help='global training batch size; functions get the per-shard size in '
      '`params[\'batch_size\']`')
  eval_batch_size: int = declare.key(
      64, check=checks.positive_int, help='global evaluation batch size')
  predict_batch_size: int = declare.key(
      8, check=checks.positive_int, help='global prediction batch size')
  label_key: Optional[str] = declare.key(
      None, check=checks.optional_str, shown_default="module's `LABEL_KEY`",
      help='the label feature')
  raw_label_key: Optional[str] = declare.key(
      None, check=checks.optional_str,
      shown_default='found from the transform graph',
      help='the raw feature served requests leave out (e.g. `tips` for the '
      'label `tips_xf`)')
  input_cache: str = declare.key(
      'auto', check=lambda k, v: checks.choice(k, v, INPUT_CACHE_MODES),
      help="the default input chain's cache: `auto`, `parsed`, `disk`, "
      '`serialized` or `none`')
  input_shuffle: str = declare.key(
      'window', check=lambda k, v: checks.choice(k, v, INPUT_SHUFFLE_MODES),
      help='how streamed training input is mixed: `window` (chunks and '
      'windows of rows) or `record` (a record buffer)')
