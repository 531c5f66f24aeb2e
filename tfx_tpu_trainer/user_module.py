"""Loads a TPUTrainer user module and checks it against the module contract."""

import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import os
import sys
import types
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from absl import logging

from tfx_tpu_trainer import errors
from tfx_tpu_trainer import stock_contract

__all__ = ['MODEL_FN', 'INPUT_FN', 'SERVING_INPUT_RECEIVER_FN',
           'BUILD_KERAS_MODEL', 'EMBEDDING_CONFIG_SPEC',
           'LABEL_KEY_ATTRIBUTE', 'TRAINER_FN',
           'USER_MODULE_FILE_KEY', 'RUN_FN', 'UserModuleError',
           'ModuleFunction', 'UserModule', 'module_name', 'load_user_module',
           'check_module', 'first_on_path', 'load_file', 'import_module_file']

MODEL_FN = 'model_fn'
INPUT_FN = 'input_fn'
SERVING_INPUT_RECEIVER_FN = 'serving_input_receiver_fn'
BUILD_KERAS_MODEL = 'build_keras_model'
# `embedding_config_spec(params)`: the TPU embedding tables of a model_fn
# module (model_fn/embedding_spec.py).
EMBEDDING_CONFIG_SPEC = 'embedding_config_spec'
LABEL_KEY_ATTRIBUTE = 'LABEL_KEY'
TRAINER_FN = 'trainer_fn'
# The exec property of TPUTrainer (component.TPUTrainerSpec) that names the
# user's module_file: TFX packages the module as a wheel and passes only
# `name@wheel` as module_path, so errors name the file the user wrote from it.
USER_MODULE_FILE_KEY = 'user_module_file'
RUN_FN = 'run_fn'

_REQUIRED_ARGS = {
    MODEL_FN: ('features', 'labels', 'mode', 'params'),
    INPUT_FN: ('file_pattern', 'data_accessor', 'schema', 'params'),
    SERVING_INPUT_RECEIVER_FN: ('params',),
    BUILD_KERAS_MODEL: ('params',),
    EMBEDDING_CONFIG_SPEC: ('params',),
}
# Arguments the estimator passes when the function names them.
_OPTIONAL_ARGS = {MODEL_FN: ('config',),
                  SERVING_INPUT_RECEIVER_FN: ('tf_transform_output',)}


class UserModuleError(errors.TPUTrainerError, ValueError):
  """The user module is missing, fails to import, or breaks the contract."""


@dataclasses.dataclass(frozen=True)
class ModuleFunction:
  """A function of the user module that names itself and its module in errors.

  Calling it calls the function by keyword; whatever it raises becomes one
  `UserModuleError` "NAME in MODULE_FILE raised TYPE: message". Problems
  with what it returns are reported through `error` or `blamed`, so the
  module's name is added once, here, and nowhere else.
  """
  name: str
  module_file: str
  fn: Callable[..., Any]

  @property
  def where(self) -> str:
    """'NAME in MODULE_FILE', the subject of every error about it."""
    return f'{self.name} in {self.module_file}'

  @property
  def parameters(self) -> Mapping[str, inspect.Parameter]:
    return inspect.signature(self.fn).parameters

  def __call__(self, **kwargs: Any) -> Any:
    try:
      return self.fn(**kwargs)
    except UserModuleError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise self.raised(e) from e

  def raised(self, error: BaseException, context: str = '') -> UserModuleError:
    """The error for an exception the function raised (`context`: e.g. mode)."""
    return UserModuleError(
        f'{self.where} raised {type(error).__name__}{context}: {error}')

  def error(self, problem: str,
            error_class: Optional[type] = None) -> 'UserModuleError':
    """The error 'NAME in MODULE_FILE <problem>'."""
    return (error_class or UserModuleError)(f'{self.where} {problem}')

  @contextlib.contextmanager
  def blamed(self) -> Iterator[None]:
    """Names this function in the UserModuleErrors raised in the block.

    For checks of what the function returned (a Keras model's compile
    settings, a dataset's structure), whose errors say what is wrong but not
    where; an error that already names the function passes unchanged.
    """
    try:
      yield
    except UserModuleError as e:
      if self.where in str(e):
        raise
      raise type(e)(f'{self.where}: {e}') from e


