"""Reliability, round three: NaN weights, damaged checkpoints, attempt locks.

Each test runs real TensorFlow, real files and real processes: a fault the
earlier rounds never saw, and what the user sees about it.
"""

import glob
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.training import attempt_lock
from tfx_tpu_trainer.training import checkpoints
from tfx_tpu_trainer.training import finite_variables
from tfx_tpu_trainer_cli import run_temp_dir

from tests.conftest import REPO_ROOT
from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import pipeline_outputs
from tests import test_reliability as reliability

SMALL_BATCHES = reliability.SMALL_BATCHES


def _save_v1_checkpoint(model_dir, values, step=7):
  """Writes a TF1 checkpoint of `values` (name -> array) at `step`."""
  with tf.Graph().as_default():
    for name, value in values.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(global_step.assign(step))
      return saver.save(session, os.path.join(model_dir, 'model.ckpt'),
                        global_step=step)


# Item 1: NaN or infinite final variables are not exported.
def test_non_finite_variable_is_named_with_the_likely_cause(tmp_path):
  _save_v1_checkpoint(str(tmp_path), {
      'bias': np.zeros([1], np.float32),
      'dense/kernel': np.array([[1.0], [np.nan], [np.inf]], np.float32),
      'dense/kernel/Momentum': np.array([[np.nan]] * 3, np.float32)})
  with pytest.raises(finite_variables.NonFiniteVariablesError) as error:
    finite_variables.check_final_variables(str(tmp_path), 'my_module.py')
  message = str(error.value)
  assert re.search(r"The final checkpoint .*model\.ckpt-7 has non-finite "
                   r"values in variable 'dense/kernel' \(2 of 3 values are "
                   r'NaN or infinite\) and in 1 more \(dense/kernel/Momentum'
                   r'\), so no model was exported', message), message
  assert 'model_fn in my_module.py' in message
  assert 'NaN or infinite feature values in the training examples' in message
  assert "custom_config['allow_nonfinite_variables']=true" in message


def test_finite_variables_pass_and_the_opt_out_is_a_config_key(tmp_path):
  _save_v1_checkpoint(str(tmp_path), {'w': np.ones([2], np.float32)})
  finite_variables.check_final_variables(str(tmp_path), 'm.py')
  finite_variables.check_final_variables(str(tmp_path / 'empty'), 'm.py')
  assert config_lib.TrainerConfig.from_custom_config(
      {'allow_nonfinite_variables': True}, environ={}).allow_nonfinite_variables
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['allow_nonfinite_variables'\] "
                     'must be true or false'):
    config_lib.TrainerConfig.from_custom_config(
        {'allow_nonfinite_variables': 1}, environ={})


def _nan_fare_in_some_records(path, every=7):
  """Rewrites a gzip TFRecord file: fare_xf NaN in every `every`-th record."""
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      path, compression_type='GZIP')]
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for index, record in enumerate(records):
      if index % every == every - 1:
        example = tf.train.Example.FromString(record)
        feature = example.features.feature['fare_xf'].float_list
        feature.value[:] = [float('nan')] * len(feature.value)
        record = example.SerializeToString()
      writer.write(record)


@pytest.mark.slow
def test_nan_inputs_that_leave_the_loss_finite_publish_no_nan_weights(
    taxi_artifacts, tmp_path):
  examples = reliability._copy_examples(  # pylint: disable=protected-access
      taxi_artifacts.transformed_examples, str(tmp_path / 'examples'))
  _nan_fare_in_some_records(
      reliability._only_file(examples, 'train'))  # pylint: disable=protected-access
  module = os.path.join(TEST_MODULES_DIR, 'nan_skipping_loss_module.py')
  run = reliability._run_with_examples(  # pylint: disable=protected-access
      taxi_artifacts, tmp_path, examples, module_file=module, train_steps=20,
      eval_steps=2)
  message = reliability._assert_fails_and_leaves_no_model(  # pylint: disable=protected-access
      run, finite_variables.NonFiniteVariablesError,
      r"has non-finite values in variable 'weights' \(\d+ of 3 values")
  assert 'nan_skipping_loss_module.py' in message
  # The opt-out publishes it, as allow_nonfinite_metrics does for metrics.
  allowed = reliability._run_with_examples(  # pylint: disable=protected-access
      taxi_artifacts, tmp_path / 'allowed', examples, module_file=module,
      train_steps=20, eval_steps=2,
      custom_config=dict(SMALL_BATCHES, allow_nonfinite_variables=True))
  executor.Executor().Do(allowed.input_dict, allowed.output_dict,
                         allowed.exec_properties)
  assert os.path.isdir(path_utils.serving_model_dir(allowed.model.uri))


