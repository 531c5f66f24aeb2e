"""The model_fn TPUEstimator runs for any kind of user module."""

from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import checked
from tfx_tpu_trainer.model_fn import keras_adapter

__all__ = ['ModelFn', 'model_fn_for_module']

ModelFn = checked.ModelFn


def model_fn_for_module(module: user_module_lib.UserModule) -> ModelFn:
  """The TPU model_fn of a user module: its model_fn, else its Keras model.

  Args:
    module: the loaded user module (model_fn wins when both are defined).

  Returns:
    A model_fn for TPUEstimator.
  """
  if module.model_fn is not None:
    return checked.checked_model_fn(module.model_fn)
  return keras_adapter.make_keras_model_fn(module.build_keras_model)