@dataclasses.dataclass(frozen=True)
class UserModule:
  """The parts of a user module that TPUTrainer uses."""
  module_file: str
  model_fn: Optional[ModuleFunction]
  build_keras_model: Optional[ModuleFunction]
  input_fn: Optional[ModuleFunction]
  serving_input_receiver_fn: Optional[ModuleFunction]
  label_key: Optional[str]
  # A stock-Trainer module: its trainer_fn(fn_args, schema), and the label
  # keys it names (LABEL_KEY, _LABEL_KEY transformed and raw), best first.
  trainer_fn: Optional[ModuleFunction] = None
  label_key_candidates: Tuple[str, ...] = ()
  # A stock-Trainer Keras module whose run_fn(fn_args) calls model.fit once:
  # TPUTrainer takes its model there (model_fn/keras_run_fn.py).
  run_fn: Optional[ModuleFunction] = None
  # `embedding_config_spec(params)`: the TPU embedding tables the model_fn
  # reads through TPU embedding columns (model_fn/embedding_spec.py).
  embedding_config_spec: Optional[ModuleFunction] = None


def module_name(exec_properties: Mapping[str, Any]) -> str:
  """How errors name the Trainer's module: the user's module_file.

  The one place that decides it: TPUTrainer's `user_module_file` exec
  property (USER_MODULE_FILE_KEY), else `module_file`, else `module_path`
  (`name@<wheel>` under TFX's wheel packaging).

  Args:
    exec_properties: the Trainer's execution properties.

  Returns:
    The path the user wrote, else module_file or module_path.
  """
  from tfx.types import standard_component_specs  # pylint: disable=g-import-not-at-top
  return (exec_properties.get(USER_MODULE_FILE_KEY) or
          exec_properties.get(standard_component_specs.MODULE_FILE_KEY) or
          exec_properties.get(standard_component_specs.MODULE_PATH_KEY) or
          'the user module')


def load_user_module(exec_properties: Dict[str, Any],
                     module_file_name: Optional[str] = None) -> UserModule:
  """Imports the module named by `module_file` or `module_path`.

  Args:
    exec_properties: the Trainer's execution properties.
    module_file_name: how errors name the module; default:
      `module_name(exec_properties)` (the user's module_file, also when TFX
      packaged it as a wheel and passes `name@wheel` as module_path).

  Returns:
    The checked user module.

  Raises:
    UserModuleError: when the module cannot be found or imported, or a
      function breaks the contract (what is wrong, where, what to do).
  """
  from tfx.types import standard_component_specs  # pylint: disable=g-import-not-at-top
  module_file = exec_properties.get(standard_component_specs.MODULE_FILE_KEY)
  module_path = exec_properties.get(standard_component_specs.MODULE_PATH_KEY)
  # run_fn= / trainer_fn=: the import path of the function, as the stock
  # Trainer takes it; the module that holds it is the user module.
  fn_key, fn_path = next(
      ((key, exec_properties[key]) for key in (RUN_FN, TRAINER_FN)
       if isinstance(exec_properties.get(key), str) and
       exec_properties.get(key)), (None, None))
  source = module_file_name or module_name(exec_properties)
  if module_path:
    module = _import_module_path(module_path, source)
  elif module_file:
    module = import_module_file(module_file)
  elif fn_path:
    module = _import_module_path(fn_path.rpartition('.')[0], source)
  else:
    raise UserModuleError(
        'TPUTrainer needs a module_file that defines model_fn (or '
        'build_keras_model), or run_fn=/trainer_fn= naming the stock '
        "Trainer's function by import path; none was given.")
  if fn_path and not module_file:
    module = _bound_function(module, fn_key, fn_path, source)
  return check_module(module, source)


