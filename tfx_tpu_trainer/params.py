"""The `params` dict that model_fn and input_fn receive."""

from typing import Any, Dict, Mapping, Optional

from tfx_tpu_trainer import config as config_lib


def hyperparameter_values(
    hyperparameters: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
  """Flat name -> value mapping of a hyperparameters artifact's JSON.

  Accepts the KerasTuner `HyperParameters.get_config()` layout that TFX's
  Tuner writes (`{'space': [...], 'values': {...}}`, possibly nested under
  `config`), or a plain mapping of names to values.

  Args:
    hyperparameters: fn_args.hyperparameters.

  Returns:
    The hyperparameter values.
  """
  if not hyperparameters:
    return {}
  if isinstance(hyperparameters.get('config'), Mapping):
    hyperparameters = hyperparameters['config']
  if isinstance(hyperparameters.get('values'), Mapping):
    return dict(hyperparameters['values'])
  return dict(hyperparameters)


def build_params(config: config_lib.TrainerConfig,
                 hyperparameters: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
  """`custom_config['params']` with the tuned hyperparameters over them.

  TPUEstimator adds `batch_size` and `use_tpu` itself in every mode.

  Args:
    config: the validated trainer config.
    hyperparameters: fn_args.hyperparameters.

  Returns:
    The params.

  Raises:
    ConfigError: when a hyperparameter uses a name TPUEstimator reserves.
  """
  values = hyperparameter_values(hyperparameters)
  reserved = sorted(set(values) & set(config_lib.RESERVED_PARAMS_KEYS))
  if reserved:
    raise config_lib.ConfigError(
        f'Hyperparameter(s) {reserved} use names TPUEstimator reserves; '
        'rename them in the tuner search space.')
  params = dict(config.params)
  params.update(values)
  return params
