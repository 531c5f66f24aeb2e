"""Modules with the stock Trainer's Keras `run_fn`: their model, taken at fit."""

import contextlib
import dataclasses
import shutil
import sys
import tempfile
from typing import Any, Callable, List, Mapping, Optional, Set, Tuple

import attr
from absl import logging
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer.user_code import stock_contract
from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.model_fn import patches
from tfx_tpu_trainer.model_fn import stock_trainer

__all__ = ['run_fn_model']


SERVING_SIGNATURE = keras_adapter.SERVING_SIGNATURE
# How tf.saved_model names the output of a signature that returns one tensor.
_SINGLE_OUTPUT_NAME = 'output_0'


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
    served_outputs: the output names of the serving_default signature
      run_fn saves the model with (() when none is known).
  """
  model: Any
  label_keys: Tuple[Optional[str], ...]
  served_outputs: Tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class RunFnModel:
  """The TPU model_fn of a Keras run_fn module and the label its input read."""
  model_fn: Callable[..., Any]
  label_key: Optional[str]
  source: str


class _SaveReached(BaseException):
  """Stops run_fn at its model.save (BaseException: run_fn's `except
  Exception` must not swallow it)."""


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
  label = features.pop(label_key, tf.zeros([1])) if label_key else None
  features = features or tf.zeros([1])  # No schema: any element will do.
  return tf.data.Dataset.from_tensors(
      features if label is None else (features, label))


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


@dataclasses.dataclass
class _Calls:
  """What run_fn passed to fit and save, and the attributes of each fitted
  model at its fit."""
  fitted: List[Any] = dataclasses.field(default_factory=list)
  attributes: List[Set[str]] = dataclasses.field(default_factory=list)
  saved: List[Any] = dataclasses.field(default_factory=list)
  signatures: List[Any] = dataclasses.field(default_factory=list)

  def restore_fitted(self) -> None:
    """Removes the layers run_fn set on its models after fit (TFX's serving
    code sets `model.tft_layer`, which tf.keras.models.clone_model cannot
    copy)."""
    for model, attributes in zip(self.fitted, self.attributes):
      for name in sorted(set(vars(model)) - attributes):
        if isinstance(vars(model)[name], tf.Module):
          with contextlib.suppress(AttributeError):
            delattr(model, name)


@contextlib.contextmanager
def _fit_and_save_taken(calls: _Calls):
  """In this thread: `Model.fit` records its model and trains nothing;
  `Model.save` records its signatures and stops run_fn."""

  def make_fit(original):
    del original  # TPUEstimator trains the model, not Keras.

    def fit(model, *args, **kwargs):
      del args, kwargs
      calls.fitted.append(model)
      calls.attributes.append(set(vars(model)))
      return tf.keras.callbacks.History()

    return fit

  def make_save(original):
    del original  # TPUTrainer exports the model itself.

    def save(model, *args, signatures=None, **kwargs):
      del args, kwargs
      calls.saved.append(model)
      calls.signatures.append(signatures)
      raise _SaveReached()

    return save

  with patches.all_patched([(tf.keras.Model, 'fit', make_fit),
                            (tf.keras.Model, 'save', make_save)]):
    yield


def _served_output_names(signatures: Any) -> Tuple[str, ...]:
  """The output names of the serving_default signature run_fn saves with.

  () when it has none or its outputs cannot be read. A signature returning
  one tensor (not a dict) serves it as 'output_0', as tf.saved_model does.
  """
  if isinstance(signatures, Mapping):
    function = signatures.get(SERVING_SIGNATURE)
  else:
    function = signatures
  if function is None:
    return ()
  try:
    if not hasattr(function, 'structured_outputs'):
      function = function.get_concrete_function()
    outputs = function.structured_outputs
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('The %s signature of run_fn cannot be traced (%s: %s); '
                    'the served outputs keep the Keras output names.',
                    SERVING_SIGNATURE, type(e).__name__, e)
    return ()
  if isinstance(outputs, Mapping):
    return tuple(str(name) for name in outputs)
  if isinstance(outputs, tf.Tensor):
    return (_SINGLE_OUTPUT_NAME,)
  return ()


def _builder_example(run_fn: user_module_lib.ModuleFunction) -> str:
  """', e.g. `def build_keras_model(params): return BUILDER(ARGS)`', or ''."""
  module = sys.modules.get(getattr(run_fn.fn, '__module__', None) or '')
  if module is None:
    return ''
  calls = stock_contract.builder_calls(
      run_fn.fn, stock_contract.keras_model_builders(module))
  return (f', e.g. `def build_keras_model(params): return {calls[0]}`'
          if calls else '')


def take_fit_call(run_fn: user_module_lib.ModuleFunction,
                  fn_args: fn_args_utils.FnArgs) -> FitCall:
  """Calls `run_fn(fn_args)`, taking what its model.fit and model.save get.

  fit trains nothing and returns an empty History; save writes nothing and
  ends run_fn. The output directories of fn_args point to a scratch
  directory for the call, and its data_accessor records the labels run_fn's
  input reads.

  Args:
    run_fn: the module's `run_fn`.
    fn_args: the run's FnArgs, as the stock Trainer gives them.

  Returns:
    The model, the labels and the served output names.

  Raises:
    UserModuleError: run_fn raised before its fit.
    KerasRunFnError: run_fn returned without calling fit, called it more
      than once, or saves another model than it fits.
  """
  label_keys, calls = [], _Calls()
  scratch = tempfile.mkdtemp(prefix='tpu-trainer-run-fn-')
  recorded = stock_trainer.isolated_fn_args(fn_args, scratch)
  recorded = attr.evolve(
      recorded, data_accessor=_recording_accessor(fn_args.data_accessor,
                                                  label_keys))
  try:
    with _fit_and_save_taken(calls):
      try:
        run_fn.fn(recorded)
      except _SaveReached:
        pass
      except user_module_lib.UserModuleError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        if not calls.fitted:
          raise run_fn.raised(e, ' before its model.fit') from e
        logging.warning(
            '%s raised %s after its model.fit, before model.save (%s); the '
            'served outputs keep the Keras output names.', run_fn.where,
            type(e).__name__, e)
    # Traced before restore_fitted: the signature may use what run_fn set.
    served = (_served_output_names(calls.signatures[0])
              if calls.fitted and calls.signatures else ())
  finally:
    calls.restore_fitted()
    shutil.rmtree(scratch, ignore_errors=True)
  if not calls.fitted:
    raise run_fn.error(
        'returned without calling model.fit, so TPUTrainer found no model to '
        'train. Define build_keras_model(params) returning the compiled '
        'model instead.', KerasRunFnError)
  if len(calls.fitted) > 1:
    raise run_fn.error(
        f'calls model.fit {len(calls.fitted)} times; TPUTrainer takes the '
        'model of one fit. Define build_keras_model(params) returning the '
        'compiled model instead.', KerasRunFnError)
  if calls.saved and calls.saved[0] is not calls.fitted[0]:
    raise run_fn.error(
        'saves another model than the one it fits (a model built after '
        'fit), so TPUTrainer cannot tell which model to train and export. '
        'Define build_keras_model(params) returning the compiled model to '
        f'train instead{_builder_example(run_fn)}.', KerasRunFnError)
  return FitCall(model=calls.fitted[0], label_keys=tuple(label_keys),
                 served_outputs=served)


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
  source = f'the {type(model).__name__} that {run_fn.where} fits'
  logging.info(
      'Took %s at its model.fit: TPUTrainer trains it with TPUEstimator and '
      'exports it with the serving_default (raw serialized examples through '
      'the transform graph, outputs named as run_fn serves them) and '
      'transform_features signatures; its fit trained nothing and its '
      'save wrote nothing.', source)
  build = user_module_lib.ModuleFunction(
      name=run_fn.name, module_file=run_fn.module_file,
      fn=lambda params: model)
  prediction_keys = {}
  if len(model.output_names) == 1 and len(fit_call.served_outputs) == 1:
    prediction_keys = {model.output_names[0]: fit_call.served_outputs[0]}
  return RunFnModel(
      model_fn=keras_adapter.make_keras_model_fn(build, prediction_keys),
      label_key=_label_key(fit_call, run_fn, label_key), source=source)