# Item 3: a damaged newest checkpoint does not block every retry.
def _truncate(path, keep_bytes=10):
  with open(path, 'r+b') as f:
    f.truncate(keep_bytes)


def _data_file(prefix):
  files = glob.glob(prefix + '.data-*')
  assert len(files) == 1, files
  return files[0]


def test_damaged_newest_checkpoint_is_skipped_and_named(tmp_path):
  weights = {'w': np.arange(64, dtype=np.float32)}
  older = _save_v1_checkpoint(str(tmp_path), weights, step=20)
  newer = _save_v1_checkpoint(str(tmp_path), weights, step=40)
  tf.compat.v1.train.update_checkpoint_state(
      str(tmp_path), newer, all_model_checkpoint_paths=[older, newer])
  _truncate(_data_file(newer))
  with pytest.raises(Exception, match='Read less bytes than requested'):
    tf.train.load_checkpoint(newer).get_tensor('w')
  assert checkpoints.skip_damaged_checkpoints(str(tmp_path)) == [newer]
  assert tf.train.latest_checkpoint(str(tmp_path)) == older
  assert checkpoints.latest_step(str(tmp_path)) == 20
  assert not glob.glob(newer + '.*')
  assert glob.glob(str(tmp_path / (checkpoints.DAMAGED_PREFIX +
                                   'model.ckpt-40.*')))
  # Intact checkpoints are left alone.
  assert checkpoints.skip_damaged_checkpoints(str(tmp_path)) == []


def test_no_readable_checkpoint_fails_naming_what_to_delete(tmp_path):
  only = _save_v1_checkpoint(str(tmp_path), {'w': np.ones([64], np.float32)},
                             step=40)
  _truncate(_data_file(only))
  with pytest.raises(checkpoints.DamagedCheckpointError) as error:
    checkpoints.skip_damaged_checkpoints(str(tmp_path))
  message = str(error.value)
  assert re.search(rf'No checkpoint in {re.escape(str(tmp_path))} reads back: '
                   r'the newest, .*model\.ckpt-40 \(.*\.data-00000-of-00001'
                   r".*\), fails with .*Read less bytes", message), message
  assert f'Delete the directory {tmp_path}' in message


@pytest.mark.slow
@pytest.mark.heavy
def test_retry_resumes_past_a_truncated_checkpoint(taxi_artifacts, tmp_path):
  base = str(tmp_path / 'checkpoints')
  config = dict(SMALL_BATCHES, checkpoint_dir=base, save_checkpoints_steps=20)
  model_dir = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer')
  first = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'attempt1'), reliability.LINEAR_MODULE,
      custom_config=config, train_steps=40, eval_steps=2)
  process = reliability._start_executor(  # pylint: disable=protected-access
      reliability._write_spec(tmp_path / 'spec1.json', first, 'run-1'),  # pylint: disable=protected-access
      tmp_path / 'attempt1.log')
  assert process.wait() == 0, open(tmp_path / 'attempt1.log').read()
  newest = tf.train.latest_checkpoint(model_dir)
  assert newest.endswith('model.ckpt-40')
  _truncate(_data_file(newest))  # As a disk that filled mid-write.

  retry = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'attempt2'), reliability.LINEAR_MODULE,
      custom_config=config, train_steps=40, eval_steps=2)
  process = reliability._start_executor(  # pylint: disable=protected-access
      reliability._write_spec(tmp_path / 'spec2.json', retry, 'run-1'),  # pylint: disable=protected-access
      tmp_path / 'attempt2.log')
  assert process.wait() == 0, open(tmp_path / 'attempt2.log').read()
  log = open(tmp_path / 'attempt2.log').read()
  assert re.search(r'Skipped the damaged checkpoint .*model\.ckpt-40 .*Read '
                   r'less bytes than requested', log), log
  assert 'Training from step 20 to 40' in log
  assert os.path.isdir(path_utils.serving_model_dir(retry.model.uri))
  assert not glob.glob(os.path.join(retry.model_run.uri,
                                    checkpoints.DAMAGED_PREFIX + '*'))


