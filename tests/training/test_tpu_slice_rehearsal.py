"""The CPU rehearsal of a multi-host slice: N worker entrypoints, one driver.

The workers are `python -m tfx_tpu_trainer.tpu.worker` processes on
localhost; the driver is the trainer's `Executor.Do()` in this process with
`use_tpu=False` and `tpu_workers` naming them, so the graph runs on the
workers (variables spread over all of them, training/tpu_slice.py).
"""

import glob
import json
import os
import threading
import time

import pytest
from tfx.dsl.components.base import base_executor
from tfx.proto.orchestration import pipeline_pb2
from tfx.utils import path_utils

from tfx_tpu_trainer import executor
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.training import checkpoints
from tfx_tpu_trainer.training import tpu_slice

from tests.fixtures import pipeline_outputs
from tests.fixtures import slice_workers
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES


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
  # the driver gives up on the worker after this many seconds without a
  # heartbeat (60 by default).
  monkeypatch.setenv(tpu_slice.LOST_SECS_ENV, '20')
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
    with pytest.raises(tpu_slice.WorkerLostError) as raised:
      _attempt(taxi_artifacts, str(tmp_path / 'out1'), workers.addresses,
               base, train_steps)
    killer.join()
    # The survivor was told the driver is done and ended.
    assert workers.processes[0].wait() == 0
  finally:
    workers.stop()
  message = str(raised.value)
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