def _bound_function(module: types.ModuleType, fn_key: str, fn_path: str,
                    source: str) -> types.ModuleType:
  """The module, with the function `fn_path` names as its `fn_key`.

  The stock Trainer calls the function the path names, whatever its name;
  a function named otherwise is seen under the contract's name.
  """
  function = fn_path.rpartition('.')[2]
  fn = getattr(module, function, None)
  if not callable(fn):
    raise UserModuleError(
        f'{fn_key}={fn_path!r}: the module {source} defines no function '
        f'{function!r}; pass the import path of the function the stock '
        f'Trainer would call as {fn_key}.')
  if function == fn_key:
    return module
  view = types.ModuleType(module.__name__, module.__doc__)
  view.__dict__.update(vars(module))
  setattr(view, fn_key, fn)
  return view


def check_module(module: types.ModuleType, source: str) -> UserModule:
  """Checks an imported module against the contract."""
  functions = {}
  for name in _REQUIRED_ARGS:
    fn = getattr(module, name, None)
    if fn is not None:
      _check_signature(fn, name, source)
      fn = ModuleFunction(name=name, module_file=source, fn=fn)
    functions[name] = fn
  trainer_fn = run_fn = None
  if functions[MODEL_FN] is None and functions[BUILD_KERAS_MODEL] is None:
    trainer_fn = _stock_trainer_fn(module, source)
    if trainer_fn.name == RUN_FN:
      trainer_fn, run_fn = None, trainer_fn
  if functions[EMBEDDING_CONFIG_SPEC] is not None and functions[
      MODEL_FN] is None:
    raise UserModuleError(_embedding_without_model_fn(source))
  label_key = getattr(module, LABEL_KEY_ATTRIBUTE, None)
  if label_key is not None and (not isinstance(label_key, str) or
                                not label_key):
    raise UserModuleError(
        f'{LABEL_KEY_ATTRIBUTE} in {source} must be a non-empty string, got '
        f'{label_key!r}.')
  return UserModule(
      module_file=source,
      model_fn=functions[MODEL_FN],
      build_keras_model=functions[BUILD_KERAS_MODEL],
      input_fn=functions[INPUT_FN],
      serving_input_receiver_fn=functions[SERVING_INPUT_RECEIVER_FN],
      label_key=label_key,
      trainer_fn=trainer_fn,
      label_key_candidates=(
          stock_contract.label_key_candidates(module)
          if trainer_fn is not None or run_fn is not None else ()),
      run_fn=run_fn,
      embedding_config_spec=functions[EMBEDDING_CONFIG_SPEC])


def _embedding_without_model_fn(source: str) -> str:
  """Why a module without model_fn cannot have TPU embedding tables."""
  return (
      f'{EMBEDDING_CONFIG_SPEC} in {source} needs a {MODEL_FN}(features, '
      'labels, mode, params) beside it: TPU embedding columns '
      '(tf.compat.v1.tpu.experimental.embedding_column) are read through '
      'tf.compat.v1.feature_column.input_layer (or DenseFeatures) inside a '
      'TPUEstimator model_fn, which TPUEstimator feeds with the looked-up '
      'activations on a TPU. A Keras model (build_keras_model, a Keras '
      'run_fn) or a stock trainer_fn has no such model_fn: it can embed '
      'dense integer ids with tf.keras.layers.Embedding (the whole table in '
      'every TPU core\'s memory, updated densely), as '
      'components/taxi_keras_module.py does. Write a model_fn module for '
      'TPU embeddings (components/taxi_embedding_module.py is one), or '
      f'remove {EMBEDDING_CONFIG_SPEC}.')


