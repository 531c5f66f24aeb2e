"""The CPU rehearsal of a multi-host slice: N worker entrypoints, one driver.

The workers are `python -m tfx_tpu_trainer.slice.worker` processes on
localhost; the driver is the trainer's `Executor.Do()` in this process with
`use_tpu=False` and `tpu_workers` naming them, so the graph runs on the
workers (variables spread over all of them, slice/driver.py).
"""

import datetime
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

import pytest
from tfx.dsl.components.base import base_executor
from tfx.proto.orchestration import pipeline_pb2
from tfx.utils import path_utils

from tfx_tpu_trainer import executor
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.slice import driver
from tfx_tpu_trainer.training import checkpoints

from tests import test_reliability as reliability
from tests.conftest import REPO_ROOT
from tests.fixtures import executor_subprocess
from tests.fixtures import pipeline_outputs
from tests.fixtures import slice_workers
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES

# A guard against a test that would hang, not a time the test expects.
HANG_GUARD_SECS = 900
# Seconds without a heartbeat before the driver gives a worker up (60 by
# default): a stopped or killed worker stays silent, so a slow machine only
# delays the loss; a running worker would have to miss two heartbeats in a
# row, each given 10 s to answer (driver.SIGNAL_TIMEOUT_SECS).
LOST_SECS = 10


def _context(run_id):
  return base_executor.BaseExecutor.Context(
      pipeline_info=pipeline_pb2.PipelineInfo(id='taxi'),
      pipeline_node=pipeline_pb2.PipelineNode(
          node_info=pipeline_pb2.NodeInfo(id='TPUTrainer')),
      pipeline_run_id=run_id)


def _attempt(taxi_artifacts, out_dir, workers, base, train_steps,
             run_id='run-1'):
  config = dict(SMALL_BATCHES, use_tpu=False, tpu_workers=workers,
                checkpoint_dir=base, save_checkpoints_steps=50)
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, out_dir, LINEAR_MODULE, custom_config=config,
      train_steps=train_steps, eval_steps=2)
  executor.Executor(_context(run_id)).Do(run.input_dict, run.output_dict,
                                          run.exec_properties)
  return run


@pytest.mark.slow
def test_driver_trains_on_two_local_workers_to_an_exported_model(
    taxi_artifacts, tmp_path):
  workers = slice_workers.LocalSlice(str(tmp_path), count=2)
  try:
    run = _attempt(taxi_artifacts, str(tmp_path / 'out'), workers.addresses,
                   str(tmp_path / 'checkpoints'), train_steps=100)
    # The driver said it is done: every worker ends by itself, with 0.
    assert workers.wait() == [0, 0]
  finally:
    workers.stop()
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert metrics['global_step'] == 100
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))
  # The variables lived on both workers: each saved its own shard.
  model_dir = os.path.join(str(tmp_path / 'checkpoints'), 'taxi', 'run-1',
                           'TPUTrainer')
  assert sorted(os.path.basename(p) for p in glob.glob(
      os.path.join(model_dir, 'model.ckpt-100.data-*'))) == [
          'model.ckpt-100.data-00000-of-00002',
          'model.ckpt-100.data-00001-of-00002']
  for task in range(2):
    log = workers.log(task)
    assert f'TPU worker {task} serving at' in log
    assert 'the driver is done; ending' in log


@pytest.mark.slow
def test_killed_worker_is_named_and_a_retry_resumes_from_its_checkpoint(
    taxi_artifacts, tmp_path, monkeypatch):
  # TensorFlow retries a step whose worker is gone (as for a preemption);
  # the driver gives up on the worker after LOST_SECS without a heartbeat.
  monkeypatch.setenv(driver.LOST_SECS_ENV, str(LOST_SECS))
  base = str(tmp_path / 'checkpoints')
  model_dir = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer')
  train_steps = 1000000  # Never reached: worker 1 is killed first.
  workers = slice_workers.LocalSlice(str(tmp_path / 'first'), count=2)

  def kill_after_first_checkpoint():
    while checkpoints.latest_step(model_dir) < 50:
      time.sleep(0.1)
    workers.kill(1)

  killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
  try:
    killer.start()
    with pytest.raises(driver.WorkerLostError) as raised:
      _attempt(taxi_artifacts, str(tmp_path / 'out1'), workers.addresses,
               base, train_steps)
    killer.join()
    # The survivor was told the driver is done and ended.
    assert workers.processes[0].wait() == 0
  finally:
    workers.stop()
  message = str(raised.value)
  assert 'MISMATCH' not in ''.join(traceback.format_exception(
      raised.type, raised.value, raised.tb))  # pybind11's, not ours.
  assert f'worker 1 ({workers.addresses[1]})' in message
  assert f'worker 0 ({workers.addresses[0]})' not in message
  assert f'resumes from the last checkpoint in {model_dir}' in message
  resumed_from = checkpoints.latest_step(model_dir)
  assert resumed_from >= 50

  # The retry: the slice's workers again (new processes), same checkpoints.
  retry_workers = slice_workers.LocalSlice(str(tmp_path / 'retry'), count=2)
  try:
    run = _attempt(taxi_artifacts, str(tmp_path / 'out2'),
                   retry_workers.addresses, base,
                   train_steps=resumed_from + 100)
    assert retry_workers.wait() == [0, 0]
  finally:
    retry_workers.stop()
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    assert json.load(f)['global_step'] == resumed_from + 100
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))


