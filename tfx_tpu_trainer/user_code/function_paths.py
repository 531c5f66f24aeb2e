"""`run_fn=`/`trainer_fn=` import paths: where they lead, and their wheel."""

import ast
import dataclasses
import importlib.machinery
import os
import shutil
import sys
import sysconfig
import tempfile
from typing import List, Optional, Tuple

from absl import logging
from tfx.dsl.components.base import base_component
from tfx.types import standard_component_specs

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import wheels

__all__ = ['FunctionPathError', 'FunctionLocation', 'parse', 'locate',
           'package', 'WheelDependency', 'WHEELS_DIR_NAME',
           'package_module_name']

# Where TFX puts the wheels of packaged module files, under the pipeline root.
WHEELS_DIR_NAME = wheels.WHEELS_DIR_NAME


class FunctionPathError(errors.TPUTrainerError, ValueError):
  """A `run_fn`/`trainer_fn` import path that TPUTrainer cannot follow."""


@dataclasses.dataclass(frozen=True)
class FunctionLocation:
  """Where `package.module.function` is, found without importing it.

  Attributes:
    argument: `run_fn` or `trainer_fn`, as the TPUTrainer was given it.
    path: the import path as given.
    module_name: `package.module`.
    function: `function`.
    file: the module's source file.
    import_root: the sys.path folder that holds the module's top package.
    installed: True when it is an installed distribution's (site-packages):
      the image installs it as it installs any library, so it is not packaged.
  """
  argument: str
  path: str
  module_name: str
  function: str
  file: str
  import_root: str
  installed: bool

  @property
  def top_level(self) -> str:
    return self.module_name.split('.')[0]

  @property
  def is_package_module(self) -> bool:
    return '.' in self.module_name


def parse(path: str, argument: str) -> Tuple[str, str]:
  """`a.b.fn` -> (`a.b`, `fn`).

  Raises:
    FunctionPathError: not a dotted path of Python names to a function.
  """
  module_name, _, function = path.rpartition('.')
  if not module_name or not all(
      part.isidentifier() for part in path.split('.')):
    raise FunctionPathError(
        f'TPUTrainer({argument}={path!r}): {argument} is the import path of '
        'the function, `package.module.function` (e.g. '
        f"{argument}='models.keras_model.model.{argument}', as the TFX "
        'templates name it), or pass the module file instead: '
        "module_file='models/keras_model/model.py'.")
  return module_name, function


def locate(path: str, argument: str) -> FunctionLocation:
  """Finds the module file of `path` on sys.path, importing nothing.

  Args:
    path: `package.module.function`.
    argument: `run_fn` or `trainer_fn` (for messages).

  Raises:
    FunctionPathError: naming the argument and what to pass: the module is
      not found on sys.path, or its file defines no such function.
  """
  module_name, function = parse(path, argument)
  spec = None
  search: Optional[List[str]] = None
  names = module_name.split('.')
  for depth, name in enumerate(names):
    spec = importlib.machinery.PathFinder.find_spec(name, search)
    if spec is None or (depth < len(names) - 1 and
                        not spec.submodule_search_locations):
      found = '.'.join(names[:depth])
      raise FunctionPathError(
          f'TPUTrainer({argument}={path!r}): the module {module_name!r} is '
          f'not found: no {name!r} '
          + (f'in the package {found!r} ' if found else 'on sys.path ')
          + f'(searched {search or sys.path}). Build the pipeline where '
          f'{names[0]!r} is importable (run from the folder that holds it, '
          'or put that folder on PYTHONPATH), or pass the file: '
          f"module_file='{os.path.join(*names)}.py'.")
    search = list(spec.submodule_search_locations or [])
  if not spec.origin or not spec.origin.endswith('.py'):
    raise FunctionPathError(
        f'TPUTrainer({argument}={path!r}): {module_name!r} is not a Python '
        f'source module ({spec.origin}); name a function of a .py module.')
  file = os.path.abspath(spec.origin)
  root = os.path.dirname(file)
  for _ in range(len(names) - 1 + (os.path.basename(file) == '__init__.py')):
    root = os.path.dirname(root)
  _check_defines(file, function, path, argument)
  return FunctionLocation(
      argument=argument, path=path, module_name=module_name,
      function=function, file=file, import_root=root,
      installed=_is_installed(root))


