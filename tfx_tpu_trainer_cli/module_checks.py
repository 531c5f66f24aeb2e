"""`run`'s checks of the two module files, before any component runs."""

import inspect
from typing import Any, List, Optional, Sequence

from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import paths

PREPROCESSING_FLAG = '--preprocessing-module-file'
MODULE_FLAG = '--module-file'
LABEL_KEY_FLAG = '--label-key'
# The argument Transform binds when preprocessing_fn names it.
_CUSTOM_CONFIG_ARG = 'custom_config'


def check_preprocessing_module(module_file: str) -> Sequence[Any]:
  """Imports the preprocessing module and checks its preprocessing_fn.

  Args:
    module_file: the --preprocessing-module-file path.

  Returns:
    What its preprocessing_fn outputs, as read from its code
    (`stock_contract.preprocessing_outputs`).

  Raises:
    UsageError: the module fails to import, or has no preprocessing_fn that
      Transform can call as preprocessing_fn(inputs[, custom_config]).
  """
  # TFX and TensorFlow load here, after the other arguments are checked.
  from tfx_tpu_trainer.user_code import stock_contract  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.user_code import user_module  # pylint: disable=g-import-not-at-top
  try:
    module = user_module.import_module_file(module_file)
  except user_module.UserModuleError as e:
    raise common.UsageError(f'{PREPROCESSING_FLAG}: {e}') from e
  name = stock_contract.PREPROCESSING_FN
  fn = getattr(module, name, None)
  usage = f'{name}(inputs)'
  if fn is None:
    raise common.UsageError(
        f'{PREPROCESSING_FLAG}: module {module_file} defines no {usage}, the '
        'function TFX Transform calls with the raw features. Define '
        f'{usage} returning the dict of transformed features in it, or pass '
        f'the module that defines it with {PREPROCESSING_FLAG}.')
  try:
    signature = inspect.signature(fn)
    kwargs = ({_CUSTOM_CONFIG_ARG: None}
              if _CUSTOM_CONFIG_ARG in signature.parameters else {})
    signature.bind(None, **kwargs)
  except (TypeError, ValueError) as e:
    raise common.UsageError(
        f'{PREPROCESSING_FLAG}: {name} in {module_file} must be a function '
        f'{usage} (or {name}(inputs, custom_config)), as TFX Transform '
        f'calls it: {e}.') from e
  return stock_contract.preprocessing_outputs(module)


def check_trainer_module(module_file: str, label_key: Optional[str],
                         preprocessing_outputs: Sequence[Any],
                         preprocessing_module_file: str) -> None:
  """Loads the trainer module, checks the contract and the label it reads.

  What the TPUTrainer executor checks first, done before any component
  runs, so a module that breaks the contract fails in seconds, not after
  Transform. The label: unless the module has its own input_fn, the run
  needs a label key (--label-key, else the module's LABEL_KEY, else the
  label a stock-Trainer module names), and it must be a feature the
  preprocessing_fn outputs when that function names its label output.

  Args:
    module_file: the --module-file path.
    label_key: --label-key, if given.
    preprocessing_outputs: what check_preprocessing_module returned.
    preprocessing_module_file: its path, for messages.

  Raises:
    UsageError: naming the flag to change.
  """
  from tfx_tpu_trainer.user_code import user_module  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import check_server  # pylint: disable=g-import-not-at-top
  try:
    # First in a child process: an exit in the module's code must not end
    # this one (a bundled module's never does); then here, for the label
    # checks below.
    if not paths.is_bundled_module(module_file):
      check_server.check_in_child(module_file)
    module = user_module.load_user_module({'module_file': module_file})
  except user_module.UserModuleError as e:
    raise common.UsageError(f'{MODULE_FLAG}: {e}') from e
  if module.input_fn is not None:
    return  # The module's input decides its label.
  outputs = preprocessing_outputs
  label_outputs = [output for output in outputs if output.is_label]
  produced = (f'the label feature the preprocessing_fn of '
              f'{preprocessing_module_file} outputs'
              + (f': {label_outputs[0].key!r} (outputs['
                 f'{label_outputs[0].expression}])' if label_outputs else ''))
  suggestion = label_outputs[0].key if label_outputs else 'LABEL'
  if label_key:
    names, source = [label_key], LABEL_KEY_FLAG
  elif module.label_key:
    names, source = [module.label_key], f'LABEL_KEY in {module_file}'
  else:
    names = list(module.label_key_candidates)
    source = f'named by {module_file}'
  if not names:
    raise common.UsageError(
        f'{MODULE_FLAG}: module {module_file} names no label (no '
        f'{user_module.LABEL_KEY_ATTRIBUTE}, no input_fn), and TPUTrainer '
        f'reads the label from the examples by name. Pass {LABEL_KEY_FLAG} '
        f'{suggestion} ({produced}), or set '
        f'{user_module.LABEL_KEY_ATTRIBUTE} in the module.')
  if label_outputs and not _any_output(names, outputs):
    raise common.UsageError(
        f'{_flag_of(source)}: the label {_quoted(names)} ({source}) is not '
        f'among the features Transform will write: {produced}. Pass '
        f'{LABEL_KEY_FLAG} {suggestion}, or output the label under '
        f'{names[0]!r} in preprocessing_fn.')


def _any_output(names: Sequence[str], outputs) -> bool:
  keys = {output.key for output in outputs}
  return any(name in keys for name in names)


def _flag_of(source: str) -> str:
  return LABEL_KEY_FLAG if source == LABEL_KEY_FLAG else MODULE_FLAG


def _quoted(names: List[str]) -> str:
  return ' or '.join(repr(name) for name in names)
