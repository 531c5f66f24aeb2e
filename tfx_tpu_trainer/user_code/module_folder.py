"""A `module_file`'s folder as a wheel: its modules and the packages beside it."""

import os
import shutil
import tempfile
from typing import List, Optional

from absl import logging
from tfx.components.util import udf_utils
from tfx.dsl.io import fileio

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import wheels

__all__ = ['ModuleFolderError', 'package_folders', 'package_module_file',
           'ModuleFolderDependency']

# Marks a folder that is a Python environment, not the user's code.
_ENVIRONMENT_MARKERS = ('pyvenv.cfg', 'site-packages')


class ModuleFolderError(errors.TPUTrainerError, ValueError):
  """The module file's folder cannot be packaged."""


def _holds_python(directory: str) -> bool:
  for root, subdirectories, files in os.walk(directory):
    subdirectories[:] = [d for d in subdirectories
                         if not d.startswith(('.', '__pycache__'))]
    if any(name.endswith('.py') for name in files):
      return True
  return False


def package_folders(module_dir: str) -> List[str]:
  """The folders beside a module that it can import as packages.

  Those whose name is a Python identifier and that hold .py files (at any
  depth: namespace packages too), except Python environments (a folder
  with `pyvenv.cfg` or `site-packages`).
  """
  folders = []
  for name in sorted(os.listdir(module_dir)):
    path = os.path.join(module_dir, name)
    if (not os.path.isdir(path) or not name.isidentifier() or
        name == '__pycache__' or
        any(os.path.exists(os.path.join(path, marker))
            for marker in _ENVIRONMENT_MARKERS)):
      continue
    if _holds_python(path):
      folders.append(name)
  return folders


def _build(component_id: str, module_dir: str, folders: List[str],
           pipeline_root: str) -> str:
  """The wheel of the folder's top-level modules and its package folders."""
  build_dir = tempfile.mkdtemp(prefix='tpu-trainer-module-wheel-')
  try:
    files, py_modules = [], []
    for name in sorted(os.listdir(module_dir)):
      # What `import` can name: `resnet_main.orig.py` is no module.
      if (name.endswith('.py') and name[:-len('.py')].isidentifier() and
          os.path.isfile(os.path.join(module_dir, name))):
        shutil.copyfile(os.path.join(module_dir, name),
                        os.path.join(build_dir, name))
        files.append(name)
        if name != '__init__.py':
          py_modules.append(name[:-len('.py')])
    for folder in folders:
      files.extend(wheels.copy_sources(os.path.join(module_dir, folder),
                                       os.path.join(build_dir, folder)))
    return wheels.build(build_dir, files, component_id, py_modules, folders,
                        pipeline_root)
  finally:
    shutil.rmtree(build_dir, ignore_errors=True)


def package_module_file(component_id: str, module_file: str,
                        pipeline_root: str) -> str:
  """Packages the module file's folder; returns the `module_path` property.

  Args:
    component_id: the component's id (names the wheel, as TFX does).
    module_file: the module file (local or remote).
    pipeline_root: the wheel goes to `<pipeline_root>/_wheels`.

  Returns:
    `module@<wheel>`, what the executor installs and imports.

  Raises:
    ModuleFolderError: the wheel could not be built.
  """
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  local = os.path.abspath(io_utils.ensure_local(module_file))
  module_dir = os.path.dirname(local)
  folders = package_folders(module_dir)
  if not folders:
    return udf_utils.package_user_module_file(component_id, module_file,
                                              pipeline_root)[1]
  try:
    wheel = _build(component_id, module_dir, folders, pipeline_root)
  except wheels.WheelError as e:
    raise ModuleFolderError(
        f'module_file {module_file!r}: packaging its folder {module_dir} '
        f'(with the package folders {folders}) as a wheel failed: {e}') from e
  logging.info('Packaged module_file %s with the folders %s beside it as %s.',
               module_file, folders, wheel)
  name = os.path.splitext(os.path.basename(local))[0]
  return f'{name}@{wheel}'


class ModuleFolderDependency(udf_utils.UserModuleFilePipDependency):
  """TFX's module_file dependency, packaging the folders beside the module.

  Resolved as TFX resolves its own (LocalDagRunner runs, KubeflowDagRunner
  and KubeflowV2DagRunner compiles): `module_path` is set to the module in
  the wheel and `module_file` cleared, or nothing is packaged when TFX
  would not package (no pipeline root, a RuntimeParameter).
  """

  def resolve(self, pipeline_root: str) -> Optional[str]:
    properties = self.component.spec.exec_properties
    module_file = properties[self.module_file_key]
    if (not isinstance(module_file, str) or not module_file or
        not pipeline_root or not fileio.exists(module_file)):
      # TFX's checks and warnings, and what it does then.
      return super().resolve(pipeline_root)
    fileio.makedirs(pipeline_root)
    module_path = package_module_file(self.component.id, module_file,
                                      pipeline_root)
    properties[self.module_path_key] = module_path
    properties[self.module_file_key] = None
    return module_path.split('@', 1)[1]
