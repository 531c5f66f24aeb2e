"""Pushing a SavedModel as a version of its own under a base directory."""

import os
import time
import uuid

from absl import logging
from tfx.dsl.io import fileio
from tfx.utils import io_utils

from tfx_tpu_trainer import config as config_lib

__all__ = ['STAGING_PREFIX', 'push_new_version']

STAGING_PREFIX = '.push-'
_SAVED_MODEL_PB = 'saved_model.pb'


def push_new_version(model_path: str, base_directory: str) -> str:
  """Copies the SavedModel at `model_path` to a new version under the base.

  Args:
    model_path: the SavedModel directory.
    base_directory: the push destination's base directory.

  Returns:
    The version directory the model now lives in.
  """
  fileio.makedirs(base_directory)
  staging = os.path.join(base_directory, f'{STAGING_PREFIX}{uuid.uuid4().hex}')
  try:
    io_utils.copy_dir(model_path, staging,
                      deny_regex_patterns=[r'saved_model\.pb'])
    if fileio.exists(os.path.join(model_path, _SAVED_MODEL_PB)):
      io_utils.copy_file(os.path.join(model_path, _SAVED_MODEL_PB),
                         os.path.join(staging, _SAVED_MODEL_PB))
    version = int(time.time())
    taken = []
    while True:
      serving_path = os.path.join(base_directory, str(version))
      if not fileio.exists(serving_path) and _claim(staging, serving_path):
        break
      taken.append(version)
      version += 1
  finally:
    if fileio.exists(staging):
      fileio.rmtree(staging)
  if taken:
    logging.warning('Model version(s) %s under %s were already taken (another '
                    'push in the same second); pushed as version %d.',
                    taken, base_directory, version)
  return serving_path


def _claim(staging: str, serving_path: str) -> bool:
  """Renames staging to serving_path; False when another push got there."""
  try:
    if config_lib.is_uri(serving_path):
      fileio.rename(staging, serving_path, overwrite=False)
    else:
      os.rename(staging, serving_path)  # Fails onto a non-empty directory.
  except OSError:
    if fileio.exists(serving_path):
      return False
    raise
  return True
