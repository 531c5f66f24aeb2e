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
3. A user's pipeline (examples/penguin_tpu copied out of the repository)
   through `compile --pipeline --no-use-tpu`: TFX packages its module file
   under the pipeline root while compiling; every step exits 0 and the
   model is pushed.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from tfx_tpu_trainer_cli.bundled.pipelines import paths as repo_paths
from tests.fixtures import argo_pod
from tfx_tpu_trainer_cli import main as cli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not argo_pod.pod_isolation_available(),
                       reason='needs root for mount namespaces and chroot'),
]

ROWS = 1000
TRAIN_STEPS = 100
DATA_STEPS = ['csvexamplegen', 'statisticsgen', 'schemagen',
              'examplevalidator', 'transform']
ALL_STEPS = DATA_STEPS + ['tputrainer', 'evaluator', 'pusher']
NO_TPU_MESSAGE = 'Could not resolve TPU'


@pytest.fixture(scope='module')
def work(tmp_path_factory):
  return tmp_path_factory.mktemp('kfp_e2e')


@pytest.fixture(scope='module')
def data_root(work):
  source = os.path.join(repo_paths.embedded_data_root(), 'data.csv')
  target = work / 'data'
  target.mkdir()
  with open(source) as f, open(target / 'data.csv', 'w') as out:
    for i, line in enumerate(f):
      if i > ROWS:
        break
      out.write(line)
  return str(target)


@pytest.fixture(scope='module')
def mlmd_server(work):
  """KFP's metadata-grpc-service: the MLMD gRPC API over SQLite."""
  port_file = work / 'mlmd.port'
  repo = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  server = subprocess.Popen(
      [sys.executable, '-m', 'tests.fixtures.mlmd_grpc_server', '--db',
       str(work / 'mlmd.sqlite'), '--port-file', str(port_file)], cwd=repo)
  try:
    deadline = time.monotonic() + 120
    while not port_file.exists():
      assert server.poll() is None, 'the MLMD gRPC server exited'
      assert time.monotonic() < deadline, 'the MLMD gRPC server did not start'
      time.sleep(0.2)
    yield {'METADATA_GRPC_SERVICE_HOST': '127.0.0.1',
           'METADATA_GRPC_SERVICE_PORT': port_file.read_text().strip()}
  finally:
    server.terminate()
    server.wait(timeout=30)


def _compile(work, data_root, name, *argv):
  out = work / f'compiled_{name}'
  assert cli.main([
      'compile', '--pipeline-root', str(work / 'pipeline_root'),
      '--data-root', data_root, '--output-dir', str(out), '--output-file',
      'workflow.tar.gz', '--image', 'gcr.io/test/tfx-tpu-trainer:1',
      '--train-steps', str(TRAIN_STEPS), '--eval-steps', '5',
      '--train-batch-size', '32', '--eval-batch-size', '32'] +
                  list(argv)) == 0
  from tfx_tpu_trainer_cli.bundled.pipelines import kubeflow_compile  # pylint: disable=g-import-not-at-top
  return kubeflow_compile.read_argo_workflow(str(out / 'workflow.tar.gz'))


def _run(work, workflow, mlmd_server, name):
  home = work / 'home'
  home.mkdir(exist_ok=True)
  return argo_pod.ArgoWorkflowRun(
      workflow, repo_root=repo_paths.REPO_ROOT, work_dir=str(work / name),
      config_maps={'metadata-grpc-configmap': mlmd_server},
      workflow_name=f'taxi-tpu-{name}',
      base_env=argo_pod.image_env(home=str(home)))


def _read_json(path):
  with open(path) as f:
    return json.load(f)


def _tail(result):
  return result.log()[-6000:]