# Items 4 and 5: one attempt owns the checkpoint directory; cleanup removes
# only directories no attempt holds.
_HOLD_LOCK = (
    'import sys, time\n'
    'from tfx_tpu_trainer.training import attempt_lock\n'
    'attempt_lock.AttemptLock(sys.argv[1]).acquire()\n'
    'print("held", flush=True)\n'
    'time.sleep(3600)\n')


def _hold_in_another_process(model_dir):
  holder = subprocess.Popen([sys.executable, '-c', _HOLD_LOCK, model_dir],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline().strip() == 'held'
  return holder


def _kill(process):
  process.send_signal(signal.SIGKILL)
  process.wait()


def test_a_killed_holder_releases_the_attempt_lock(tmp_path):
  model_dir = str(tmp_path / 'run-1' / 'TPUTrainer')
  holder = _hold_in_another_process(model_dir)
  lock = attempt_lock.AttemptLock(model_dir)
  try:
    assert not lock.try_acquire()
    assert re.fullmatch(rf'host \S+ pid {holder.pid} since \S+Z',
                        lock.holder()), lock.holder()
  finally:
    _kill(holder)  # As a preempted pod: no chance to unlock.
  assert lock.try_acquire()
  lock.release()


def test_cleanup_keeps_a_finished_runs_directory_an_attempt_holds(tmp_path):
  pipeline_dir = tmp_path / 'ckpt' / 'taxi'
  for run in ('old', 'new'):
    (pipeline_dir / run / 'TPUTrainer').mkdir(parents=True)
  old = pipeline_dir / 'old' / 'TPUTrainer'
  (old / 'model.ckpt-5.index').write_text('x')
  (old / checkpoints.EXPORTED_MARKER).write_text('/model/1')
  # A retry of the old run resumes after its export (the orchestrator's
  # publish failed) while the new run starts.
  holder = _hold_in_another_process(str(old))
  try:
    assert checkpoints.remove_finished_runs(
        str(pipeline_dir / 'new' / 'TPUTrainer')) == []
    assert (old / 'model.ckpt-5.index').exists()
  finally:
    _kill(holder)
  assert checkpoints.remove_finished_runs(
      str(pipeline_dir / 'new' / 'TPUTrainer')) == [str(old)]
  assert os.listdir(pipeline_dir) == ['new']


def _wait_for_line(log_path, patterns, process):
  """Waits until the log matches one of `patterns`; returns that pattern."""
  while True:
    text = open(log_path).read()
    for pattern in patterns:
      if re.search(pattern, text):
        return pattern
    assert process.poll() is None, text
    time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.heavy
def test_a_second_attempt_waits_for_the_first_and_resumes_after_its_kill(
    taxi_artifacts, tmp_path):
  base = str(tmp_path / 'checkpoints')
  model_dir = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer')
  attempts = []
  # The first attempt is slow (1 s a step, a checkpoint every 5) so that it
  # still trains while the second starts up; the second, alike but for
  # that, trains at speed and checkpoints every 100 steps (the steps after
  # the kill are not what is checked).
  for index, step_seconds, every in ((1, 1.0, 5), (2, 0.0, 100)):
    run = pipeline_outputs.trainer_run(
        taxi_artifacts, str(tmp_path / f'attempt{index}'),
        reliability.LINEAR_MODULE, train_steps=1000, eval_steps=2,
        custom_config=dict(SMALL_BATCHES, checkpoint_dir=base,
                           save_checkpoints_steps=every,
                           params={'step_seconds': step_seconds}))
    attempts.append(run)
  log1, log2 = tmp_path / 'attempt1.log', tmp_path / 'attempt2.log'
  first = reliability._start_executor(  # pylint: disable=protected-access
      reliability._write_spec(tmp_path / 's1.json', attempts[0], 'run-1'),  # pylint: disable=protected-access
      log1)
  while reliability._checkpoint_step(model_dir) < 5:  # pylint: disable=protected-access
    assert first.poll() is None, open(log1).read()
    time.sleep(0.1)
  # The orchestrator starts a retry while the first attempt still runs.
  second = reliability._start_executor(  # pylint: disable=protected-access
      reliability._write_spec(tmp_path / 's2.json', attempts[1], 'run-1'),  # pylint: disable=protected-access
      log2)
  seen = _wait_for_line(log2, ['Another attempt of this execution holds',
                               'Training from step'], second)
  assert seen == 'Another attempt of this execution holds', open(log2).read()
  assert re.search(rf'holds the checkpoint directory {re.escape(model_dir)} '
                   rf'\(host \S+ pid {first.pid} since', open(log2).read())
  _kill(first)
  killed_at = reliability._checkpoint_step(model_dir)  # pylint: disable=protected-access
  assert second.wait() == 0, open(log2).read()
  log = open(log2).read()
  resumed_from = int(re.search(r'Training from step (\d+) to 1000',
                               log).group(1))
  assert 1000 > resumed_from >= killed_at >= 5
  exported = glob.glob(str(tmp_path / 'attempt*' / 'model' / 'Format-Serving'))
  assert exported == [path_utils.serving_model_dir(attempts[1].model.uri)]


# Item 12: what killed runs leave behind is removed by later runs.
_ENTER_TEMP_DIR = (
    'import sys, time\n'
    'from tfx_tpu_trainer_cli import run_temp_dir\n'
    'with run_temp_dir.private_temp_dir(sys.argv[1]) as d:\n'
    '  open(d + "/wheel.whl", "w").write("x" * 1000)\n'
    '  print(d, flush=True)\n'
    '  time.sleep(3600)\n')


def _age(path, seconds=3600):
  then = time.time() - seconds
  os.utime(path, (then, then))


def test_a_killed_runs_temp_folder_is_removed_by_the_next_run(tmp_path):
  parent = str(tmp_path / '_tmp')
  killed = subprocess.Popen([sys.executable, '-c', _ENTER_TEMP_DIR, parent],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
  killed_dir = killed.stdout.readline().strip()
  running = subprocess.Popen([sys.executable, '-c', _ENTER_TEMP_DIR, parent],
                             cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
  running_dir = running.stdout.readline().strip()
  try:
    _kill(killed)  # As a killed `run`: its folder stays behind.
    assert os.path.exists(os.path.join(killed_dir, 'wheel.whl'))
    for path in (killed_dir, running_dir):
      _age(path)
    with run_temp_dir.private_temp_dir(parent) as mine:
      assert not os.path.exists(killed_dir)
      assert os.path.exists(os.path.join(running_dir, 'wheel.whl'))
    assert not os.path.exists(mine)
  finally:
    _kill(running)


def test_checkpoints_of_killed_local_runs_are_removed_unless_held(tmp_path):
  pipeline_dir = tmp_path / '_checkpoints' / 'taxi_tpu'
  dirs = {}
  for run in ('killed', 'running', 'just-started'):
    dirs[run] = pipeline_dir / run / 'TPUTrainer'
    dirs[run].mkdir(parents=True)
    (dirs[run] / 'model.ckpt-5.index').write_text('x')
  _age(dirs['killed'])
  _age(dirs['running'])
  holder = _hold_in_another_process(str(dirs['running']))
  try:
    assert checkpoints.remove_unheld_runs(str(pipeline_dir)) == [
        str(dirs['killed'])]
  finally:
    _kill(holder)
  assert sorted(os.listdir(pipeline_dir)) == ['just-started', 'running']


def test_the_local_runner_cleans_the_checkpoint_dir_trainer_uses(tmp_path):
  from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
  def checkpoint_dir(options):
    return local_runner._checkpoint_dir(  # pylint: disable=protected-access
        options.pipeline_root, options.pipeline_name, options.custom_config)

  options = local_runner.local_options(str(tmp_path), data_root='/data')
  assert checkpoint_dir(options) == str(
      tmp_path / 'pipelines' / 'taxi_tpu' / '_checkpoints' / 'taxi_tpu')
  options = local_runner.local_options(
      str(tmp_path), data_root='/data', pipeline_name='my pipe',
      custom_config={'checkpoint_dir': '/ckpt'})
  assert checkpoint_dir(options) == '/ckpt/my_pipe'