def _stock_trainer_fn(module: types.ModuleType, source: str) -> ModuleFunction:
  """The trainer_fn of a module written for the stock TFX Trainer.

  Or its Keras run_fn (named RUN_FN), whose model TPUTrainer takes at fit.

  Raises:
    UserModuleError: the module defines no trainer_fn: a run_fn that cannot
      be taken over (what to change), or nothing TPUTrainer runs.
  """
  trainer_fn = getattr(module, TRAINER_FN, None)
  if callable(trainer_fn):
    try:
      inspect.signature(trainer_fn).bind(None, None)
    except (TypeError, ValueError) as e:
      raise UserModuleError(
          f'{TRAINER_FN} in {source} must take (fn_args, schema) as the '
          f"stock TFX Trainer calls it: {e}.") from e
    return ModuleFunction(name=TRAINER_FN, module_file=source, fn=trainer_fn)
  run_fn = getattr(module, RUN_FN, None)
  if callable(run_fn):
    return _run_fn_estimator_builder(module, run_fn, source)
  raise UserModuleError(
      f'Module {source} defines neither model_fn(features, labels, mode, '
      'params) nor build_keras_model(params) (nor the stock Trainer\'s '
      'trainer_fn(fn_args, schema)). Define one of them.'
      f'{_named_model_fn_hint(module)}')


def _named_model_fn_hint(module: types.ModuleType) -> str:
  """A note naming the module's `*_model_fn` functions (`resnet_model_fn`).

  tensorflow/tpu's models name theirs after the model and hand it to
  TPUEstimator themselves; TPUTrainer looks for `model_fn`.
  """
  names = sorted(name for name, value in vars(module).items()
                 if name.endswith('_' + MODEL_FN) and callable(value))
  if not names:
    return ''
  return (f' It defines {", ".join(names)}: if that is the model_fn '
          f'TPUEstimator should run, name it model_fn, e.g. add '
          f'`model_fn = {names[0]}` at the end of the module.')


def _run_fn_estimator_builder(module: types.ModuleType, run_fn: Any,
                              source: str) -> ModuleFunction:
  """The function that builds the Estimator a run_fn trains, as trainer_fn.

  TFX's Estimator template builds its Estimator in
  `_create_train_and_eval_spec(fn_args, schema)` (the trainer_fn contract)
  and trains it in run_fn; TPUTrainer takes that Estimator as it takes
  trainer_fn's, so such a module runs unchanged. A Keras run_fn that calls
  model.fit once is returned itself (named RUN_FN): TPUTrainer takes its
  model at that call.

  Raises:
    UserModuleError: what to change: a Keras run_fn that cannot be taken
      over (build_keras_model), or a run_fn whose Estimator cannot be
      reached (`trainer_fn = ...`).
  """
  if not stock_contract.trains_an_estimator(run_fn):
    fits = stock_contract.fit_calls(module, run_fn)
    if fits == 1:
      return ModuleFunction(name=RUN_FN, module_file=source, fn=run_fn)
    builders = stock_contract.keras_model_builders(module)
    raise UserModuleError(stock_contract.run_fn_message(
        source, stock_contract.label_keys(module), builders,
        stock_contract.sparse_columns_in_dense_features(module, builders),
        fits=fits, calls=stock_contract.builder_calls(run_fn, builders)))
  builders = stock_contract.estimator_builders(module, run_fn)
  if len(builders) != 1:
    raise UserModuleError(
        stock_contract.estimator_run_fn_message(source, builders))
  logging.info(
      '%s in %s trains the Estimator that %s(fn_args, schema) returns; '
      'TPUTrainer takes that Estimator as it takes a trainer_fn\'s.',
      RUN_FN, source, builders[0])
  return ModuleFunction(name=builders[0], module_file=source,
                        fn=getattr(module, builders[0]))


def _check_signature(fn: Any, name: str, source: str) -> None:
  """Checks that `fn` can be called with the contract's named arguments."""
  expected = _REQUIRED_ARGS[name]
  usage = f'{name}({", ".join(expected)})'
  if not callable(fn):
    raise UserModuleError(
        f'{name} in {source} must be a function {usage}, got '
        f'{type(fn).__name__}.')
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError) as e:
    raise UserModuleError(
        f'Cannot read the signature of {name} in {source}: {e}') from e
  parameters = signature.parameters
  takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
  missing = [arg for arg in expected
             if arg not in parameters and not takes_kwargs]
  allowed = set(expected) | set(_OPTIONAL_ARGS.get(name, ()))
  extra_required = [
      p.name for p in parameters.values()
      if p.name not in allowed and p.default is p.empty and
      p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
  ]
  positional_only = [p.name for p in parameters.values()
                     if p.kind == p.POSITIONAL_ONLY]
  if missing or extra_required or positional_only:
    problems = []
    if missing:
      problems.append(f'missing argument(s) {missing}')
    if extra_required:
      problems.append(f'unexpected required argument(s) {extra_required}')
    if positional_only:
      problems.append(f'positional-only argument(s) {positional_only}')
    raise UserModuleError(
        f'{name}{signature} in {source} does not match the TPUTrainer '
        f'contract {usage}: {"; ".join(problems)}. The estimator passes '
        'these arguments by name.')


