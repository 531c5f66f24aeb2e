"""What a module written for the stock TFX Trainer names: read, never run.

The stock Trainer's module contracts (`trainer_fn` for an Estimator,
`run_fn` for Keras) say nothing of TPUTrainer's `LABEL_KEY`; these helpers
read what such a module does name, for the loader's messages and the label
key. Importing nothing heavy, they sit below `user_module`.
"""

from typing import Any, List, Sequence, Tuple


def label_key_candidates(module: Any) -> Tuple[str, ...]:
  """Label keys a stock module names: LABEL_KEY, else its transformed _LABEL_KEY.

  The TFX examples keep the raw label in `_LABEL_KEY` and name transformed
  features with `_transformed_name` (`tips` -> `tips_xf`).
  """
  candidates = []
  for attribute in ('LABEL_KEY', '_LABEL_KEY'):
    key = getattr(module, attribute, None)
    if not isinstance(key, str) or not key:
      continue
    transformed_name = getattr(module, '_transformed_name', None)
    if callable(transformed_name):
      try:
        transformed = transformed_name(key)
      except Exception:  # pylint: disable=broad-except
        transformed = None
      if isinstance(transformed, str) and transformed not in candidates:
        candidates.append(transformed)
    if key not in candidates:
      candidates.append(key)
  return tuple(candidates)


def keras_model_builders(module: Any) -> List[str]:
  """Functions of a module whose names say they build a Keras model."""
  return sorted(
      name for name, value in vars(module).items()
      if callable(value) and 'keras_model' in name and
      getattr(value, '__module__', None) == module.__name__)


def run_fn_message(module_file: str, label_keys: Sequence[str],
                   builders: Sequence[str] = ()) -> str:
  """What a module with the stock Trainer's `run_fn` must change."""
  label = (f' (its label: LABEL_KEY = {label_keys[0]!r}, or '
           "custom_config['label_key'])" if label_keys else
           " (name the label with LABEL_KEY or custom_config['label_key'])")
  model = (f'the model that run_fn builds with {", ".join(builders)}'
           if builders else 'the model that run_fn builds')
  return (
      f'Module {module_file} defines run_fn(fn_args), the stock TFX '
      "Trainer's contract for Keras: run_fn trains and saves the model "
      'itself, so TPUTrainer cannot run it on TPU. Define '
      f'build_keras_model(params) instead, returning {model}, compiled '
      '(params holds custom_config[\'params\'] and the tuned '
      f'hyperparameters); TPUTrainer feeds it from its own input '
      f'functions{label}, trains it and exports it. The input_fn, fit and '
      'save code of run_fn are not needed; keep run_fn for the stock Trainer.')
