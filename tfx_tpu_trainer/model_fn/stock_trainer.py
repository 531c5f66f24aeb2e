"""Modules written for the stock TFX Trainer (`trainer_fn`) under TPUTrainer."""

import contextlib
import dataclasses
import inspect
import shutil
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import attr
from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow.python.feature_column import feature_column_v2_types as fc_types  # pylint: disable=g-direct-tensorflow-import
from tensorflow_estimator.python.estimator import keras_lib
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import checked
from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.model_fn import patches
from tfx_tpu_trainer.model_fn import sparse_columns

__all__ = ['stock_model', 'check_for_tpu']

# trainer_fn's result key TFX reads the estimator from.
ESTIMATOR_KEY = 'estimator'
# Params TPUEstimator reserves (it sets them itself).
_RESERVED_PARAMS = ('batch_size', 'context')


class StockTrainerError(user_module_lib.UserModuleError):
  """A stock-Trainer module whose estimator TPUTrainer cannot take over."""


@dataclasses.dataclass(frozen=True)
class StockModel:
  """What TPUTrainer takes from a `trainer_fn` module's estimator.

  Attributes:
    model_fn: the TPU model_fn.
    params: the estimator's params (TPUTrainer's params go over them).
    kind: 'model_fn' or 'keras', for the log.
    source: how messages name the estimator ('the DNNLinearCombinedClassifier
      of trainer_fn in M').
    sparse_columns: (column name, what it is, where) of the categorical
      feature columns a TPU cannot run.
  """
  model_fn: Callable[..., Any]
  params: Dict[str, Any]
  kind: str
  source: str
  sparse_columns: Tuple[Tuple[str, str, str], ...] = ()


def _closure(fn: Callable[..., Any]) -> Dict[str, Any]:
  """The variables a function closes over, by name."""
  cells = getattr(fn, '__closure__', None) or ()
  names = getattr(getattr(fn, '__code__', None), 'co_freevars', ())
  values = {}
  for name, cell in zip(names, cells):
    try:
      values[name] = cell.cell_contents
    except ValueError:  # An empty cell.
      continue
  return values


def sparse_feature_columns(model_fn: Callable[..., Any]
                           ) -> Tuple[Tuple[str, str, str], ...]:
  """The categorical columns of a canned Estimator's model_fn.

  Read from the feature column lists its model_fn closes over
  (`linear_feature_columns`, `dnn_feature_columns`, `feature_columns`).
  """
  found = []
  for where, value in sorted(_closure(model_fn).items()):
    if not isinstance(value, (list, tuple)):
      continue
    for column in value:
      if (isinstance(column, fc_types.FeatureColumn) and
          sparse_columns.needs_sparse(column)):
        found.append((column.name, sparse_columns.column_kind(column), where))
  return tuple(found)


def sparse_columns_message(source: str,
                           columns: Sequence[Tuple[str, str, str]]) -> str:
  """The one error for categorical columns on TPU."""
  named = ', '.join(f'{name!r} ({kind} in {where})'
                    for name, kind, where in columns)
  return (
      f'{source} uses categorical feature column(s) {named}: they turn the '
      'ids into sparse tensors, whose data-dependent shapes a TPU '
      'computation cannot hold, so this Estimator cannot train on TPU. '
      'Replace the column(s) with dense features the model reads as ids: '
      'define build_keras_model(params) with a tf.keras.Input per id feature '
      'and a one-hot (tf.one_hot) or Embedding layer (as '
      'components/taxi_keras_module.py does), or a model_fn that one-hots '
      'the ids; or train this Estimator on CPU with '
      "custom_config['use_tpu']=False.")


def _with_sparse_check(model_fn: Callable[..., Any], source: str,
                       columns: Sequence[Tuple[str, str, str]]):
  """Raises the categorical-column error when built for TPU."""
  if not columns:
    return model_fn

  def tpu_model_fn(features, labels, mode, params, config=None):
    if params.get('use_tpu'):
      raise StockTrainerError(sparse_columns_message(source, columns))
    return model_fn(features, labels, mode, params, config)

  tpu_model_fn.__doc__ = model_fn.__doc__
  return tpu_model_fn


def _named_errors(model_fn: Callable[..., Any], source: str):
  """Errors of the estimator's model_fn name it (and the mode)."""

  def tpu_model_fn(features, labels, mode, params, config=None):
    try:
      return model_fn(features, labels, mode, params, config)
    except user_module_lib.UserModuleError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise StockTrainerError(
          f'{source} raised {type(e).__name__} in mode {mode!r}: {e}'
          f'{checked.model_fn_hints(features, labels, e)}') from e

  tpu_model_fn.__doc__ = model_fn.__doc__
  return tpu_model_fn


@contextlib.contextmanager
def _keras_models_recorded(made: List[Tuple[Any, Any]]):
  """Records (estimator, keras_model) of model_to_estimator calls.

  A `patches.patched` scope over `keras_lib.model_to_estimator` (what
  `tf.keras.estimator.model_to_estimator` calls), for this thread while
  trainer_fn runs: which estimator wraps which Keras model is then known
  from the call, not read from the estimator's closures.
  """

  def make_record(original):

    def model_to_estimator(*args, **kwargs):
      estimator = original(*args, **kwargs)
      arguments = inspect.signature(original).bind(*args, **kwargs).arguments
      made.append((estimator, arguments.get('keras_model')))
      return estimator

    return model_to_estimator

  with patches.patched(keras_lib, 'model_to_estimator', make_record):
    yield


