"""Modules with the stock Trainer's Keras `run_fn`: their model, taken at fit."""

import contextlib
import dataclasses
import shutil
import tempfile
from typing import Any, Callable, List, Optional, Tuple

import attr
from absl import logging
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.model_fn import patches
from tfx_tpu_trainer.model_fn import stock_trainer

__all__ = ['KerasRunFnError', 'FitCall', 'RunFnModel', 'take_fit_call',
           'run_fn_model']


class KerasRunFnError(user_module_lib.UserModuleError):
  """A Keras run_fn whose model TPUTrainer cannot take at its fit."""


@dataclasses.dataclass(frozen=True)
class FitCall:
  """What run_fn handed to `model.fit`, and the labels its input read.

  Attributes:
    model: the compiled Keras model fit was called on.
    label_keys: the `label_key` of each `TensorFlowDatasetOptions` run_fn
      gave `fn_args.data_accessor.tf_dataset_factory`, in call order (None
      for a dataset without a label).
  """
  model: Any
  label_keys: Tuple[Optional[str], ...]


@dataclasses.dataclass(frozen=True)
class RunFnModel:
  """The TPU model_fn of a Keras run_fn module and the label its input read."""
  model_fn: Callable[..., Any]
  label_key: Optional[str]
  source: str


class _FitReached(BaseException):
  """Stops run_fn at its fit (BaseException: run_fn's `except Exception`
  must not swallow it)."""


def _placeholder_dataset(options: Any,
                         schema: Optional[schema_pb2.Schema]) -> tf.data.Dataset:
  """Zeros shaped by `schema`, for a run_fn called outside a pipeline run.

  run_fn only builds its datasets; fit, which would read them, is stopped.
  """
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  features = {}
  if schema is not None:
    for name, spec in schema_utils.schema_as_feature_spec(
        schema).feature_spec.items():
      shape = getattr(spec, 'shape', None)
      features[name] = tf.zeros([1] + list(shape or []), spec.dtype)
  label_key = getattr(options, 'label_key', None)
  if label_key is not None and label_key in features:
    return tf.data.Dataset.from_tensors((features, features.pop(label_key)))
  return tf.data.Dataset.from_tensors(features)


def _recording_accessor(data_accessor: Optional[fn_args_utils.DataAccessor],
                        label_keys: List[Optional[str]]
                        ) -> fn_args_utils.DataAccessor:
  """`data_accessor` whose tf_dataset_factory records each `label_key`."""
  factory = data_accessor.tf_dataset_factory if data_accessor else None

  def tf_dataset_factory(file_pattern, options, schema=None):
    label_keys.append(getattr(options, 'label_key', None))
    if factory is None or not file_pattern:
      return _placeholder_dataset(options, schema)
    return factory(file_pattern, options, schema)

  if data_accessor is None:
    return fn_args_utils.DataAccessor(tf_dataset_factory=tf_dataset_factory,
                                      record_batch_factory=None,
                                      data_view_decode_fn=None)
  return data_accessor._replace(tf_dataset_factory=tf_dataset_factory)


@contextlib.contextmanager
def _fit_stopped(calls: List[Any]):
  """`tf.keras.Model.fit` records its model and stops run_fn (this thread)."""

  def make_fit(original):
    del original  # The model is trained by TPUEstimator, not by Keras.

    def fit(model, *args, **kwargs):
      del args, kwargs
      calls.append(model)
      raise _FitReached()

    return fit

  with patches.patched(tf.keras.Model, 'fit', make_fit):
    yield


def take_fit_call(run_fn: user_module_lib.ModuleFunction,
                  fn_args: fn_args_utils.FnArgs) -> FitCall:
  """Calls `run_fn(fn_args)` until its `model.fit`; returns what fit got.

  The output directories of fn_args point to a scratch directory for the
  call, and its data_accessor records the labels run_fn's input reads.

  Args:
    run_fn: the module's `run_fn`.
    fn_args: the run's FnArgs, as the stock Trainer gives them.

  Returns:
    The model and the labels.

  Raises:
    UserModuleError: run_fn raised before its fit.
    KerasRunFnError: run_fn returned without calling fit, or fit was called
      on something that is no Keras model.
  """
  label_keys, calls = [], []
  scratch = tempfile.mkdtemp(prefix='tpu-trainer-run-fn-')
  recorded = stock_trainer.isolated_fn_args(fn_args, scratch)
  recorded = attr.evolve(
      recorded, data_accessor=_recording_accessor(fn_args.data_accessor,
                                                  label_keys))
  try:
    with _fit_stopped(calls):
      try:
        run_fn.fn(recorded)
      except _FitReached:
        pass
      except user_module_lib.UserModuleError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        raise run_fn.raised(e, ' before its model.fit') from e
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  if not calls:
    raise run_fn.error(
        'returned without calling model.fit, so TPUTrainer found no model to '
        'train. Define build_keras_model(params) returning the compiled '
        'model instead.', KerasRunFnError)
  return FitCall(model=calls[0], label_keys=tuple(label_keys))


def _label_key(fit_call: FitCall, run_fn: user_module_lib.ModuleFunction,
               label_key: Optional[str]) -> Optional[str]:
  """The label: the given one, else the one run_fn's input read."""
  read = [key for key in fit_call.label_keys if key]
  if label_key is not None:
    return label_key
  if len(set(read)) > 1:
    logging.warning('%s reads the labels %s; TPUTrainer trains on the first.',
                    run_fn.where, sorted(set(read)))
  return read[0] if read else None


def run_fn_model(run_fn: user_module_lib.ModuleFunction,
                 fn_args: fn_args_utils.FnArgs,
                 label_key: Optional[str] = None) -> RunFnModel:
  """The TPU model_fn of the model a Keras `run_fn` compiles and fits.

  Args:
    run_fn: the module's `run_fn(fn_args)`.
    fn_args: the run's FnArgs.
    label_key: custom_config['label_key'] or LABEL_KEY, if given.

  Returns:
    The model_fn (keras_adapter's, over the captured model) and the label
    that run_fn's input reads.

  Raises:
    KerasRunFnError: the model cannot be taken (see take_fit_call).
  """
  fit_call = take_fit_call(run_fn, fn_args)
  model = fit_call.model
  if not isinstance(model, tf.keras.Model):
    raise run_fn.error(
        f'calls fit on a {type(model).__name__}, not a tf.keras Model.',
        KerasRunFnError)
  source = f'the {type(model).__name__} that {run_fn.where} fits'
  logging.info(
      'Took %s at its model.fit: TPUTrainer trains it with TPUEstimator and '
      'exports it with the serving_default (raw serialized examples through '
      'the transform graph) and transform_features signatures; the fit and '
      'save code of run_fn does not run.', source)
  build = user_module_lib.ModuleFunction(
      name=run_fn.name, module_file=run_fn.module_file,
      fn=lambda params: model)
  return RunFnModel(
      model_fn=keras_adapter.make_keras_model_fn(build),
      label_key=_label_key(fit_call, run_fn, label_key), source=source)
