"""One attempt of an execution at a time owns its checkpoint directory."""

import errno
import fcntl
import os
import socket
import time
from typing import Optional

from absl import logging

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors

__all__ = ['is_lockable', 'AttemptLock']

# Bookkeeping name (checkpoints._BOOKKEEPING_PREFIX): never copied into
# model_run.
LOCK_FILE = '.tpu_trainer-attempt-lock'
# How often a waiting attempt polls and, in polls, how often it logs.
_POLL_SECS = 1.0
_LOG_EVERY_POLLS = 60


class LockPathError(errors.TPUTrainerError, OSError):
  """Something that is not a lock file is where the lock file goes."""


def is_lockable(model_dir: str) -> bool:
  """True for local paths, which `flock` can lock (not gs://, s3://, ...)."""
  return not config_lib.is_uri(model_dir)


class AttemptLock:
  """The exclusive lock of one attempt on one checkpoint directory."""

  def __init__(self, model_dir: str, lock_file: str = LOCK_FILE):
    self.model_dir = model_dir
    self.path = os.path.join(model_dir, lock_file)
    self._fd: Optional[int] = None

  @property
  def held(self) -> bool:
    return self._fd is not None

  def try_acquire(self) -> bool:
    """Takes the lock if free; never waits. True when this process holds it.

    The directory is (re)created first; a lock file that was deleted or
    replaced after it was opened (a cleanup removed the directory) does not
    count: the lock is taken again on the file now at the path.
    """
    if self._fd is not None:
      return True
    while True:
      os.makedirs(self.model_dir, exist_ok=True)
      try:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      except IsADirectoryError as e:
        raise LockPathError(
            f'{self.path} is a directory, where TPUTrainer keeps the lock '
            'file that lets one attempt at a time use this folder. Nothing '
            'of TPUTrainer creates such a directory: remove it (after '
            'checking what it holds) and run again.') from e
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
          return False
        raise
      try:
        same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f'host {socket.gethostname()} pid {os.getpid()} since '
             f'{time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}\n'
             .encode())
    self._fd = fd
    return True

  def acquire(self) -> None:
    """Takes the lock, waiting as long as another attempt holds it."""
    polls = 0
    while not self.try_acquire():
      if polls % _LOG_EVERY_POLLS == 0:
        logging.warning(
            'Another attempt of this execution holds the checkpoint '
            'directory %s (%s); waiting for it to end before resuming from '
            'its checkpoints (a killed holder releases it at once).',
            self.model_dir, self.holder() or 'holder unknown')
      polls += 1
      time.sleep(_POLL_SECS)
    if polls:
      logging.info('The other attempt ended; this attempt now holds %s.',
                   self.model_dir)

  def holder(self) -> str:
    """Who holds the lock, as its holder wrote it ('' when unknown)."""
    try:
      with open(self.path) as f:
        return f.read().strip()
    except OSError:
      return ''

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None

  def __enter__(self) -> 'AttemptLock':
    self.acquire()
    return self

  def __exit__(self, *unused_exc) -> None:
    self.release()
