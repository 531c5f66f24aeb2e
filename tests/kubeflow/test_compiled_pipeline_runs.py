"""The compiled KFP v1 pipeline runs, step by step, as its pods would.

`tfx-tpu-trainer compile` writes the Argo workflow; every step's container
command, arguments and environment are then executed exactly as compiled
(`tests/fixtures/argo_pod.py`: Argo's substitutions, the pod's fieldRefs, the
repository at /tfx-tpu-trainer through a mount namespace and chroot, one pod
root per step) in DAG order, against a real MLMD store behind a gRPC server
(`tests/fixtures/mlmd_grpc_server.py`) that the `metadata-grpc-configmap`
points at. Data: 1,000 rows of the taxi CSV; 100 training steps on CPU.

1. `--no-use-tpu`: every step exits 0 (Transform with Beam's
   multi-processing DirectRunner included), the model is pushed, the
   trainer's /mlpipeline-metrics.json and /mlpipeline-ui-metadata.json are
   valid; the trainer step retried in a new pod exits 0 with the same metrics.
2. The TPU compile (the default v4 2x2x1, with
   `--beam-arg=--direct_running_mode=in_memory` to keep it short, and to
   see a --beam-arg reach the steps): every step
   before the trainer exits 0, and the trainer fails with the project's
   "no TPU" message.
(A user's pipeline: test_compiled_user_pipeline_runs.py, a module of its own
so that the two can run in different xdist processes.)
"""

import os

import pytest

from tests.fixtures import argo_pod
from tests.fixtures import compiled_runs
from tests.fixtures.compiled_runs import data_root  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import

pytestmark = compiled_runs.MARKS

DATA_STEPS = ['csvexamplegen', 'statisticsgen', 'schemagen',
              'examplevalidator', 'transform']
ALL_STEPS = DATA_STEPS + ['tputrainer', 'evaluator', 'pusher']
NO_TPU_MESSAGE = 'Could not resolve TPU'


def test_cpu_pipeline_runs_every_step_and_a_retried_trainer_exits_0(
    work, data_root, mlmd_server):
  workflow = compiled_runs.compile_taxi(work, data_root, 'cpu',
                                        '--no-use-tpu')
  run = compiled_runs.workflow_run(work, workflow, mlmd_server, 'cpu')
  assert [t['name'] for t in run.dag_tasks()] == ALL_STEPS
  results = argo_pod.run_all(run)
  for result in results:
    assert result.returncode == 0, (
        f'{result.task}:\n{compiled_runs.tail(result)}')
  assert argo_pod.names(results) == ALL_STEPS

  # Transform ran Beam in worker processes and imported the
  # preprocessing_fn by name there.
  transform_log = results[DATA_STEPS.index('transform')].log()
  assert 'multi_processing' in transform_log
  assert "No module named 'user_module" not in transform_log

  serving = work / 'pipeline_root' / 'serving_model'
  versions = os.listdir(serving)
  assert len(versions) == 1, versions
  assert os.path.isfile(serving / versions[0] / 'saved_model.pb')

  trainer = results[ALL_STEPS.index('tputrainer')]
  metrics = compiled_runs.read_json(
      trainer.root_file('/mlpipeline-metrics.json'))
  by_name = {m['name']: m['numberValue'] for m in metrics['metrics']}
  assert by_name['global_step'] == compiled_runs.TRAIN_STEPS
  assert 0 <= by_name['accuracy'] <= 1
  assert all(m['format'] == 'RAW' for m in metrics['metrics'])
  ui = compiled_runs.read_json(
      trainer.root_file('/mlpipeline-ui-metadata.json'))
  types = [o['type'] for o in ui['outputs']]
  assert types.count('tensorboard') == 1 and 'markdown' in types
  tensorboard = [o for o in ui['outputs'] if o['type'] == 'tensorboard'][0]
  assert os.path.isdir(tensorboard['source'])
  # The training report beside it, inline, with its plots embedded.
  [report] = [o for o in ui['outputs'] if o['type'] == 'web-app']
  assert report['storage'] == 'inline'
  assert '<h1>Training report</h1>' in report['source']
  assert 'src="data:image/png;base64,' in report['source']
  for result in results:  # Every step's UI metadata is valid JSON.
    assert isinstance(compiled_runs.read_json(
        result.root_file('/mlpipeline-ui-metadata.json'))['outputs'], list)

  # Argo retries the trainer step (new pod, same run): its execution had
  # already succeeded, so TFX skips the executor; the step exits 0 and shows
  # the same metrics again.
  retry = argo_pod.run_step_logged(
      run, argo_pod.tasks_by_name(run)['tputrainer'], suffix='-retry')
  assert retry.returncode == 0, compiled_runs.tail(retry)
  assert 'This execution has already succeeded' in retry.log()
  assert compiled_runs.read_json(
      retry.root_file('/mlpipeline-metrics.json')) == metrics
  retry_ui = compiled_runs.read_json(
      retry.root_file('/mlpipeline-ui-metadata.json'))
  assert tensorboard in retry_ui['outputs']
  assert report in retry_ui['outputs']
  assert os.listdir(serving) == versions  # Nothing trained or pushed again.


def test_tpu_pipeline_fails_only_at_the_trainer_with_no_tpu(
    work, data_root, mlmd_server):
  # Beam in memory here (through --beam-arg, which must reach every step):
  # the CPU test already proves the multi-processing default, and this
  # keeps the test short.
  # The default TPU (v4, StreamExecutor): PJRT's variables would make this
  # virtual environment's TensorFlow, which has no /lib/libtpu.so, fail at
  # import (NotFoundError ... pluggable device libraries ... '/lib/libtpu.so').
  workflow = compiled_runs.compile_taxi(
      work, data_root, 'tpu', '--trainer-image',
      'gcr.io/test/tfx-tpu-trainer-tpu:1',
      '--beam-arg=--direct_running_mode=in_memory')
  trainer_template = [t for t in workflow['spec']['templates']
                      if t['name'] == 'tputrainer'][0]
  assert trainer_template['container']['resources']['limits'] == {
      'google.com/tpu': '4'}
  run = compiled_runs.workflow_run(work, workflow, mlmd_server, 'tpu')
  beam_steps = []
  for task in run.dag_tasks():
    argv, _ = run.invocation(task, 'pod')
    ir = argv[argv.index('--tfx_ir') + 1]
    if '--direct_running_mode=' in ir:
      assert '--direct_running_mode=in_memory' in ir, task['name']
      assert 'multi_processing' not in ir, task['name']
      beam_steps.append(task['name'])
  assert {'csvexamplegen', 'statisticsgen', 'transform',
          'evaluator'} <= set(beam_steps)
  results = argo_pod.run_all(run)
  assert argo_pod.names(results) == DATA_STEPS + ['tputrainer']
  for result in results[:-1]:
    assert result.returncode == 0, (
        f'{result.task}:\n{compiled_runs.tail(result)}')
  trainer = results[-1]
  assert trainer.returncode != 0
  log = trainer.log()
  assert NO_TPU_MESSAGE in log, log[-6000:]
  assert "No module named" not in log
  # The declared metrics output still exists (empty), so Argo reports the
  # step's failure rather than a missing artifact.
  assert compiled_runs.read_json(
      trainer.root_file('/mlpipeline-metrics.json')) == {'metrics': []}
