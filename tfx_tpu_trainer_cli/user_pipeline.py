"""`--pipeline FILE:FUNCTION`: a user's pipeline factory, loaded and checked."""

import ast
import contextlib
import inspect
import os
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from tfx_tpu_trainer import user_module
from tfx_tpu_trainer_cli import common

__all__ = ['FLAG', 'parse_spec', 'check_spec', 'load_function',
           'load_pipeline']

FLAG = '--pipeline'
_MODULE_NAME = '_tfx_tpu_trainer_user_pipeline'
# Module-level calls that can bind names the source does not show.
_DYNAMIC_BINDERS = ('exec', 'globals', 'locals', 'vars', 'setattr',
                    '__import__')
_FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _ProcessExit(BaseException):
  """`os._exit(code)` called by the pipeline file, turned into an error."""

  def __init__(self, code: int):
    super().__init__(code)
    self.code = code

  def __str__(self) -> str:
    return f'it called os._exit({self.code!r})'


@contextlib.contextmanager
def _exit_refused() -> Iterator[None]:
  """`os._exit` raises instead of ending this process, for the block.

  The pipeline file runs in this process (its pipeline is what runs), so an
  `os._exit()` in it would end `run` or `compile` with its code and no word;
  raised instead, it becomes a usage error naming the file.
  """
  original = os._exit  # pylint: disable=protected-access

  def refuse(code):
    raise _ProcessExit(code)

  os._exit = refuse  # pylint: disable=protected-access
  try:
    yield
  finally:
    os._exit = original  # pylint: disable=protected-access


def _interrupted(path: str, where: str) -> common.Interrupted:
  return common.Interrupted(
      f'{FLAG}: KeyboardInterrupt was raised {where} {path}; nothing ran.')


def parse_spec(spec: str) -> Tuple[str, str]:
  """`path/to/file.py:function` -> (absolute file path, function name)."""
  path, sep, function = spec.rpartition(':')
  if not sep or not path or not function.isidentifier():
    raise common.UsageError(
        f'{FLAG} {spec!r} is not FILE:FUNCTION (e.g. '
        'my_pipeline.py:create_pipeline): FUNCTION, a Python name after the '
        'last ":", takes no required arguments and returns a '
        'tfx.dsl.Pipeline.')
  path = os.path.abspath(path)
  if not os.path.isfile(path):
    raise common.UsageError(
        f'{FLAG}: the pipeline file {path!r} does not exist or is not a file.')
  return path, function


def check_spec(spec: str) -> Tuple[str, str]:
  """`parse_spec`, and the function read from the file's source, unrun.

  What the file alone says, before it (and TFX, TensorFlow) is imported: a
  FUNCTION the file never defines, or one with required arguments, is
  refused at once. A file that may define names in ways its source does not
  show (`from x import *`, `exec`, a module `__getattr__`, the name as a
  string) or that does not parse is left to `load_function`.

  Returns:
    (absolute file path, function name).

  Raises:
    common.UsageError: naming the file and the function.
  """
  path, function = parse_spec(spec)
  try:
    with open(path, 'rb') as f:
      tree = ast.parse(f.read(), filename=path)
  except (SyntaxError, ValueError, OSError):
    return path, function
  bindings = _top_level_bindings(tree)
  if bindings is None:
    return path, function
  for node in ast.walk(tree):
    if isinstance(node, ast.Global):  # `global NAME` in a function binds it.
      for name in node.names:
        bindings.setdefault(name, []).append(node)
    elif isinstance(node, ast.Constant) and node.value == function:
      return path, function  # setattr(..., 'NAME', ...) and the like.
  nodes = bindings.get(function)
  if not nodes:
    defined = sorted(n for n, found in bindings.items()
                     if any(isinstance(node, _FUNCTION_DEFS) for node in found))
    raise common.UsageError(
        f'{FLAG}: {path} defines no function {function!r} (functions it '
        f'defines: {defined}).')
  if len(nodes) == 1 and isinstance(nodes[0], _FUNCTION_DEFS):
    _check_no_required_arguments(nodes[0], os.path.basename(path))
  return path, function


def _top_level_bindings(tree: ast.Module) -> Optional[Dict[str, List[ast.AST]]]:
  """Name -> the module-level statements that bind it; None if unknowable."""
  bindings: Dict[str, List[ast.AST]] = {}

  def bind(name: str, node: ast.AST) -> None:
    bindings.setdefault(name, []).append(node)

  pending = list(tree.body)
  while pending:
    node = pending.pop()
    if isinstance(node, (ast.ImportFrom, ast.Import)):
      for alias in node.names:
        if alias.name == '*':
          return None
        bind(alias.asname or alias.name.split('.')[0], node)
    elif isinstance(node, _FUNCTION_DEFS + (ast.ClassDef,)):
      bind(node.name, node)
      continue  # Its body binds names of its own scope.
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
      bind(node.id, node)
    elif isinstance(node, ast.ExceptHandler) and node.name:
      bind(node.name, node)
    elif isinstance(node, (ast.Lambda,) + _COMPREHENSIONS):
      continue  # Their names are their own.
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
          node.func.id in _DYNAMIC_BINDERS):
      return None
    pending.extend(ast.iter_child_nodes(node))
  if '__getattr__' in bindings:
    return None
  return bindings