def _keras_model_of(estimator: tf_estimator.Estimator,
                    made: Sequence[Tuple[Any, Any]]
                    ) -> Optional[tf.keras.Model]:
  """The Keras model `estimator` was made from by model_to_estimator, if any."""
  for made_estimator, model in made:
    if made_estimator is estimator and isinstance(model, tf.keras.Model):
      return model
  return None


def isolated_fn_args(fn_args: fn_args_utils.FnArgs,
                      scratch: str) -> fn_args_utils.FnArgs:
  """FnArgs whose output directories point to a scratch directory.

  The estimator trainer_fn builds may write there (model_to_estimator saves
  the Keras weights in its model_dir); TPUTrainer's outputs stay untouched.
  """
  return attr.evolve(fn_args, serving_model_dir=scratch, model_run_dir=scratch,
                     working_dir=scratch)


def _estimator_params(estimator: tf_estimator.Estimator,
                      where: str) -> Dict[str, Any]:
  params = dict(estimator.params or {})
  reserved = sorted(set(params) & set(_RESERVED_PARAMS))
  if reserved:
    raise StockTrainerError(
        f'{where}: the estimator\'s params hold {reserved}, which '
        'TPUEstimator sets itself (the batch size is custom_config '
        "train_batch_size/eval_batch_size). Remove them from params.")
  return params


def stock_model(trainer_fn: user_module_lib.ModuleFunction,
                fn_args: fn_args_utils.FnArgs, schema: Any) -> StockModel:
  """Calls `trainer_fn(fn_args, schema)` and adapts its estimator for TPU.

  Args:
    trainer_fn: the module's `trainer_fn`.
    fn_args: the run's FnArgs (output directories are replaced by a scratch
      directory for the call).
    schema: the raw schema proto, as the stock Trainer passes it.

  Returns:
    The TPU model_fn and the estimator's params.

  Raises:
    UserModuleError: trainer_fn raised, or returned no Estimator.
    StockTrainerError: the estimator cannot be taken over.
  """
  scratch = tempfile.mkdtemp(prefix='tpu-trainer-stock-')
  keras_estimators = []
  try:
    try:
      with _keras_models_recorded(keras_estimators):
        result = trainer_fn.fn(isolated_fn_args(fn_args, scratch), schema)
    except user_module_lib.UserModuleError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise trainer_fn.raised(e) from e
    estimator = (result.get(ESTIMATOR_KEY)
                 if isinstance(result, Mapping) else None)
    if not isinstance(estimator, tf_estimator.Estimator):
      raise trainer_fn.error(
          f'must return a dict whose {ESTIMATOR_KEY!r} is a '
          'tf.estimator.Estimator (the stock Trainer contract), got '
          + (f'{type(estimator).__name__} under {ESTIMATOR_KEY!r}.'
             if isinstance(result, Mapping) else
             f'{type(result).__name__}.'))
    return _adapt(trainer_fn, estimator,
                  _keras_model_of(estimator, keras_estimators))
  finally:
    shutil.rmtree(scratch, ignore_errors=True)


def _adapt(trainer_fn: user_module_lib.ModuleFunction,
           estimator: tf_estimator.Estimator,
           keras_model: Optional[tf.keras.Model]) -> StockModel:
  source = f'the {type(estimator).__name__} of {trainer_fn.where}'
  params = _estimator_params(estimator, trainer_fn.where)
  logging.info(
      'Taking the model_fn and params of %s; TPUTrainer uses its own '
      'RunConfig, model_dir, input and serving functions.', source)
  if isinstance(estimator, tf.compat.v1.estimator.tpu.TPUEstimator):
    return StockModel(model_fn=estimator._model_fn, params=params,  # pylint: disable=protected-access
                      kind='model_fn', source=source)
  if keras_model is not None:
    build = user_module_lib.ModuleFunction(
        name=trainer_fn.name, module_file=trainer_fn.module_file,
        fn=lambda params: keras_model)
    return StockModel(model_fn=keras_adapter.make_keras_model_fn(build),
                      params=params, kind='keras', source=source)
  model_fn = estimator._model_fn  # pylint: disable=protected-access
  columns = sparse_feature_columns(model_fn)
  adapted = estimator_spec_adapter.to_tpu_model_fn(
      model_fn, name=source, drop_v1_summaries=True)
  return StockModel(model_fn=_with_sparse_check(
      _named_errors(adapted, source), source, columns),
                    params=params, kind='model_fn', source=source,
                    sparse_columns=columns)


def check_for_tpu(model: StockModel) -> None:
  """Raises the categorical-column error before anything is built on TPU."""
  if model.sparse_columns:
    raise StockTrainerError(sparse_columns_message(model.source,
                                                   model.sparse_columns))
