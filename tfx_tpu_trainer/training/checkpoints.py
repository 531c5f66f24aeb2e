"""Where a TPUTrainer execution keeps checkpoints so that a retry resumes."""

import contextlib
import os
import re
import time
from typing import Any, Iterator, List, Optional, Tuple
import uuid

from absl import logging
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.utils import io_utils

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import attempt_lock

__all__ = ['DEFAULT_DIR_NAME', 'STAGING_RECORD', 'safe_name',
           'resumable_model_dir', 'hold', 'resumable_dir_path', 'mark_exported',
           'copy_into_model_run', 'latest_step', 'remove_unheld_runs',
           'INPUT_CACHE_DIR', 'input_cache_dir', 'remove_input_cache']

DEFAULT_DIR_NAME = '_checkpoints'
# Bookkeeping files TPUTrainer keeps beside the checkpoints; never copied
# into model_run.
_BOOKKEEPING_PREFIX = '.tpu_trainer-'
# Written after a successful export; holds the exported model's URI.
EXPORTED_MARKER = _BOOKKEEPING_PREFIX + 'exported'
# input_cache="disk": the parsed training split, beside the checkpoints it
# is resumed with, never copied into model_run, removed with the directory.
INPUT_CACHE_DIR = _BOOKKEEPING_PREFIX + 'input_cache'
# One line per export staging directory an attempt created (export.py).
STAGING_RECORD = _BOOKKEEPING_PREFIX + 'export-staging'
# Files of a checkpoint that does not read back get this prefix.
DAMAGED_PREFIX = _BOOKKEEPING_PREFIX + 'damaged-'
# Written once, when the run's directory is first prepared: the time (epoch
# seconds) the run started training, to tell earlier runs from later ones.
STARTED_MARKER = _BOOKKEEPING_PREFIX + 'started'
# TensorFlow's name for the file that says which checkpoint is the latest.
CHECKPOINT_STATE_FILE = 'checkpoint'


class CheckpointDirError(errors.TPUTrainerError, OSError):
  """The checkpoint directory cannot be created or written."""


def safe_name(name: str) -> str:
  """A pipeline, run or node id as a folder name."""
  return re.sub(r'[^A-Za-z0-9._-]', '_', name)


_safe = safe_name


def resumable_model_dir(context: Optional[base_executor.BaseExecutor.Context],
                        model_uri: str, checkpoint_dir: Optional[str]
                       ) -> Optional[str]:
  """The resumable training directory, ready for training.

  Creates the directory and probes it for writing; `hold` then owns it for
  the attempt.

  Args:
    context: the executor's context (pipeline info, node, run id).
    model_uri: the `model` output URI, `<pipeline root>/<node>/model/<id>`.
    checkpoint_dir: `custom_config['checkpoint_dir']`, or None.

  Returns:
    The directory, or None when the execution is not part of a pipeline run
    (a direct `Do()` call), which then trains in `model_run`.

  Raises:
    CheckpointDirError: the directory cannot be created or written.
  """
  model_dir = resumable_dir_path(context, model_uri, checkpoint_dir)
  if model_dir is None:
    return None
  prepare_dir(model_dir, checkpoint_dir)
  return model_dir


@contextlib.contextmanager
def hold(model_dir: Optional[str]) -> Iterator[None]:
  """Owns `model_dir` for one attempt: lock, clean up, skip damage.

  Waits while another attempt of the execution holds the directory
  (attempt_lock.py), then removes the directories of earlier pipeline runs
  that ended (`remove_finished_runs`) and makes training resume from the
  newest readable checkpoint (`skip_damaged_checkpoints`). The lock is
  released when the block ends, or by the kernel when the process dies.

  Args:
    model_dir: the resumable directory, or None (nothing to hold).

  Yields:
    Nothing; the attempt trains, exports and marks inside the block.
  """
  if model_dir is None:
    yield
    return
  lock = attempt_lock.AttemptLock(model_dir)
  if attempt_lock.is_lockable(model_dir):
    lock.acquire()
  else:
    logging.warning('The checkpoint directory %s is not on a local file '
                    'system, so it cannot be locked: a second attempt of '
                    'this execution running at the same time would train in '
                    'it too.', model_dir)
  try:
    remove_finished_runs(model_dir)
    skip_damaged_checkpoints(model_dir)
    yield
  finally:
    lock.release()


def input_cache_dir(context: Optional[base_executor.BaseExecutor.Context],
                    model_uri: str,
                    checkpoint_dir: Optional[str]) -> Optional[str]:
  """Where input_cache="disk" writes (None outside a pipeline run).

  Inside the resumable directory: a retry of the execution finds it, and it
  goes when that directory is removed (after the export, or as a finished
  run's directory).
  """
  model_dir = resumable_dir_path(context, model_uri, checkpoint_dir)
  return None if model_dir is None else os.path.join(model_dir,
                                                     INPUT_CACHE_DIR)


