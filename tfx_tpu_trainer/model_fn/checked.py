"""Wraps the module's `model_fn` so that its failures name the module."""

from typing import Any, Callable, Mapping

import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import user_module as user_module_lib

ModelFn = Callable[..., tf.compat.v1.estimator.tpu.TPUEstimatorSpec]
_SHAPE_ERROR_WORDS = ('shape', 'rank', 'dimension', 'incompatible')
# How many feature names a note shows.
_NAMES_SHOWN = 5
# How many param names a note shows.
_PARAMS_SHOWN = 12


def label_shape_hint(labels: Any, error: BaseException) -> str:
  """A note for shape errors when the label comes as [batch, 1].

  TFX's schemas give a scalar feature the shape [1], so its labels reach the
  model_fn as [batch, 1]; code written after the Estimator guides often
  expects [batch].
  """
  shape = getattr(labels, 'shape', None)
  if (shape is None or shape.rank != 2 or shape[-1] != 1 or
      not any(word in str(error).lower() for word in _SHAPE_ERROR_WORDS)):
    return ''
  return (f' (Note: the labels reach the model_fn with shape {shape}, '
          '[batch, 1], as TFX schemas give a scalar feature the shape [1]; '
          'a model_fn written for [batch] labels can use '
          'tf.reshape(labels, [-1]).)')


def features_dict_hint(features: Any, error: BaseException) -> str:
  """A note for a model_fn that uses `features` as one tensor.

  TPUTrainer's input gives `features` as a dict of the example's features
  by name; model_fns written after single-tensor inputs (the tensorflow/tpu
  MNIST model's image) fail with "unsupported operand type(s) for /:
  'dict' and 'float'".
  """
  if (not isinstance(features, Mapping) or
      not isinstance(error, (TypeError, AttributeError, ValueError)) or
      "'dict'" not in str(error)):
    return ''
  names = sorted(features)
  shown = ', '.join(repr(name) for name in names[:_NAMES_SHOWN]) + (
      ', ...' if len(names) > _NAMES_SHOWN else '')
  return (f' (Note: features is a dict of the example\'s features by name '
          f'({shown}), not one tensor: take the one the model reads with '
          f"features[{names[0] if names else 'name'!r}], or combine several "
          'with tf.concat or tf.stack.)')


class RecordingParams(dict):
  """The params a model_fn gets: a dict that remembers the names it lacked."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.missed = []

  def __missing__(self, key):
    self.missed.append(key)
    raise KeyError(key)


def missing_param_hint(params: Any, error: BaseException) -> str:
  """A note for a KeyError of reading a name `params` lacks.

  A model ported from tensorflow/tpu reads its FLAGS and config from
  `params`; the note says which names params has and where the others go.
  Only for `RecordingParams` that saw the read.
  """
  if (not isinstance(error, KeyError) or len(error.args) != 1 or
      not isinstance(params, RecordingParams) or
      error.args[0] not in params.missed or
      not isinstance(error.args[0], str)):
    return ''
  key = error.args[0]
  if key == 'model_dir':
    where = 'TPUTrainer sets it to the training directory when it trains'
  elif key in config_lib.RUN_PARAMS:
    where = (f'TPUTrainer sets it from {key.replace("_steps", "_args")}'
             '.num_steps in a pipeline run; where that is unset or unknown '
             "(the preflight command), give it in custom_config['params']")
  else:
    where = (f"give it in custom_config['params'] ({{{key!r}: ...}}), as "
             'a tensorflow/tpu model passes its flags and config in params')
  names = sorted(map(str, params))
  shown = ', '.join(repr(name) for name in names[:_PARAMS_SHOWN]) + (
      ', ...' if len(names) > _PARAMS_SHOWN else '')
  return (f' (Note: the model_fn read params[{key!r}], which params do not '
          f'hold: {where}. params holds {shown}; see '
          'docs/reference/tpu_estimator.md, "Where flags go".)')


def model_fn_hints(features: Any, labels: Any, error: BaseException,
                   params: Any = None) -> str:
  """The notes for a model_fn's error: features dict, label shape, params."""
  return (features_dict_hint(features, error) +
          label_shape_hint(labels, error) +
          missing_param_hint(params, error))


def checked_model_fn(model_fn: user_module_lib.ModuleFunction) -> ModelFn:
  """Returns a model_fn that calls `model_fn` and checks what it returns.

  Args:
    model_fn: the module's `model_fn(features, labels, mode, params[, config])`.

  Returns:
    A model_fn for TPUEstimator with the full argument list, returning a
    TPUEstimatorSpec, or in PREDICT also a tf.estimator.EstimatorSpec
    (TPUEstimator exports both tag sets from one).
  """
  passes_config = 'config' in model_fn.parameters

  def tpu_model_fn(features, labels, mode, params, config):
    params = RecordingParams(params)
    kwargs = dict(features=features, labels=labels, mode=mode, params=params)
    if passes_config:
      kwargs['config'] = config
    try:
      spec = model_fn.fn(**kwargs)
    except user_module_lib.UserModuleError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise model_fn.error(
          f'raised {type(e).__name__} in mode {mode!r}: {e}'
          f'{model_fn_hints(features, labels, e, params)}') from e
    if isinstance(spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec):
      return spec
    if (isinstance(spec, tf_estimator.EstimatorSpec) and
        mode == tf_estimator.ModeKeys.PREDICT):
      # TPUEstimator exports both tag sets from it (tensorflow/tpu's ResNet
      # returns one); it refuses one only in predict() on a TPU, which
      # TPUTrainer does not call.
      return spec
    if isinstance(spec, tf_estimator.EstimatorSpec):
      raise model_fn.error(
          f'returned a tf.estimator.EstimatorSpec in mode {mode!r}; '
          'TPUEstimator needs a tf.compat.v1.estimator.tpu.TPUEstimatorSpec '
          '(eval metrics as `eval_metrics=(metric_fn, tensors)`). To keep an '
          'Estimator model_fn as it is, define `model_fn = tfx_tpu_trainer.'
          'estimator_adapter.to_tpu_model_fn(my_model_fn)` in the module.')
    raise model_fn.error(
        'must return a tf.compat.v1.estimator.tpu.TPUEstimatorSpec, got '
        f'{type(spec).__name__} in mode {mode!r}.')

  return tpu_model_fn