def _log_text(path):
  with open(path) as f:
    return f.read()


@pytest.mark.slow
@pytest.mark.heavy
def test_a_frozen_worker_fails_the_driver_naming_it(taxi_artifacts, tmp_path):
  # A stopped worker process (SIGSTOP: a hung host) takes its connections
  # and never answers; TensorFlow's step then waits for it without a
  # deadline, where no exception raised into the training thread lands:
  # the driver ends the process after its grace, here 2 s (the thread can
  # never take the error, so a longer grace would only be waited out).
  base = str(tmp_path / 'checkpoints')
  model_dir = os.path.join(base, 'taxi', 'run-1', 'TPUTrainer')
  workers = slice_workers.LocalSlice(str(tmp_path / 'workers'), count=2)
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), LINEAR_MODULE,
      custom_config=dict(SMALL_BATCHES, use_tpu=False,
                         tpu_workers=workers.addresses, checkpoint_dir=base,
                         save_checkpoints_steps=50),
      train_steps=1000000, eval_steps=2)
  log_path = str(tmp_path / 'driver.log')
  with open(log_path, 'w') as log:
    driver_process = subprocess.Popen(
        [sys.executable, '-m', 'tests.fixtures.executor_subprocess',
         reliability._write_spec(tmp_path / 'spec.json', run, 'run-1')],  # pylint: disable=protected-access
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
        env=dict(os.environ, **{
            driver.LOST_SECS_ENV: str(LOST_SECS),
            executor_subprocess.STUCK_GRACE_ENV: '2'}))
  try:
    while checkpoints.latest_step(model_dir) < 50:
      assert driver_process.poll() is None, _log_text(log_path)[-3000:]
      time.sleep(0.5)
    os.kill(workers.processes[1].pid, signal.SIGSTOP)
    status = driver_process.wait(timeout=HANG_GUARD_SECS)
    assert workers.processes[0].wait() == 0  # Told the driver is done.
  finally:
    if driver_process.poll() is None:
      driver_process.kill()
    os.kill(workers.processes[1].pid, signal.SIGCONT)
    workers.stop()
  log = _log_text(log_path)
  assert status == 1, log[-3000:]
  assert re.search(
      r'TPU worker 1 \(localhost:\d+\) took no heartbeat for \d+ s', log)
  assert re.search(
      r'WorkerLostError: The TPU slice lost worker 1 \(localhost:\d+\): '
      rf'.*, so training stopped \(no heartbeat for {LOST_SECS} s\)\. A retry '
      r'of this step \(with every worker running again\) resumes from the '
      rf'last checkpoint in {re.escape(model_dir)} \(step \d+\)', log)
  assert 'worker 0 (' not in log.split('The TPU slice lost')[-1].split(
      'resumes from')[0]
  assert 'MISMATCH' not in log


@pytest.mark.slow
def test_the_driver_exits_when_a_session_close_would_wait_for_ever(tmp_path):
  # The close waits for ever, so a shorter grace than the default's 60 s
  # (driver_exit.EXIT_GRACE_SECS) only ends the wait sooner; it leaves the
  # interpreter its exit up to the close, which takes well under a second.
  grace_secs = 15
  workers = slice_workers.LocalSlice(str(tmp_path), count=2)
  try:
    workers.wait_until_serving()
    result = subprocess.run(
        [sys.executable, '-m', 'tests.fixtures.slice_exit_driver',
         str(workers.processes[0].pid), ','.join(workers.addresses),
         str(grace_secs)],
        cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=HANG_GUARD_SECS)
    assert workers.processes[1].wait() == 0  # Told the driver is done.
  finally:
    os.kill(workers.processes[0].pid, signal.SIGCONT)
    workers.stop()
  assert result.returncode == 1, result.stderr[-3000:]
  assert 'RuntimeError: training failed with the session open' in (
      result.stderr)
  assert (f'this process ends within {grace_secs} s even if '
          'TensorFlow\'s session close waits') in result.stderr
  # Where it waited, from faulthandler: the session's close at exit.
  grace = datetime.timedelta(seconds=grace_secs)
  assert f'Timeout ({grace})!' in result.stderr
  assert 'in close' in result.stderr