def remove_input_cache(model_dir: str) -> None:
  """Deletes input_cache="disk"'s parsed blocks (after the export), if any."""
  path = os.path.join(model_dir, INPUT_CACHE_DIR)
  if fileio.exists(path):
    remove(path)
    logging.info('Removed the parsed input cache %s.', path)


def resumable_dir_path(context: Optional[base_executor.BaseExecutor.Context],
                       model_uri: str, checkpoint_dir: Optional[str]
                      ) -> Optional[str]:
  """Where `resumable_model_dir` trains (no file system access)."""
  if (context is None or not context.pipeline_run_id or
      context.pipeline_node is None or context.pipeline_info is None):
    return None
  node_id = context.pipeline_node.node_info.id
  pipeline_name = context.pipeline_info.id
  if not node_id or not pipeline_name:
    return None
  if checkpoint_dir is None:
    node_dir = os.path.dirname(os.path.dirname(model_uri.rstrip('/')))
    checkpoint_dir = os.path.join(os.path.dirname(node_dir), DEFAULT_DIR_NAME)
  return os.path.join(checkpoint_dir, _safe(pipeline_name),
                      _safe(context.pipeline_run_id), _safe(node_id))


def prepare_dir(model_dir: str, checkpoint_dir: Optional[str]) -> None:
  """Creates `model_dir` and writes, reads back and deletes a probe file.

  Args:
    model_dir: the resumable training directory.
    checkpoint_dir: `custom_config['checkpoint_dir']` as given (None: the
      default under the pipeline root), for the message.

  Raises:
    CheckpointDirError: naming the key, the path and the cause (read-only,
      no space left, a regular file in the way, ...).
  """
  probe = os.path.join(model_dir, f'{_BOOKKEEPING_PREFIX}probe-'
                       f'{uuid.uuid4().hex}')
  step = 'create'
  try:
    fileio.makedirs(model_dir)
    step = 'write a file in'
    with fileio.open(probe, 'wb') as f:
      f.write(b'x' * 4096)
    with fileio.open(probe, 'rb') as f:
      if f.read() != b'x' * 4096:
        raise OSError('the probe file read back differently')
    fileio.remove(probe)
    started = os.path.join(model_dir, STARTED_MARKER)
    if not fileio.exists(started):
      with fileio.open(started, 'w') as f:
        f.write(repr(time.time()))
  except Exception as e:  # pylint: disable=broad-except
    where = (f"custom_config['checkpoint_dir']={checkpoint_dir!r}"
             if checkpoint_dir else
             f"custom_config['checkpoint_dir'] (default "
             f'<pipeline root>/{DEFAULT_DIR_NAME})')
    raise CheckpointDirError(
        f'Cannot {step} the checkpoint directory {model_dir} ({where}): '
        f'{type(e).__name__}: {errors.first_line(e)}. Training needs it '
        'writable with room for checkpoints: point checkpoint_dir at a '
        'writable directory (absolute path or URI), or free space.') from e


def mark_exported(model_dir: str, model_uri: str) -> None:
  """Records that this run's model was exported (the dir may go later)."""
  with fileio.open(os.path.join(model_dir, EXPORTED_MARKER), 'w') as f:
    f.write(model_uri)


def remove_finished_runs(model_dir: str) -> List[str]:
  """Removes earlier runs' directories of this component whose model exists.

  `model_dir` is `<base>/<pipeline>/<run id>/<component>`; the siblings are
  `<base>/<pipeline>/<other run id>/<component>`. A sibling is removed when
  it carries `EXPORTED_MARKER` (its executor exported and copied everything
  into model_run), no attempt holds it (a retry of that run resuming after
  its export, attempt_lock.py) and its run started before this one
  (`STARTED_MARKER`: a late retry of an older run keeps the newer runs'),
  and its run folder when that leaves it empty. Runs that are still
  training or failed for good carry no marker and are kept.

  Args:
    model_dir: the current run's directory.

  Returns:
    The removed directories.
  """
  component = os.path.basename(model_dir.rstrip('/'))
  run_dir = os.path.dirname(model_dir.rstrip('/'))
  pipeline_dir = os.path.dirname(run_dir)
  removed = []
  started = _started(model_dir)
  for run in _listdir(pipeline_dir):
    other_run_dir = os.path.join(pipeline_dir, run)
    if other_run_dir == run_dir or not fileio.isdir(other_run_dir):
      continue
    other = os.path.join(other_run_dir, component)
    other_started = _started(other)
    if (started is not None and other_started is not None and
        other_started > started):
      logging.info('Kept %s: its run started after this one.', other)
      continue
    if fileio.exists(os.path.join(other, EXPORTED_MARKER)):
      lock = attempt_lock.AttemptLock(other)
      if attempt_lock.is_lockable(other) and not lock.try_acquire():
        logging.info('Kept %s: an attempt of its run holds it (%s).', other,
                     lock.holder())
        continue
      try:
        remove(other)
      finally:
        lock.release()
      removed.append(other)
    if fileio.isdir(other_run_dir) and not _listdir(other_run_dir):
      remove(other_run_dir)
  if removed:
    logging.info('Removed the checkpoints of finished runs: %s', removed)
  return removed