def test_cpu_pipeline_runs_every_step_and_a_retried_trainer_exits_0(
    work, data_root, mlmd_server):
  workflow = _compile(work, data_root, 'cpu', '--no-use-tpu')
  run = _run(work, workflow, mlmd_server, 'cpu')
  assert [t['name'] for t in run.dag_tasks()] == ALL_STEPS
  results = argo_pod.run_all(run)
  for result in results:
    assert result.returncode == 0, f'{result.task}:\n{_tail(result)}'
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
  metrics = _read_json(trainer.root_file('/mlpipeline-metrics.json'))
  by_name = {m['name']: m['numberValue'] for m in metrics['metrics']}
  assert by_name['global_step'] == TRAIN_STEPS
  assert 0 <= by_name['accuracy'] <= 1
  assert all(m['format'] == 'RAW' for m in metrics['metrics'])
  ui = _read_json(trainer.root_file('/mlpipeline-ui-metadata.json'))
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
    assert isinstance(_read_json(
        result.root_file('/mlpipeline-ui-metadata.json'))['outputs'], list)

  # Argo retries the trainer step (new pod, same run): its execution had
  # already succeeded, so TFX skips the executor; the step exits 0 and shows
  # the same metrics again.
  retry = argo_pod.run_step_logged(
      run, argo_pod.tasks_by_name(run)['tputrainer'], suffix='-retry')
  assert retry.returncode == 0, _tail(retry)
  assert 'This execution has already succeeded' in retry.log()
  assert _read_json(retry.root_file('/mlpipeline-metrics.json')) == metrics
  retry_ui = _read_json(retry.root_file('/mlpipeline-ui-metadata.json'))
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
  workflow = _compile(work, data_root, 'tpu', '--trainer-image',
                      'gcr.io/test/tfx-tpu-trainer-tpu:1',
                      '--beam-arg=--direct_running_mode=in_memory')
  trainer_template = [t for t in workflow['spec']['templates']
                      if t['name'] == 'tputrainer'][0]
  assert trainer_template['container']['resources']['limits'] == {
      'google.com/tpu': '4'}
  run = _run(work, workflow, mlmd_server, 'tpu')
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
    assert result.returncode == 0, f'{result.task}:\n{_tail(result)}'
  trainer = results[-1]
  assert trainer.returncode != 0
  log = trainer.log()
  assert NO_TPU_MESSAGE in log, log[-6000:]
  assert "No module named" not in log
  # The declared metrics output still exists (empty), so Argo reports the
  # step's failure rather than a missing artifact.
  assert _read_json(trainer.root_file('/mlpipeline-metrics.json')) == {
      'metrics': []}


USER_STEPS = ['csvexamplegen', 'statisticsgen', 'schemagen', 'transform',
              'tputrainer', 'evaluator', 'pusher']


def test_user_pipeline_outside_the_repo_runs_every_step_to_a_pushed_model(
    work, mlmd_server, monkeypatch):
  """examples/penguin_tpu, copied out of the repository, through
  `compile --pipeline`: TFX packages its module file as a wheel under the
  pipeline root, and every step, run as its pod would, installs it."""
  import shutil  # pylint: disable=g-import-not-at-top
  from tests.fixtures import serving_data  # pylint: disable=g-import-not-at-top
  user = work / 'user_files'
  shutil.copytree(os.path.join(repo_paths.REPO_ROOT, 'examples',
                               'penguin_tpu'), user / 'penguin_tpu')
  serving_data.write_penguins(str(user / 'data'), rows=300)
  root = user / 'pipeline_root'
  monkeypatch.setenv('PENGUIN_DATA_ROOT', str(user / 'data'))
  monkeypatch.setenv('PENGUIN_PIPELINE_ROOT', str(root))
  monkeypatch.setenv('PENGUIN_TRAIN_STEPS', '200')
  out = work / 'compiled_user'
  assert cli.main([
      'compile', '--pipeline',
      f'{user / "penguin_tpu" / "penguin_pipeline.py"}:create_pipeline',
      '--output-dir', str(out), '--image', 'gcr.io/test/tfx-tpu-trainer:1',
      '--no-use-tpu']) == 0
  from tfx_tpu_trainer_cli.bundled.pipelines import kubeflow_compile  # pylint: disable=g-import-not-at-top
  workflow = kubeflow_compile.read_argo_workflow(str(out /
                                                     'penguin-tpu.tar.gz'))
  assert os.listdir(root / '_wheels')  # TFX's packaging, at compile time.
  run = _run(work, workflow, mlmd_server, 'user')
  results = argo_pod.run_all(run)
  for result in results:
    assert result.returncode == 0, f'{result.task}:\n{_tail(result)}'
  assert argo_pod.names(results) == USER_STEPS
  versions = os.listdir(root / 'serving_model')
  assert len(versions) == 1, versions
  assert os.path.isfile(root / 'serving_model' / versions[0] /
                        'saved_model.pb')
  trainer = results[USER_STEPS.index('tputrainer')]
  metrics = _read_json(trainer.root_file('/mlpipeline-metrics.json'))
  by_name = {m['name']: m['numberValue'] for m in metrics['metrics']}
  assert by_name['global_step'] == 200
