"""Refuses to publish a model whose final variables hold NaN or infinity."""

from typing import List, Optional, Tuple

import numpy as np
import tensorflow as tf

from tfx_tpu_trainer import errors

__all__ = ['check_final_variables']

CONFIG_KEY = 'allow_nonfinite_variables'


class NonFiniteVariablesError(errors.TPUTrainerError, ValueError):
  """A variable of the final checkpoint holds NaN or infinite values."""


def non_finite_variables(checkpoint: str) -> List[Tuple[str, int, int]]:
  """(name, non-finite count, size) of each float variable with NaN/inf.

  Args:
    checkpoint: a checkpoint prefix (`.../model.ckpt-200`).

  Returns:
    The variables in name order; empty when all are finite.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  dtypes = reader.get_variable_to_dtype_map()
  found = []
  for name in sorted(dtypes):
    if not dtypes[name].is_floating:
      continue
    value = np.asarray(reader.get_tensor(name))
    bad = int(value.size - np.count_nonzero(np.isfinite(value)))
    if bad:
      found.append((name, bad, int(value.size)))
  return found


def check_final_variables(model_dir: str, module_file: Optional[str]) -> None:
  """Raises NonFiniteVariablesError when the latest checkpoint is not finite.

  Args:
    model_dir: the directory the estimator trained in.
    module_file: the user's module, for the message.

  Raises:
    NonFiniteVariablesError: naming the first non-finite variable (the
      trainable weights before the optimizer's slots), how much of it is
      NaN/inf, the likely cause and the opt-out.
  """
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    return
  found = non_finite_variables(checkpoint)
  if not found:
    return
  found.sort(key=lambda item: _is_slot(item[0]))
  name, bad, size = found[0]
  others = [other for other, _, _ in found[1:]]
  raise NonFiniteVariablesError(
      f'The final checkpoint {checkpoint} has non-finite values in variable '
      f'{name!r} ({bad} of {size} values are NaN or infinite)'
      + (f' and in {len(others)} more ({", ".join(others[:5])}'
         f'{", ..." if len(others) > 5 else ""})' if others else '')
      + f', so no model was exported, although the loss and metrics of '
      f'model_fn in {module_file} stayed finite. Likely cause: NaN or '
      'infinite feature values in the training examples reaching the '
      'weights through the gradient (a loss that skips non-finite examples '
      'still passes NaN gradients); clean or impute them in the '
      'preprocessing_fn, or check the learning rate. To publish such a '
      f"model anyway set custom_config['{CONFIG_KEY}']=true.")


def _is_slot(name: str) -> bool:
  """Optimizer slots and bookkeeping sort after the model's own weights."""
  last = name.rsplit('/', 1)[-1]
  return last in ('Adam', 'Adam_1', 'Momentum', 'Adagrad', 'Ftrl', 'Ftrl_1',
                  'RMSProp', 'RMSProp_1') or 'optimizer' in name.lower()