def _started(model_dir: str) -> Optional[float]:
  """When the run of `model_dir` started (None: unknown, an older layout)."""
  try:
    with fileio.open(os.path.join(model_dir, STARTED_MARKER), 'r') as f:
      return float(f.read())
  except Exception:  # pylint: disable=broad-except
    return None


def _listdir(path: str) -> List[str]:
  try:
    return [name.rstrip('/') for name in fileio.listdir(path)]
  except Exception:  # pylint: disable=broad-except
    return []


def copy_into_model_run(model_dir: str, model_run_dir: str) -> None:
  """Copies checkpoints and events from `model_dir` into `model_run_dir`."""
  fileio.makedirs(model_run_dir)
  for name in fileio.listdir(model_dir):
    if name.startswith(_BOOKKEEPING_PREFIX):
      continue
    source = os.path.join(model_dir, name.rstrip('/'))
    destination = os.path.join(model_run_dir, name.rstrip('/'))
    if fileio.isdir(source):
      io_utils.copy_dir(source, destination)
    else:
      fileio.copy(source, destination, overwrite=True)
  logging.info('Copied checkpoints and events from %s to %s.', model_dir,
               model_run_dir)


def remove(model_dir: str) -> None:
  """Deletes a directory (a finished run's checkpoints); a failure warns."""
  try:
    fileio.rmtree(model_dir)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('Could not remove %s (%s); delete it by hand.', model_dir,
                    e)


def latest_step(model_dir: str) -> int:
  """The global step of the newest checkpoint in `model_dir` (0 if none)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  latest = tf.train.latest_checkpoint(model_dir)
  if not latest:
    return 0
  return int(tf.train.load_variable(latest,
                                    tf.compat.v1.GraphKeys.GLOBAL_STEP))


def _checkpoint_prefixes(model_dir: str) -> List[str]:
  """Every checkpoint in `model_dir`, oldest first (by global step).

  Read from the files on disk rather than the `checkpoint` state file, which
  may itself be the damaged file.
  """
  steps = {}
  for name in _listdir(model_dir):
    match = re.fullmatch(r'(.+)-(\d+)\.index', name)
    if match and not name.startswith(_BOOKKEEPING_PREFIX):
      steps[os.path.join(model_dir, name[:-len('.index')])] = int(
          match.group(2))
  return sorted(steps, key=steps.get)


def _read_error(prefix: str) -> Optional[str]:
  """Why the checkpoint at `prefix` does not read back whole (None: it does).

  Every tensor is read, as a restore would: a truncated data file reads its
  index fine and fails only at the tensors past the cut.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_dtype_map():
      reader.get_tensor(name)
  except Exception as e:  # pylint: disable=broad-except
    return f'{type(e).__name__}: {errors.first_line(e)}'
  return None


class DamagedCheckpointError(errors.TPUTrainerError, OSError):
  """No checkpoint of the resumable directory reads back."""


