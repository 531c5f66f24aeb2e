"""The compiled KFP v1 pipeline runs, step by step, as its pods would.

`tfx-tpu-trainer compile` writes the Argo workflow; every step's container
command, arguments and environment are then executed exactly as compiled
(`tests/fixtures/argo_pod.py`: Argo's substitutions, the pod's fieldRefs, the
repository at /tfx-tpu-trainer through a mount namespace and chroot, one pod
root per step) in DAG order, against a real MLMD store behind a gRPC server
(`tests/fixtures/mlmd_grpc_server.py`) that the `metadata-grpc-configmap`
points at. Data: 1,000 rows of the taxi CSV; 100 training steps on CPU.

One KFP run, with the steps of two compiles of the taxi pipeline:

1. The `--no-use-tpu` compile's data steps all exit 0 (Transform with Beam's
   multi-processing DirectRunner included, one worker process per step:
   `--beam-arg=--direct_num_workers=1` in both compiles; the default, one
   per core, runs in the built image, tests/kubeflow/test_built_image.py).
2. The TPU compile's trainer step (the default v4 2x2x1) in the same run: it
   fails with the project's "no TPU" message, and its declared metrics output
   exists. The TPU compile's data steps are not run: their TFX nodes are the
   CPU compile's, and only their Beam arguments differ (its
   `--beam-arg=--direct_running_mode=in_memory`, which must reach every Beam
   step), both checked in the compiled IR.
3. The CPU compile's trainer step then runs as Argo's retry of that failed
   step (TFX reuses the failed execution) and exits 0, as do the Evaluator
   and Pusher: the model is pushed, the trainer's /mlpipeline-metrics.json
   and /mlpipeline-ui-metadata.json are valid. Retried once more in a new
   pod, the trainer step exits 0 with the same metrics.
(A user's pipeline: test_compiled_user_pipeline_runs.py, a module of its own
so that the two can run in different xdist processes.)
"""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2
import pytest
from tfx.proto.orchestration import pipeline_pb2

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
IN_MEMORY = '--direct_running_mode=in_memory'
# Each Beam worker process imports TensorFlow and TFX (about 6 s of CPU).
ONE_WORKER = '--beam-arg=--direct_num_workers=1'
MULTI_PROCESSING = '--direct_running_mode=multi_processing'


@dataclasses.dataclass
class _SharedRun:
  cpu: argo_pod.ArgoWorkflowRun
  tpu: argo_pod.ArgoWorkflowRun
  tpu_workflow: Dict[str, Any]
  data_results: List[argo_pod.StepResult]
  tpu_trainer: Optional[argo_pod.StepResult]  # None: a data step failed.


@pytest.fixture(scope='module')
def shared_run(work, data_root, mlmd_server):
  """The CPU compile's data steps, then the TPU compile's trainer step."""
  cpu_workflow = compiled_runs.compile_taxi(work, data_root, 'cpu',
                                            '--no-use-tpu', ONE_WORKER)
  # The default TPU (v4, StreamExecutor): PJRT's variables would make this
  # virtual environment's TensorFlow, which has no /lib/libtpu.so, fail at
  # import (NotFoundError ... pluggable device libraries ... '/lib/libtpu.so').
  tpu_workflow = compiled_runs.compile_taxi(
      work, data_root, 'tpu', '--trainer-image',
      'gcr.io/test/tfx-tpu-trainer-tpu:1', ONE_WORKER,
      f'--beam-arg={IN_MEMORY}')
  cpu = compiled_runs.workflow_run(work, cpu_workflow, mlmd_server, 'cpu')
  tpu = compiled_runs.workflow_run(work, tpu_workflow, mlmd_server, 'tpu')
  tpu.join(cpu)
  data_results = []
  for task in cpu.dag_tasks()[:len(DATA_STEPS)]:
    data_results.append(argo_pod.run_step_logged(cpu, task))
    if data_results[-1].returncode != 0:
      break
  tpu_trainer = None
  if all(result.returncode == 0 for result in data_results):
    tpu_trainer = argo_pod.run_step_logged(
        tpu, argo_pod.tasks_by_name(tpu)['tputrainer'])
  return _SharedRun(cpu, tpu, tpu_workflow, data_results, tpu_trainer)


def _data_steps_exit_0(shared_run):
  assert argo_pod.names(shared_run.data_results) == DATA_STEPS
  for result in shared_run.data_results:
    assert result.returncode == 0, (
        f'{result.task}:\n{compiled_runs.tail(result)}')


