"""Pushing a SavedModel as a version of its own under a base directory."""

import contextlib
import errno
import os
import time
from typing import Iterator, List, Optional
import uuid

from absl import logging
from tfx.dsl.io import fileio
from tfx.utils import io_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import attempt_lock

__all__ = ['STAGING_PREFIX', 'LOCK_SUFFIX', 'PushError', 'push_new_version',
           'remove_abandoned_staging']

STAGING_PREFIX = '.push-'
LOCK_SUFFIX = '.lock'
_SAVED_MODEL_PB = 'saved_model.pb'
# errno values of a destination this process may not write.
_NOT_WRITABLE_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


class PushError(errors.TPUTrainerError, OSError):
  """The push destination cannot be written."""


def _not_writable_reason(error: BaseException) -> Optional[str]:
  """`Read-only file system` (or permission denied) if `error` says so.

  Python's writes raise OSError with the errno; TensorFlow's file system
  (fileio on a local path) an OpError whose message ends in its strerror.
  """
  if isinstance(error, OSError) and error.errno in _NOT_WRITABLE_ERRNOS:
    return os.strerror(error.errno)
  return next((os.strerror(number) for number in _NOT_WRITABLE_ERRNOS
               if os.strerror(number) in str(error)), None)


@contextlib.contextmanager
def _writable_destination(base_directory: str) -> Iterator[None]:
  """A write the push destination refuses, as one PushError."""
  try:
    yield
  except PushError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    reason = _not_writable_reason(e)
    if reason is None:
      raise
    raise PushError(
        f'Cannot push the model to {base_directory}: the serving directory '
        f'is not writable ({reason}). No version was published. Make it '
        "writable, or set the Pusher's push_destination to a directory this "
        'process can write, then run the pipeline again.') from e


def push_new_version(model_path: str, base_directory: str) -> str:
  """Copies the SavedModel at `model_path` to a new version under the base.

  Args:
    model_path: the SavedModel directory.
    base_directory: the push destination's base directory.

  Returns:
    The version directory the model now lives in.

  Raises:
    PushError: the destination is read-only or not this process's to
      write (nothing published).
    DiskFullError: the destination filled (nothing published).
  """
  with _writable_destination(base_directory):
    fileio.makedirs(base_directory)
    remove_abandoned_staging(base_directory)
    return _push(model_path, base_directory)


def _push(model_path: str, base_directory: str) -> str:
  """Copies the model into a staging folder and claims a version for it."""
  name = f'{STAGING_PREFIX}{uuid.uuid4().hex}'
  staging = os.path.join(base_directory, name)
  lock = None
  if attempt_lock.is_lockable(base_directory):
    lock = attempt_lock.AttemptLock(base_directory, name + LOCK_SUFFIX)
    lock.acquire()
  try:
    _copy_model(model_path, staging, base_directory)
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
    if lock is not None:
      _remove_lock(lock)
  if taken:
    logging.warning('Model version(s) %s under %s were already taken (another '
                    'push in the same second); pushed as version %d.',
                    taken, base_directory, version)
  return serving_path


def _copy_model(model_path: str, staging: str, base_directory: str) -> None:
  """Copies the SavedModel into `staging`, `saved_model.pb` last.

  Raises:
    DiskFullError: the push destination filled (nothing is published; the
      caller removes the staging folder).
  """
  from tfx_tpu_trainer.training import disk_full  # pylint: disable=g-import-not-at-top
  with disk_full.translate_disk_full(
      'pushing the model', base_directory,
      'No version was published and the partial copy was removed. Free '
      f'space under {base_directory} (e.g. old model versions), or push to '
      'another serving directory, then run the pipeline again.',
      written=lambda: disk_full.bytes_under(staging)):
    io_utils.copy_dir(model_path, staging,
                      deny_regex_patterns=[r'saved_model\.pb'])
    if fileio.exists(os.path.join(model_path, _SAVED_MODEL_PB)):
      io_utils.copy_file(os.path.join(model_path, _SAVED_MODEL_PB),
                         os.path.join(staging, _SAVED_MODEL_PB))


def remove_abandoned_staging(base_directory: str) -> List[str]:
  """Removes what killed pushes left under `base_directory`.

  A staging directory (or lone lock file) whose lock no process holds
  belongs to a push that ended without cleaning up; one whose lock is held
  is a push still copying, and is left alone.

  Returns:
    The staging directories removed.
  """
  names = [n for n in fileio.listdir(base_directory)
           if n.startswith(STAGING_PREFIX)]
  if not attempt_lock.is_lockable(base_directory):
    if names:
      logging.warning(
          'Staging folders of earlier pushes are under %s: %s. On an object '
          'store no lock tells a killed push from a running one; delete them '
          'when no push runs.', base_directory, ', '.join(sorted(names)))
    return []
  removed = []
  for staging_name in sorted({n[:-len(LOCK_SUFFIX)] if n.endswith(LOCK_SUFFIX)
                              else n for n in names}):
    lock = attempt_lock.AttemptLock(base_directory,
                                    staging_name + LOCK_SUFFIX)
    if not lock.try_acquire():
      continue  # A push still copying.
    staging = os.path.join(base_directory, staging_name)
    if fileio.exists(staging):
      fileio.rmtree(staging)
      removed.append(staging)
    _remove_lock(lock)
  if removed:
    logging.warning('Removed %d staging folder(s) that killed pushes left '
                    'under %s: %s.', len(removed), base_directory,
                    ', '.join(removed))
  return removed


def _remove_lock(lock: attempt_lock.AttemptLock) -> None:
  """Deletes the lock file, then lets the lock go."""
  try:
    os.remove(lock.path)
  except FileNotFoundError:
    pass
  lock.release()


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