def skip_damaged_checkpoints(model_dir: str) -> List[str]:
  """Makes training resume from the newest checkpoint that reads back.

  Newer checkpoints that do not read back (truncated, corrupt) have their
  files renamed with `DAMAGED_PREFIX` (kept for inspection, never copied
  into model_run) and the `checkpoint` state file is rewritten to the
  readable ones, so TensorFlow restores the newest readable checkpoint.

  Args:
    model_dir: the resumable training directory.

  Returns:
    The prefixes of the checkpoints skipped.

  Raises:
    DamagedCheckpointError: checkpoints exist but none reads back; names
      the newest damaged file and what to delete.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  prefixes = _checkpoint_prefixes(model_dir)
  skipped = []
  while prefixes:
    error = _read_error(prefixes[-1])
    if error is None:
      break
    skipped.append((prefixes.pop(), error))
  if not skipped:
    _repair_state(model_dir, prefixes)
    return []
  if not prefixes:
    prefix, error = skipped[0]
    raise DamagedCheckpointError(
        f'No checkpoint in {model_dir} reads back: the newest, {prefix} '
        f'({_files_of(prefix)}), fails with {error}; the '
        f'{len(skipped) - 1} older one(s) too. Training cannot resume. '
        f'Delete the directory {model_dir} (or those checkpoint files and '
        'its `checkpoint` file) to train from step 0.')
  for prefix, error in skipped:
    for path in _files_of(prefix):
      fileio.rename(path, os.path.join(
          model_dir, DAMAGED_PREFIX + os.path.basename(path)), overwrite=True)
    logging.warning(
        'Skipped the damaged checkpoint %s (%s); its files now start with '
        '%r. Resuming from %s.', prefix, error, DAMAGED_PREFIX, prefixes[-1])
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, prefixes[-1], all_model_checkpoint_paths=prefixes)
  return [prefix for prefix, _ in skipped]


def _read_state(model_dir: str) -> Tuple[Any, Optional[str]]:
  """The `checkpoint` state file's proto, or why TensorFlow cannot read it.

  TensorFlow raises on an empty file (`ValueError: Invalid checkpoint
  state`) and on bytes that are not text (`UnicodeDecodeError`), and ignores
  one it cannot parse (training would start again from step 0).

  Returns:
    (state, None), (None, why it is unusable), or (None, None) if absent.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not fileio.exists(os.path.join(model_dir, CHECKPOINT_STATE_FILE)):
    return None, None
  try:
    state = tf.train.get_checkpoint_state(model_dir)
  except (ValueError, tf.errors.OpError) as e:  # UnicodeDecodeError too.
    return None, f'{type(e).__name__}: {errors.first_line(e)}'
  if state is None:
    return None, 'TensorFlow cannot parse it'
  return state, None


def _repair_state(model_dir: str, prefixes: List[str]) -> None:
  """Rewrites an unusable `checkpoint` state file from the checkpoints.

  Unusable: unreadable (see `_read_state`), missing while checkpoints are
  on disk, or naming another checkpoint than the newest that reads back.

  Args:
    model_dir: the resumable training directory.
    prefixes: its checkpoints that read back, oldest first.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, CHECKPOINT_STATE_FILE)
  state, problem = _read_state(model_dir)
  if not prefixes:
    if problem:
      fileio.remove(path)
      logging.warning('Removed the checkpoint state file %s (%s): no '
                      'checkpoint is beside it, so training starts at step '
                      '0.', path, problem)
    return
  if state is None and problem is None:
    problem = 'it is missing'
  elif state is not None:
    named = os.path.normpath(state.model_checkpoint_path)
    if named == os.path.normpath(prefixes[-1]):
      return
    problem = f'it names {named}, not the newest checkpoint on disk'
  tf.compat.v1.train.update_checkpoint_state(
      model_dir, prefixes[-1], all_model_checkpoint_paths=prefixes)
  logging.warning(
      'The checkpoint state file %s was not usable (%s); rebuilt it from '
      'the %d checkpoint(s) beside it. Resuming from %s.', path, problem,
      len(prefixes), prefixes[-1])


def _files_of(prefix: str) -> List[str]:
  """The files of one checkpoint: its index, data shards and meta graph."""
  directory, base = os.path.split(prefix)
  return sorted(
      os.path.join(directory, name) for name in _listdir(directory)
      if name == base + '.index' or name == base + '.meta' or
      name.startswith(base + '.data-'))


def remove_unheld_runs(pipeline_dir: str, grace_secs: float = 60) -> List[str]:
  """Removes every run's directory under `pipeline_dir` no attempt holds.

  For orchestrators that never retry an execution of an earlier pipeline
  run (the local runner: a new run id per run), the directory of a killed
  or failed run is never used again; this removes it, and its run folder
  when that leaves it empty. A directory an attempt holds (a concurrent
  run) is kept, as is one younger than `grace_secs` (its attempt may not
  hold it yet).

  Args:
    pipeline_dir: `<checkpoint base>/<pipeline name>`.
    grace_secs: the age below which a directory is kept.

  Returns:
    The removed directories.
  """
  import time  # pylint: disable=g-import-not-at-top
  removed = []
  for run in _listdir(pipeline_dir):
    run_dir = os.path.join(pipeline_dir, run)
    for component in _listdir(run_dir):
      model_dir = os.path.join(run_dir, component)
      if (not attempt_lock.is_lockable(model_dir) or
          not os.path.isdir(model_dir) or
          time.time() - os.path.getmtime(model_dir) < grace_secs):
        continue
      lock = attempt_lock.AttemptLock(model_dir)
      if lock.try_acquire():
        try:
          remove(model_dir)
        finally:
          lock.release()
        removed.append(model_dir)
    if os.path.isdir(run_dir) and not _listdir(run_dir):
      remove(run_dir)
  if removed:
    logging.info('Removed the checkpoints of ended runs: %s', removed)
  return removed
