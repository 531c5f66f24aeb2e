"""A real TF_CONFIG cluster on localhost: chief, worker and evaluator tasks.

Each task is the executor in its own process, as a pipeline step would run
it (tests/fixtures/executor_subprocess.py), on free localhost ports.
"""

import json
import os
import re
import subprocess
import sys

import pytest
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_tpu_trainer.publishing import metrics as metrics_lib

from tests.conftest import REPO_ROOT
from tests.fixtures import pipeline_outputs
from tests.fixtures import slice_workers
from tests.fixtures.run_settings import LINEAR_MODULE

# A hang guard only: every task must end by itself.
HANG_GUARD_SECONDS = 900


@pytest.mark.slow
@pytest.mark.heavy
def test_chief_worker_and_evaluator_all_end_and_chief_publishes_metrics(
    taxi_artifacts, tmp_path):
  train_steps = 60
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), LINEAR_MODULE,
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16,
                     'checkpoint_dir': str(tmp_path / 'checkpoints'),
                     'save_checkpoints_steps': 20,
                     'params': {'step_seconds': 0.1}},
      train_steps=train_steps, eval_steps=2)
  spec_path = tmp_path / 'spec.json'
  spec_path.write_text(json.dumps({
      'input_dict': artifact_utils.jsonify_artifact_dict(run.input_dict),
      'output_dict': artifact_utils.jsonify_artifact_dict(run.output_dict),
      'exec_properties': run.exec_properties,
      'pipeline_name': 'taxi', 'pipeline_run_id': 'run-1',
      'node_id': 'TPUTrainer'}))
  chief_port, worker_port = slice_workers.free_ports(2)
  cluster = {'chief': [f'localhost:{chief_port}'],
             'worker': [f'localhost:{worker_port}']}
  processes = {}
  for task_type in ('chief', 'worker', 'evaluator'):
    env = dict(os.environ, TF_CONFIG=json.dumps(
        {'cluster': cluster, 'task': {'type': task_type, 'index': 0}}))
    log = open(tmp_path / f'{task_type}.log', 'w')
    processes[task_type] = subprocess.Popen(
        [sys.executable, '-m', 'tests.fixtures.executor_subprocess',
         str(spec_path)], cwd=REPO_ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
  try:
    codes = {task_type: process.wait(timeout=HANG_GUARD_SECONDS)
             for task_type, process in processes.items()}
  finally:
    for process in processes.values():
      if process.poll() is None:
        process.kill()
  logs = {task_type: (tmp_path / f'{task_type}.log').read_text()
          for task_type in processes}
  assert codes == {'chief': 0, 'worker': 0, 'evaluator': 0}, {
      task_type: log[-3000:] for task_type, log in logs.items()}

  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert metrics['global_step'] >= train_steps
  assert set(metrics) >= {'accuracy', 'loss', 'global_step'}
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))
  # The worker trained on the chief's variables; the evaluator followed the
  # checkpoints to the final one and ended.
  assert 'Not the chief' in logs['worker']
  assert re.search(r'Loss for final step: [\d.]+', logs['worker'])
  assert 'Exiting evaluation, global_step=' in logs['evaluator']