def _check_no_required_arguments(node: ast.AST, name: str) -> None:
  """A plain `def` whose parameters lack defaults is refused, as when run."""
  if node.decorator_list:
    return  # A decorator may give it another signature.
  arguments = node.args
  positional = arguments.posonlyargs + arguments.args
  required = [a.arg for a in positional[:len(positional) -
                                        len(arguments.defaults)]]
  required += [a.arg for a, default in zip(arguments.kwonlyargs,
                                           arguments.kw_defaults)
               if default is None]
  if required:
    raise common.UsageError(
        f'{FLAG}: {node.name}({ast.unparse(arguments)}) in {name} has '
        f'required argument(s) {required}; the function must take none (give '
        'them defaults, or wrap it in a function that passes them).')


def load_function(path: str, function: str) -> Callable[[], object]:
  """Imports `path` and returns its `function`, checked to take no arguments.

  Raises:
    common.UsageError: the file fails to import, or the function is missing,
      not callable, or takes required arguments.
  """
  name = os.path.basename(path)
  try:
    with _exit_refused():
      module = user_module.load_file(path, _MODULE_NAME, f'{FLAG}: {path}')
  except user_module.UserModuleError as e:
    if isinstance(e.__cause__, KeyboardInterrupt):
      raise _interrupted(path, 'while importing') from e
    if isinstance(e.__cause__, _ProcessExit):
      raise common.UsageError(
          f'{FLAG}: {path} failed to import: {e.__cause__} while being '
          'imported. A pipeline file must not end the process: remove the '
          'exit, or move script code under `if __name__ == "__main__":`.'
      ) from e
    raise common.UsageError(str(e)) from e
  factory = getattr(module, function, None)
  if factory is None:
    defined = sorted(n for n, v in vars(module).items()
                     if inspect.isfunction(v) and v.__module__ == _MODULE_NAME)
    raise common.UsageError(
        f'{FLAG}: {path} defines no function {function!r} (functions it '
        f'defines: {defined}).')
  if not callable(factory):
    raise common.UsageError(
        f'{FLAG}: {function} in {name} is a {type(factory).__name__}, not a '
        'function.')
  try:
    signature = inspect.signature(factory)
  except (TypeError, ValueError):
    signature = None
  if signature is not None:
    required = [p.name for p in signature.parameters.values()
                if p.default is p.empty and
                p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
      raise common.UsageError(
          f'{FLAG}: {function}{signature} in {name} has required '
          f'argument(s) {required}; the function must take none (give them '
          'defaults, or wrap it in a function that passes them).')
  return factory


def load_pipeline(spec: str):
  """Calls the factory `spec` names; returns its checked pipeline.

  Args:
    spec: `FILE:FUNCTION`.

  Returns:
    The `tfx.dsl.Pipeline`, with at least one TPUTrainer.

  Raises:
    common.UsageError: naming the file and the function.
  """
  path, function = parse_spec(spec)
  factory = load_function(path, function)
  # TFX and TensorFlow load here, after the file was found.
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import component  # pylint: disable=g-import-not-at-top
  name = os.path.basename(path)
  with user_module.first_on_path(os.path.dirname(path)):
    try:
      with _exit_refused():
        pipeline = factory()
    except KeyboardInterrupt as e:
      raise _interrupted(path, f'in {function}() of') from e
    except _ProcessExit as e:
      raise common.UsageError(
          f'{FLAG}: {function}() in {name} {e}: the function must return '
          'the pipeline, never end the process.') from e
    except (Exception, SystemExit) as e:  # pylint: disable=broad-except
      raise common.UsageError(
          f'{FLAG}: {function}() in {name} raised {type(e).__name__}: {e}'
      ) from e
  if not isinstance(pipeline, tfx.dsl.Pipeline):
    raise common.UsageError(
        f'{FLAG}: {function}() in {name} returned '
        f'{type(pipeline).__name__}, not a tfx.dsl.Pipeline; return the '
        'pipeline, e.g. `return tfx.dsl.Pipeline(pipeline_name=..., '
        'pipeline_root=..., components=[...])`.')
  try:
    component.tpu_trainers(pipeline)
  except component.NoTPUTrainerError as e:
    raise common.UsageError(f'{FLAG}: {function}() in {name}: {e}') from e
  return pipeline
