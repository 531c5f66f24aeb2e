"""The resumable checkpoint directory across retries and runs: a damaged
`checkpoint` state file rebuilt, a late retry of an older run keeping the
newer runs' folders, a directory where the lock file goes named.

Real TensorFlow checkpoints and files; the retry runs the executor in a
process of its own, as a pod's retry would.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer.training import attempt_lock
from tfx_tpu_trainer.training import checkpoints

from tests.fixtures import pipeline_outputs
from tests import test_reliability as reliability

# What a crash, a full disk or a copy cut short leaves in the state file.
DAMAGE = {
    'empty': b'',
    'not text': b'\xff\xfe\x00\x81binary',
    'unparsable': b'model_checkpoint_path: "unterminated\n',
    'stale': None,  # Names the older checkpoint (the newer one's update lost).
    'missing': None,
}


def _save(model_dir, step):
  """A TF1 checkpoint of one variable at `step`; its prefix."""
  with tf.Graph().as_default():
    tf.compat.v1.get_variable('w', initializer=tf.constant(
        np.arange(8, dtype=np.float32)))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(global_step.assign(step))
      return tf.compat.v1.train.Saver().save(
          session, os.path.join(model_dir, 'model.ckpt'), global_step=step)


def _damage(model_dir, case, older):
  path = os.path.join(model_dir, checkpoints.CHECKPOINT_STATE_FILE)
  if case == 'missing':
    os.remove(path)
  elif case == 'stale':
    tf.compat.v1.train.update_checkpoint_state(model_dir, older)
  else:
    with open(path, 'wb') as f:
      f.write(DAMAGE[case])


@pytest.mark.parametrize('case', sorted(DAMAGE))
def test_a_damaged_state_file_is_rebuilt_from_the_checkpoints(
    tmp_path, absl_warnings, case):
  model_dir = str(tmp_path)
  older = _save(model_dir, 20)
  newer = _save(model_dir, 40)
  _damage(model_dir, case, older)
  assert checkpoints.skip_damaged_checkpoints(model_dir) == []
  assert tf.train.latest_checkpoint(model_dir) == newer
  assert checkpoints.latest_step(model_dir) == 40
  state = tf.train.get_checkpoint_state(model_dir)
  assert list(state.all_model_checkpoint_paths) == [older, newer]
  # A set: the record may reach caplog by absl's logger and by the root's.
  [warning] = {r.getMessage() for r in absl_warnings.records
               if 'checkpoint state file' in r.getMessage()}
  assert warning.startswith(
      f'The checkpoint state file {model_dir}/checkpoint was not usable (')
  assert warning.endswith(f'rebuilt it from the 2 checkpoint(s) beside it. '
                          f'Resuming from {newer}.')
  # Intact now: nothing more to say.
  absl_warnings.clear()
  assert checkpoints.skip_damaged_checkpoints(model_dir) == []
  assert not absl_warnings.records


def test_a_damaged_state_file_without_checkpoints_is_removed(
    tmp_path, absl_warnings):
  path = tmp_path / checkpoints.CHECKPOINT_STATE_FILE
  path.write_bytes(b'')
  with pytest.raises(ValueError, match='Invalid checkpoint state'):
    tf.train.latest_checkpoint(str(tmp_path))  # What training would raise.
  assert checkpoints.skip_damaged_checkpoints(str(tmp_path)) == []
  assert not path.exists()
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  assert any('no checkpoint is beside it, so training starts at step 0'
             in r.getMessage() for r in absl_warnings.records)


@pytest.mark.slow
def test_a_retry_resumes_past_a_damaged_state_file(taxi_artifacts, tmp_path):
  base = str(tmp_path / 'checkpoints')
  config = dict(reliability.SMALL_BATCHES, checkpoint_dir=base,
                save_checkpoints_steps=20)
  model_dir = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer')
  logs = []
  for attempt, steps in (('attempt1', 20), ('attempt2', 40)):
    run = pipeline_outputs.trainer_run(
        taxi_artifacts, str(tmp_path / attempt), reliability.LINEAR_MODULE,
        custom_config=config, train_steps=steps, eval_steps=2)
    log_path = tmp_path / f'{attempt}.log'
    process = reliability._start_executor(  # pylint: disable=protected-access
        reliability._write_spec(tmp_path / f'{attempt}.json', run, 'run-1'),  # pylint: disable=protected-access
        log_path)
    assert process.wait() == 0, log_path.read_text()
    logs.append(log_path.read_text())
    if attempt == 'attempt1':
      assert tf.train.latest_checkpoint(model_dir).endswith('model.ckpt-20')
      (tmp_path / 'checkpoints' / 'taxi' / 'run-1' / 'TPUTrainer' /
       'checkpoint').write_bytes(b'\xff\xfe not a state file')
  assert re.search(r'The checkpoint state file .*/checkpoint was not usable '
                   r'\(UnicodeDecodeError: .*\); rebuilt it from the \d+ '
                   r'checkpoint\(s\) beside it\.', logs[1]), logs[1]
  assert 'Training from step 20 to 40' in logs[1]
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))


def _finished_run(base, run_id, started):
  """A run's checkpoint directory that exported, started at `started`."""
  model_dir = os.path.join(base, 'taxi', run_id, 'TPUTrainer')
  checkpoints.prepare_dir(model_dir, base)
  with open(os.path.join(model_dir, checkpoints.STARTED_MARKER), 'w') as f:
    f.write(repr(started))
  checkpoints.mark_exported(model_dir, f'/models/{run_id}')
  return model_dir


def test_a_late_retry_of_an_older_run_keeps_the_newer_runs_folders(tmp_path):
  base = str(tmp_path)
  older = _finished_run(base, 'run-1', 100.0)
  newer = _finished_run(base, 'run-2', 200.0)
  # run-1 is retried after run-2 finished: run-2's folder stays.
  assert checkpoints.remove_finished_runs(older) == []
  assert os.path.isdir(newer)
  # A later run removes both.
  latest = os.path.join(base, 'taxi', 'run-3', 'TPUTrainer')
  checkpoints.prepare_dir(latest, base)
  assert sorted(checkpoints.remove_finished_runs(latest)) == [older, newer]
  assert sorted(os.listdir(os.path.join(base, 'taxi'))) == ['run-3']


def test_prepare_dir_records_when_the_run_started_once(tmp_path):
  model_dir = str(tmp_path / 'run')
  checkpoints.prepare_dir(model_dir, None)
  path = os.path.join(model_dir, checkpoints.STARTED_MARKER)
  first = open(path).read()
  checkpoints.prepare_dir(model_dir, None)  # A retry: the start is kept.
  assert open(path).read() == first
  float(first)


def test_a_directory_where_the_lock_file_goes_is_one_clear_error(tmp_path):
  lock_path = tmp_path / attempt_lock.LOCK_FILE
  lock_path.mkdir()
  with pytest.raises(attempt_lock.LockPathError) as e:
    with checkpoints.hold(str(tmp_path)):
      pass
  assert str(e.value).startswith(
      f'{lock_path} is a directory, where TPUTrainer keeps the lock file')
  assert lock_path.is_dir()  # Nothing of the user's is removed.
