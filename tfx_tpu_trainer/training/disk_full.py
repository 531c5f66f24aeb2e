"""A disk that fills while TPUTrainer writes: one clear error, no leftovers."""

import contextlib
import errno
import os
import re
import shutil
from typing import Callable, Iterator, List, Optional, Tuple

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import errors

__all__ = ['DISK_FULL_ERRNOS', 'DISK_FULL_MESSAGES', 'DiskFullError',
           'is_disk_full', 'failed_path', 'free_space', 'free_inodes',
           'bytes_under',
           'remove_partial_writes', 'describe', 'translate_disk_full']

# errno values of a write that found no room.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# How TensorFlow's messages spell them (strerror of each errno), and what
# the error says happened.
_WHAT_FILLED = {
    os.strerror(errno.ENOSPC): 'The disk filled',
    os.strerror(errno.EDQUOT): 'The disk quota ran out',
    os.strerror(errno.EFBIG): 'A file reached the file-size limit',
}
DISK_FULL_MESSAGES = tuple(_WHAT_FILLED)
# TensorFlow's file errors start with the path: `<path>; <strerror>`.
_TF_PATH = re.compile(r'^\s*(\S[^;\n]*?); (?:' +
                      '|'.join(re.escape(m) for m in DISK_FULL_MESSAGES) +
                      ')')
# The temporary file of TensorFlow's atomic writes (file_io.py).
_TF_TEMP_FILE = re.compile(r'\.tmp[0-9a-f]{32}$')


class DiskFullError(errors.TPUTrainerError, OSError):
  """A write found no room: the disk or quota is full, or a file limit hit."""


def is_disk_full(error: BaseException) -> bool:
  """True when `error` (or what caused it) is a write that found no room."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
      return True
    if isinstance(error, (tf.errors.OpError, OSError)) and any(
        message in str(error) for message in DISK_FULL_MESSAGES):
      return True
    error = error.__cause__ or error.__context__
  return False


def failed_path(error: BaseException) -> Optional[str]:
  """The file a TensorFlow or OSError disk-full error names, if any."""
  if isinstance(error, OSError) and error.filename:
    return os.fsdecode(error.filename)
  match = _TF_PATH.match(errors.first_line(error))
  return match.group(1) if match else None


def _is_local(path: str) -> bool:
  return '://' not in path


def _existing(path: str) -> str:
  """`path`, or its nearest folder that exists."""
  while path and not os.path.exists(path):
    parent = os.path.dirname(path.rstrip('/'))
    if parent == path:
      break
    path = parent
  return path or '/'


def free_space(path: str) -> Optional[Tuple[int, int]]:
  """(free, total) bytes of the file system of `path`, None if not local."""
  if not _is_local(path):
    return None
  try:
    usage = shutil.disk_usage(_existing(path))
  except OSError:
    return None
  return usage.free, usage.total


def free_inodes(path: str) -> Optional[Tuple[int, int]]:
  """(free, total) inodes of the file system of `path`.

  None if not local, or if the file system does not count inodes (it
  reports a total of 0, as btrfs does).
  """
  if not _is_local(path):
    return None
  try:
    usage = os.statvfs(_existing(path))
  except OSError:
    return None
  return (usage.f_favail, usage.f_files) if usage.f_files else None


def bytes_under(path: str) -> int:
  """The bytes of the files under a local directory (0 if none)."""
  if not _is_local(path) or not os.path.isdir(path):
    return 0
  total = 0
  for directory, _, files in os.walk(path):
    for name in files:
      try:
        total += os.lstat(os.path.join(directory, name)).st_size
      except OSError:
        pass
  return total


def remove_partial_writes(directory: str) -> List[str]:
  """Removes TensorFlow's unfinished atomic-write files under `directory`."""
  removed = []
  if not _is_local(directory) or not os.path.isdir(directory):
    return removed
  for parent, _, files in os.walk(directory):
    for name in files:
      if _TF_TEMP_FILE.search(name):
        path = os.path.join(parent, name)
        try:
          os.remove(path)
          removed.append(path)
        except OSError as e:
          logging.warning('Could not remove the partial file %s: %s', path, e)
  return removed


def _size(count: float) -> str:
  """`count` bytes in bytes, KB, MB or GB."""
  if count < 1024:
    return f'{int(count)} bytes'
  for unit in ('KB', 'MB', 'GB'):
    count /= 1024
    if count < 1024 or unit == 'GB':
      break
  return f'{count:.1f} {unit}'


def _what_filled(path: str, reason: str) -> Tuple[str, str]:
  """What filled (bytes, inodes, a quota, a file limit) and the room left.

  ENOSPC with no inode left is the file system's inode table, not its
  bytes: many small files, which freeing bytes would not help.
  """
  space, inodes = free_space(path), free_inodes(path)
  if reason == os.strerror(errno.ENOSPC) and inodes and not inodes[0]:
    return ('The file system ran out of inodes',
            f'Its file system has 0 of {inodes[1]} inodes free (too many '
            'files, not too many bytes' +
            (f': {_size(space[0])} of {_size(space[1])} are free)'
             if space else ')'))
  filled = _WHAT_FILLED.get(reason, 'The disk filled')
  if space:
    return filled, (f'Its file system has {_size(space[0])} free of '
                    f'{_size(space[1])}')
  return filled, 'Its free space is not known (not a local path)'


def describe(error: BaseException, what: str, directory: str,
             advice: str, written: Optional[int] = None) -> str:
  """The message of a DiskFullError.

  Args:
    error: the error TensorFlow or Python raised.
    what: the step, e.g. 'exporting the model'.
    directory: where the step writes.
    advice: what to do.
    written: the bytes under `directory` when the step failed, if known.

  Returns:
    The message.
  """
  path = failed_path(error) or directory
  reason = next((message for message in DISK_FULL_MESSAGES
                 if message in str(error)), None)
  if reason is None and isinstance(error, OSError) and error.errno:
    reason = os.strerror(error.errno)
  reason = reason or os.strerror(errno.ENOSPC)
  filled, room = _what_filled(path, reason)
  needed = (f'; {directory} held {_size(written)} when the write failed'
            if written else '')
  return (f'{filled} while {what}: writing {path} failed with "{reason}". '
          f'{room}{needed}. {advice}')


@contextlib.contextmanager
def translate_disk_full(what: str, directory: str, advice: str,
                        clean_up: Optional[Callable[[], None]] = None,
                        written: Optional[Callable[[], int]] = None
                        ) -> Iterator[None]:
  """Turns a disk-full error inside the block into one DiskFullError.

  Args:
    what: the step, for the message ('exporting the model').
    directory: where the step writes.
    advice: what to do, for the message.
    clean_up: removes what the failed step left half-written.
    written: the bytes under `directory` (called before clean_up).

  Yields:
    Nothing; wraps the step.

  Raises:
    DiskFullError: from a disk-full error; other errors pass unchanged.
  """
  try:
    yield
  except DiskFullError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    if not is_disk_full(e):
      raise
    # Measured before the clean-up frees anything: the room at the failure.
    message = describe(e, what, directory, advice,
                       written() if written else None)
    if clean_up:
      try:
        clean_up()
      except Exception as cleanup_error:  # pylint: disable=broad-except
        logging.warning('Could not remove what the failed step left in %s: '
                        '%s', directory, cleanup_error)
    raise DiskFullError(message) from e