def package_module_name(file: str) -> Optional[Tuple[str, str]]:
  """(`package.module`, import root) of a .py file inside a package.

  None for a file whose folder has no `__init__.py` (a module of its own).
  A package's module imports its siblings through the package (`from
  models import features`), so it is imported by that name, not by path.
  """
  file = os.path.abspath(file)
  directory = os.path.dirname(file)
  names = [os.path.splitext(os.path.basename(file))[0]]
  while os.path.isfile(os.path.join(directory, '__init__.py')):
    names.insert(0, os.path.basename(directory))
    directory = os.path.dirname(directory)
  if len(names) == 1 or not all(n.isidentifier() for n in names):
    return None
  # The package its own imports name is its top (the TFX template's folder
  # holds an __init__.py too, but its modules import `models...`).
  imported = _imported_top_names(file)
  top = next((i for i, name in enumerate(names[:-1]) if name in imported), 0)
  for name in names[:top]:
    directory = os.path.join(directory, name)
  return '.'.join(names[top:]), directory


def _imported_top_names(file: str) -> set:
  """The top-level names of the file's absolute imports."""
  with open(file, encoding='utf-8') as f:
    try:
      tree = ast.parse(f.read(), file)
    except SyntaxError:
      return set()
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module.split('.')[0])
    elif isinstance(node, ast.Import):
      names.update(alias.name.split('.')[0] for alias in node.names)
  return names


def _check_defines(file: str, function: str, path: str,
                   argument: str) -> None:
  """The module's source binds `function` at its top level."""
  with open(file, encoding='utf-8') as f:
    try:
      tree = ast.parse(f.read(), file)
    except SyntaxError:
      return  # The import fails and says where; not this check's business.
  bound = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      bound.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      if any(alias.name == '*' for alias in node.names):
        return  # A star import may bind it.
      bound.update((alias.asname or alias.name).split('.')[0]
                   for alias in node.names)
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        bound.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    elif not isinstance(node, ast.Expr):
      return  # if/try at the top level may bind it: the import decides.
  if function not in bound:
    defined = sorted(n.name for n in tree.body
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    raise FunctionPathError(
        f'TPUTrainer({argument}={path!r}): {file} defines no {function!r} '
        f'(its functions: {defined}). Pass the import path of the function '
        f'the stock Trainer would call as {argument}.')


def _is_installed(root: str) -> bool:
  paths = sysconfig.get_paths()
  installed = {os.path.realpath(paths[key]) for key in ('purelib', 'platlib')
               if key in paths}
  return (os.path.realpath(root) in installed or
          os.path.basename(root) in ('site-packages', 'dist-packages'))


def package(location: FunctionLocation, component_id: str,
            pipeline_root: str) -> str:
  """A wheel of the module's top package under `<pipeline_root>/_wheels`.

  The whole top package (`models/` for `models.keras_model.model`), its
  .py files, so the module's imports of its siblings work wherever the
  wheel is installed; a top-level module is packaged as TFX packages a
  module_file (the .py files of its folder).

  Returns:
    The `module_path` exec property: `package.module@<wheel>`.

  Raises:
    FunctionPathError: the wheel could not be built.
  """
  from tfx.components.util import udf_utils  # pylint: disable=g-import-not-at-top
  if not location.is_package_module:
    _, module_path = udf_utils.package_user_module_file(
        component_id, location.file, pipeline_root)
    return module_path
  source_dir = os.path.join(location.import_root, location.top_level)
  build_dir = tempfile.mkdtemp(prefix='tpu-trainer-wheel-')
  try:
    files = wheels.copy_sources(source_dir,
                                os.path.join(build_dir, location.top_level))
    target = wheels.build(build_dir, files, component_id, [],
                          [location.top_level], pipeline_root)
  except wheels.WheelError as e:
    raise FunctionPathError(
        f'TPUTrainer({location.argument}={location.path!r}): packaging '
        f'{source_dir} as a wheel failed: {e}') from e
  finally:
    shutil.rmtree(build_dir, ignore_errors=True)
  logging.info('Packaged %s (for %s=%r) as %s.', source_dir,
               location.argument, location.path, target)
  return f'{location.module_name}@{target}'


class WheelDependency(base_component._PipDependencyFuture):  # pylint: disable=protected-access
  """The pip dependency TFX resolves as it compiles or runs the pipeline.

  As TFX's `UserModuleFilePipDependency` does for a module_file: at
  compile (KubeflowDagRunner) or run (LocalDagRunner) time, with the
  pipeline root known, the function's package becomes a wheel under
  `<pipeline_root>/_wheels` and the component's `module_path` names the
  module in it; the executor installs the wheel and imports the module.
  """

  def __init__(self, component, location: FunctionLocation):
    self.component = component
    self.location = location

  def resolve(self, pipeline_root: str) -> Optional[str]:
    if not pipeline_root:
      logging.warning('No pipeline root: %s=%r is imported by name, not '
                      'packaged.', self.location.argument, self.location.path)
      return None
    module_path = package(self.location, self.component.id, pipeline_root)
    self.component.spec.exec_properties[
        standard_component_specs.MODULE_PATH_KEY] = module_path
    return module_path.split('@', 1)[1]
