"""User code as a wheel under `<pipeline_root>/_wheels`, as TFX packages it."""

import hashlib
import os
import shutil
import subprocess
import sys
from typing import List, Sequence

from absl import logging

from tfx_tpu_trainer import errors

__all__ = ['WHEELS_DIR_NAME', 'WheelError', 'copy_sources', 'build']

# Where TFX puts the wheels of packaged module files, under the pipeline root.
WHEELS_DIR_NAME = '_wheels'
_SETUP_PY = '_tfx_tpu_trainer_generated_setup.py'
_SKIPPED_DIRS = ('.', '__pycache__')


class WheelError(errors.TPUTrainerError, RuntimeError):
  """setuptools could not build the wheel (the message is its output)."""


def copy_sources(source_dir: str, target_dir: str) -> List[str]:
  """Copies the .py files under `source_dir` to `target_dir`.

  Returns:
    Their paths relative to the parent of `target_dir` (the build folder).
  """
  copied = []
  build_dir = os.path.dirname(target_dir)
  for directory, subdirectories, files in os.walk(source_dir):
    subdirectories[:] = sorted(d for d in subdirectories
                               if not d.startswith(_SKIPPED_DIRS))
    for name in sorted(files):
      if not name.endswith('.py'):
        continue
      relative = os.path.relpath(os.path.join(directory, name), source_dir)
      destination = os.path.join(target_dir, relative)
      os.makedirs(os.path.dirname(destination), exist_ok=True)
      shutil.copyfile(os.path.join(directory, name), destination)
      copied.append(os.path.relpath(destination, build_dir))
  return copied


def _version(build_dir: str, files: Sequence[str]) -> str:
  """`0.0+<sha256 of the files' names and contents>`, as TFX versions them."""
  digest = hashlib.sha256()
  for relative in sorted(files):
    digest.update(relative.encode())
    with open(os.path.join(build_dir, relative), 'rb') as f:
      digest.update(f.read())
  return '0.0+' + digest.hexdigest()


def build(build_dir: str, files: Sequence[str], component_id: str,
          py_modules: Sequence[str], packages: Sequence[str],
          pipeline_root: str) -> str:
  """Builds the wheel of the sources in `build_dir`; stores it atomically.

  Args:
    build_dir: a scratch folder holding the sources (removed by the caller).
    files: the sources, relative to `build_dir` (they make the version).
    component_id: names the distribution `tfx-user-code-<id>`, as TFX does.
    py_modules: top-level modules (`.py` files at the top of `build_dir`).
    packages: top-level packages (folders of `build_dir`); their
      subpackages, with or without `__init__.py`, are included.
    pipeline_root: the wheel goes to `<pipeline_root>/_wheels`.

  Returns:
    The wheel's path.

  Raises:
    WheelError: with setuptools' output.
  """
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  include = [name for package in packages for name in (package,
                                                       package + '.*')]
  with open(os.path.join(build_dir, _SETUP_PY), 'w') as f:
    f.write(
        'import setuptools\n'
        'setuptools.setup(\n'
        f'    name={("tfx-user-code-" + component_id)!r},\n'
        f'    version={_version(build_dir, files)!r},\n'
        f'    py_modules={sorted(py_modules)!r},\n'
        f'    packages=setuptools.find_namespace_packages(include={include!r}),\n'
        ')\n')
  dist_dir = os.path.join(build_dir, '_dist')
  try:
    subprocess.run(
        [sys.executable, _SETUP_PY, '-q', 'bdist_wheel', '--bdist-dir',
         os.path.join(build_dir, '_bdist'), '--dist-dir', dist_dir],
        cwd=build_dir, check=True, capture_output=True, text=True)
  except subprocess.CalledProcessError as e:
    raise WheelError(e.stderr.strip()[-2000:]) from e
  (wheel,) = os.listdir(dist_dir)
  wheels_dir = os.path.join(pipeline_root, WHEELS_DIR_NAME)
  fileio.makedirs(wheels_dir)
  target = os.path.join(wheels_dir, wheel)
  fileio.copy(os.path.join(dist_dir, wheel), target + '.tmp', overwrite=True)
  fileio.rename(target + '.tmp', target, overwrite=True)
  logging.info('Built %s (%d source files).', target, len(files))
  return target
