"""A local run's private temporary folder, and those killed runs left."""

import contextlib
import os
import shutil
import tempfile
import time
from typing import List

from absl import logging as absl_logging

from tfx_tpu_trainer.training import attempt_lock

# The run's temporary files (TFX's module wheels and pip targets) go in a
# folder of this name under the pipeline root, removed when the run ends.
TMP_DIR_NAME = '_tmp'
_TMP_RUN_PREFIX = 'run-'
_TMP_GRACE_SECS = 60


@contextlib.contextmanager
def private_temp_dir(parent: str):
  """Points tempfile and TMPDIR (for subprocesses) at a fresh directory.

  TFX builds module wheels and pip-installs them into temporary directories
  it never removes; they go under `parent` and are deleted afterwards.
  """
  parent = os.path.abspath(parent)
  os.makedirs(parent, exist_ok=True)
  directory = tempfile.mkdtemp(prefix=_TMP_RUN_PREFIX, dir=parent)
  # Held while the run lasts; released by the kernel if the run is killed.
  lock = attempt_lock.AttemptLock(directory)
  lock.try_acquire()
  remove_abandoned_temp_dirs(parent)
  saved_tempdir, saved_env = tempfile.tempdir, os.environ.get('TMPDIR')
  tempfile.tempdir = directory
  os.environ['TMPDIR'] = directory
  try:
    yield directory
  finally:
    tempfile.tempdir = saved_tempdir
    if saved_env is None:
      os.environ.pop('TMPDIR', None)
    else:
      os.environ['TMPDIR'] = saved_env
    shutil.rmtree(directory, ignore_errors=True)
    lock.release()
    with contextlib.suppress(OSError):
      os.rmdir(parent)  # Only when no other run is using it.


def remove_abandoned_temp_dirs(parent: str) -> List[str]:
  """Removes the `run-*` temp folders of runs that were killed.

  A run holds a lock on its folder (attempt_lock.py) while it lasts; a
  killed run cannot remove its folder, and its lock went with it. Folders
  younger than `_TMP_GRACE_SECS` are kept: a run that just created its
  folder may not hold the lock yet.

  Args:
    parent: the `_tmp` folder of the pipeline root.

  Returns:
    The removed folders.
  """
  removed = []
  for name in sorted(os.listdir(parent)):
    path = os.path.join(parent, name)
    if not name.startswith(_TMP_RUN_PREFIX) or not os.path.isdir(path):
      continue
    with contextlib.suppress(OSError):
      if time.time() - os.path.getmtime(path) < _TMP_GRACE_SECS:
        continue
      lock = attempt_lock.AttemptLock(path)
      if lock.try_acquire():
        shutil.rmtree(path, ignore_errors=True)
        lock.release()
        removed.append(path)
  if removed:
    absl_logging.info('Removed the temporary folders of killed runs: %s',
                      removed)
  return removed