@contextlib.contextmanager
def first_on_path(directory: str) -> Iterator[None]:
  """`directory` first on sys.path (a loaded file may import its siblings)."""
  sys.path.insert(0, directory)
  try:
    yield
  finally:
    with contextlib.suppress(ValueError):
      sys.path.remove(directory)


def load_file(path: str, name: str,
              label: Optional[str] = None) -> types.ModuleType:
  """Imports the .py file at `path` as module `name`: the one way by path.

  As for a script, the file's folder is importable while it runs. The module
  is in sys.modules under `name` once it imported.

  Args:
    path: a local .py file.
    name: the module's name.
    label: how errors name the file (default `module_file '<path>'`).

  Raises:
    UserModuleError: the file is not Python or fails to import; also for
      SystemExit and KeyboardInterrupt (sys.exit(0) at import must fail the
      execution, not end the pipeline run with status 0).
  """
  label = label or f'module_file {path!r}'
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or spec.loader is None:
    raise UserModuleError(f'{label} is not an importable Python file.')
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  with first_on_path(os.path.dirname(os.path.abspath(path))):
    try:
      spec.loader.exec_module(module)
    except BaseException as e:  # pylint: disable=broad-except
      del sys.modules[name]
      raise UserModuleError(
          f'{label} failed to import: {_describe_import_error(e)}') from e
  return module


def import_module_file(module_file: str) -> types.ModuleType:
  """Imports a module file (local or remote) as the loader does.

  Raises:
    UserModuleError: the file does not exist or fails to import.
  """
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  if not io_utils.fileio.exists(module_file):
    raise UserModuleError(
        f'module_file {module_file!r} does not exist. Pass the path of a '
        'Python file that defines model_fn.')
  local_path = io_utils.ensure_local(module_file)
  module_name = os.path.splitext(os.path.basename(local_path))[0]
  module = load_file(local_path, module_name, f'module_file {module_file!r}')
  logging.info('Loaded user module %s from %s.', module_name, module_file)
  return module


def _describe_import_error(error: BaseException) -> str:
  if isinstance(error, SystemExit):
    return (f'it called sys.exit({error.code!r}) (SystemExit) while being '
            'imported. A module file must not exit the process: remove the '
            'exit, or move script code under `if __name__ == "__main__":`.')
  if isinstance(error, KeyboardInterrupt):
    return ('KeyboardInterrupt while it was being imported. A module file '
            'must not raise KeyboardInterrupt.')
  return f'{type(error).__name__}: {error}'


def _import_module_path(module_path: str, source: str) -> types.ModuleType:
  """Imports `name` or `name@wheel` (TFX's packaged user module)."""
  from tfx.components.util import udf_utils  # pylint: disable=g-import-not-at-top
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  module_name, wheels = udf_utils.decode_user_module_key(module_path)
  wheels = [io_utils.ensure_local(wheel) for wheel in wheels]
  # A packaged `package.module` is imported from its wheel with its package.
  packages = ({module_name.split('.')[0]} if wheels else set())
  try:
    with udf_utils.TempPipInstallContext(wheels):
      for name in [n for n in sys.modules
                   if n == module_name or n.split('.')[0] in packages]:
        del sys.modules[name]
      module = importlib.import_module(module_name)
  except BaseException as e:  # pylint: disable=broad-except
    # Also SystemExit and KeyboardInterrupt (see load_file).
    raise UserModuleError(
        f'module_file {source!r} failed to import: '
        f'{_describe_import_error(e)}') from e
  logging.info('Loaded user module %s (%s).', module_path, source)
  return module
