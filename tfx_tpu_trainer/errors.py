"""The base of every error TPUTrainer raises; `fail_on_exit` for user code."""

import functools
import re
from typing import Any, Callable, Dict

__all__ = ['TPUTrainerError', 'first_line', 'ModuleExitError', 'fail_on_exit']

# The `{{function_node ...}}` prefix of errors raised inside a tf.function,
# and the ` [Op:...]` suffix of eager op errors.
_FUNCTION_NODE = re.compile(r'\{\{[^}]*\}\}\s*')
_OP_SUFFIX = re.compile(r'\s*\[Op:[^\]]*\].*$', flags=re.S)


class TPUTrainerError(Exception):
  """The base: the message says what was wrong, where and what to do.

  Each subclass also derives from the builtin that fits (ValueError for a
  bad value, OSError for a full disk, RuntimeError for an environment that
  cannot run), so `except ValueError` and the like still catch it.
  """


def first_line(error: BaseException) -> str:
  """The first line of an error (TensorFlow's: without function node, op)."""
  message = getattr(error, 'message', None) or str(error)
  message = _OP_SUFFIX.sub('', _FUNCTION_NODE.sub('', message))
  lines = message.strip().splitlines()
  return lines[0] if lines else type(error).__name__


class ModuleExitError(TPUTrainerError, RuntimeError):
  """User code raised SystemExit or KeyboardInterrupt during a run."""


def fail_on_exit(name_module: Callable[[Dict[str, Any]], str]):
  """Decorates an executor's `Do`: an exit from user code fails it.

  `SystemExit` (a module calling `sys.exit(0)`) and `KeyboardInterrupt` are
  not `Exception`s: TFX's launcher would not see them as a failure, the
  execution would stay RUNNING in MLMD and `sys.exit(0)` would end the whole
  pipeline run with status 0. They become a ModuleExitError naming the module
  instead (`os._exit` cannot be caught).

  Args:
    name_module: how the error names the module, from `exec_properties`.

  Returns:
    The decorator.
  """

  def decorate(do):

    @functools.wraps(do)
    def wrapper(self, input_dict, output_dict, exec_properties):
      try:
        return do(self, input_dict, output_dict, exec_properties)
      except (SystemExit, KeyboardInterrupt) as e:
        what = (f'SystemExit({e.code!r})' if isinstance(e, SystemExit) else
                type(e).__name__)
        raise ModuleExitError(
            f'The execution was ended by {what} while running '
            f'{name_module(exec_properties)} (e.g. sys.exit() in model_fn or '
            'input_fn), so no model was exported. Module code must return or '
            'raise an exception, never exit the process.') from e

    return wrapper

  return decorate