def _node_and_beam_args(run, task):
  """The step's TFX node and its executor's Beam arguments, from its IR."""
  argv, _ = run.invocation(task, 'pod')
  node_id = argv[argv.index('--node_id') + 1]
  ir = pipeline_pb2.Pipeline()
  json_format.Parse(argv[argv.index('--tfx_ir') + 1], ir)
  [node] = [n.pipeline_node for n in ir.nodes
            if n.pipeline_node.node_info.id == node_id]
  deployment = pipeline_pb2.IntermediateDeploymentConfig()
  ir.deployment_config.Unpack(deployment)
  executor = json.loads(json_format.MessageToJson(
      deployment.executor_specs[node_id]))
  return node, executor.get('beamPipelineArgs', [])


def test_tpu_trainer_step_fails_with_no_tpu(shared_run):
  trainer_template = [t for t in shared_run.tpu_workflow['spec']['templates']
                      if t['name'] == 'tputrainer'][0]
  assert trainer_template['container']['resources']['limits'] == {
      'google.com/tpu': '4'}
  # What the TPU trainer read, the TPU compile's data steps would have made:
  # the same nodes, Beam in memory through --beam-arg.
  cpu_tasks = argo_pod.tasks_by_name(shared_run.cpu)
  beam_steps = []
  for task in shared_run.tpu.dag_tasks():
    node, beam_args = _node_and_beam_args(shared_run.tpu, task)
    if any(a.startswith('--direct_running_mode=') for a in beam_args):
      assert IN_MEMORY in beam_args, task['name']
      assert MULTI_PROCESSING not in beam_args
      beam_steps.append(task['name'])
    if task['name'] in DATA_STEPS:
      cpu_node, cpu_beam_args = _node_and_beam_args(
          shared_run.cpu, cpu_tasks[task['name']])
      assert node == cpu_node, task['name']
      assert ([a for a in beam_args if a != IN_MEMORY] ==
              [a for a in cpu_beam_args if a != MULTI_PROCESSING]), (
                  task['name'])
  assert {'csvexamplegen', 'statisticsgen', 'transform',
          'evaluator'} <= set(beam_steps)

  _data_steps_exit_0(shared_run)
  trainer = shared_run.tpu_trainer
  assert trainer.returncode != 0
  log = trainer.log()
  assert NO_TPU_MESSAGE in log, log[-6000:]
  assert "No module named" not in log
  # The declared metrics output still exists (empty), so Argo reports the
  # step's failure rather than a missing artifact.
  assert compiled_runs.read_json(
      trainer.root_file('/mlpipeline-metrics.json')) == {'metrics': []}


def test_cpu_pipeline_runs_every_step_and_retried_trainers_exit_0(
    work, shared_run):
  _data_steps_exit_0(shared_run)
  run = shared_run.cpu
  assert [t['name'] for t in run.dag_tasks()] == ALL_STEPS
  # Transform ran Beam in worker processes and imported the
  # preprocessing_fn by name there.
  transform_log = shared_run.data_results[DATA_STEPS.index('transform')].log()
  assert 'multi_processing' in transform_log
  assert "No module named 'user_module" not in transform_log

  tasks = argo_pod.tasks_by_name(run)
  results = []
  for name in ALL_STEPS[len(DATA_STEPS):]:
    results.append(argo_pod.run_step_logged(run, tasks[name]))
    assert results[-1].returncode == 0, (
        f'{name}:\n{compiled_runs.tail(results[-1])}')
  trainer = results[0]
  # The TPU trainer's execution failed in this run: TFX reuses it.
  assert (f'Actual state: {metadata_store_pb2.Execution.FAILED}.' in
          trainer.log()), compiled_runs.tail(trainer)

  serving = work / 'pipeline_root' / 'serving_model'
  versions = os.listdir(serving)
  assert len(versions) == 1, versions
  assert os.path.isfile(serving / versions[0] / 'saved_model.pb')

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
  for result in shared_run.data_results + results:
    # Every step's UI metadata is valid JSON.
    assert isinstance(compiled_runs.read_json(
        result.root_file('/mlpipeline-ui-metadata.json'))['outputs'], list)

  # Argo retries the trainer step (new pod, same run): its execution had
  # already succeeded, so TFX skips the executor; the step exits 0 and shows
  # the same metrics again.
  retry = argo_pod.run_step_logged(run, tasks['tputrainer'], suffix='-retry')
  assert retry.returncode == 0, compiled_runs.tail(retry)
  assert 'This execution has already succeeded' in retry.log()
  assert compiled_runs.read_json(
      retry.root_file('/mlpipeline-metrics.json')) == metrics
  retry_ui = compiled_runs.read_json(
      retry.root_file('/mlpipeline-ui-metadata.json'))
  assert tensorboard in retry_ui['outputs']
  assert report in retry_ui['outputs']
  assert os.listdir(serving) == versions  # Nothing trained or pushed again.
