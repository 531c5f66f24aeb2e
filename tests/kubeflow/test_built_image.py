"""The built image runs every compiled step, as its pods would on a cluster.

The image is built here (`scripts/build_image.sh`, as `make image`: local
bases, docker's build cache). Each step of a compiled KFP v1 workflow then
runs as a `docker run` of that image with the container spec's command,
arguments and environment as Argo starts it, as the image's non-root user
(`tests/fixtures/docker_pod.py`), the pipeline root on a volume and MLMD
behind the test's gRPC server:

* The taxi pipeline's KFP v1 run (`tests/fixtures/taxi_kfp_v1_run.py`, with
  Beam's default worker count, one process per core): the CPU compile's
  data steps, the TPU compile's trainer step failing with "no TPU", the CPU
  trainer as Argo's retry of it, the Evaluator and Pusher to a pushed model
  (written by the image's user), the trainer retried again; the KFP UI files
  written in each container by that user. These steps run only here where
  Docker runs: test_compiled_pipeline_runs.py, which runs them in chroot
  pods with the same checks, is skipped then.
* A user's pipeline (examples/penguin_tpu compiled with `--pipeline`), to a
  pushed model.

Then the taxi pipeline compiled for KFP v2, every task started from its
executor's container spec with the ExecutorInput and arguments the KFP v2
driver and launcher give it (`tests/fixtures/kfp_v2_launch.py`), each fed
its producers' outputs. The user's pipeline and the KFP v2 compile run one
Beam worker process per step (`--beam-arg=--direct_num_workers=1`).

Skipped only where Docker cannot be started (no docker CLI or dockerd, or
not root); `.ci/run` installs and starts it.
"""

import functools
import itertools
import json
import os
import subprocess

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
import pytest
from tfx.utils import path_utils
import yaml

from tests.fixtures import compiled_runs
from tests.fixtures import docker_pod
from tests.fixtures import kfp_v2_launch
from tests.fixtures import taxi_kfp_v1_run
from tests.fixtures.compiled_runs import data_root  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer_cli import kubeflow_compile
from tfx_tpu_trainer_cli import main as cli

_UNAVAILABLE = docker_pod.docker_unavailable_reason()

pytestmark = [pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.skipif(bool(_UNAVAILABLE), reason=_UNAVAILABLE)]

V2_TASKS = ['CsvExampleGen', 'StatisticsGen', 'SchemaGen', 'ExampleValidator',
            'Transform', 'TPUTrainer', 'Evaluator', 'Pusher']
USER_UID = docker_pod.IMAGE_UID


@pytest.fixture(scope='module')
def image():
  docker_pod.build_image()
  yield docker_pod.IMAGE
  docker_pod.remove_test_containers()


def _in_image(image, *argv):
  """Runs `argv` in a container of `image` (no network); its stdout."""
  result = subprocess.run(
      ['docker', 'run', '--rm', '--network', 'none', '--label',
       docker_pod.LABEL, '--entrypoint', argv[0], image] + list(argv[1:]),
      capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  return result.stdout


def test_image_is_non_root_with_the_paths_the_compiler_names(image):
  config = docker_pod.image_config(image)
  assert config['User'] == str(USER_UID)
  assert config['WorkingDir'] == kubeflow_compile.IMAGE_REPO_ROOT
  assert config['Entrypoint'] == ['/opt/apache/beam/boot']
  env = dict(e.split('=', 1) for e in config['Env'])
  assert env['PYTHONPATH'] == kubeflow_compile.STEP_ENV['PYTHONPATH']
  # No pip setting of the building machine is left in the image.
  assert not [k for k in env if k.startswith('PIP_')], env
  report = json.loads(_in_image(image, 'python', '-c', '''
import json, os, sys
import tensorflow as tf, tfx, apache_beam, kfp, tfx_tpu_trainer.executor
import taxi_preprocessing  # From PYTHONPATH, as Transform imports it.
print(json.dumps({
    "uid": os.getuid(), "cwd": os.getcwd(), "python": sys.version.split()[0],
    "versions": [tf.__version__, tfx.__version__, apache_beam.__version__,
                 kfp.__version__],
    "ui_writable": [os.access(p, os.W_OK) for p in (
        "/mlpipeline-ui-metadata.json", "/mlpipeline-metrics.json")],
    "repo_writable": os.access(os.getcwd(), os.W_OK)}))
'''))
  assert report['uid'] == USER_UID
  assert report['cwd'] == kubeflow_compile.IMAGE_REPO_ROOT
  assert report['python'].startswith('3.10.')
  assert report['versions'] == ['2.15.1', '1.15.1', '2.59.0', '1.8.22']
  assert report['ui_writable'] == [True, True]
  assert not report['repo_writable']  # The code is root's, read-only.
  assert 'compile' in _in_image(image, 'tfx-tpu-trainer', '--help')


def _shared_with_the_pods(path):
  """`path`, made writable by the image's user, as a bucket is to pods."""
  path.mkdir(exist_ok=True)
  for folder, _, files in os.walk(path):
    os.chown(folder, USER_UID, -1)
    for name in files:
      os.chown(os.path.join(folder, name), USER_UID, -1)


@pytest.fixture(scope='module')
def taxi_run(image, work, data_root, mlmd_server):
  """The taxi KFP v1 run's data steps and TPU trainer step, in the image.

  Beam's default worker count (one process per core) in both compiles. The
  TPU compile's trainer step runs in this CPU image too (no TPU image can be
  built here: libtpu's host is not reachable).
  """
  os.chmod(work, 0o755)
  _shared_with_the_pods(work / 'pipeline_root')
  run_step = functools.partial(docker_pod.run_step, mounts=[str(work)],
                               image=image)
  # The steps' environment is the compiled one on top of the image's (no
  # PATH, no HOME from this machine).
  return taxi_kfp_v1_run.start(work, data_root, mlmd_server, run_step,
                               pod_env={})


def test_taxi_tpu_trainer_step_fails_in_the_image_with_no_tpu(taxi_run):
  taxi_kfp_v1_run.check_tpu_compile(taxi_run)


def test_taxi_pipeline_runs_every_step_in_the_image_to_a_pushed_model(
    work, taxi_run):
  """Then the CPU trainer as Argo's retry, the Evaluator, the Pusher and the
  trainer retried again (taxi_kfp_v1_run's checks), every file written by
  the image's user."""
  results = taxi_kfp_v1_run.check_cpu_steps_and_retries(work, taxi_run)
  serving = work / 'pipeline_root' / 'serving_model'
  [version] = os.listdir(serving)
  assert os.stat(serving / version / 'saved_model.pb').st_uid == USER_UID
  for result in results:
    for path in docker_pod.UI_FILES:
      assert docker_pod.ui_file_owner(result, path) == USER_UID, result.task


def test_user_pipeline_runs_every_step_in_the_image_to_a_pushed_model(
    image, work, mlmd_server, monkeypatch):
  """examples/penguin_tpu, copied out of the repository, compiled with
  `--pipeline`: each step in the image installs the module wheel that TFX
  packaged under the pipeline root."""
  workflow, root = compiled_runs.compile_user_pipeline(
      work, monkeypatch, 'user_image')
  assert os.listdir(root / '_wheels')  # TFX's packaging, at compile time.
  os.chmod(work, 0o755)
  _shared_with_the_pods(root.parent)  # The wheel TFX packaged, the data.
  run = compiled_runs.workflow_run(work, workflow, mlmd_server, 'user-image')
  run.base_env = {}
  results = []
  for task in run.dag_tasks():
    results.append(docker_pod.run_step(run, task, [str(work)], image=image))
    assert results[-1].returncode == 0, (
        f'{task["name"]}:\n{compiled_runs.tail(results[-1])}')
  model = compiled_runs.check_user_pipeline_run(results, root)
  assert os.stat(model).st_uid == USER_UID


def test_kfp_v2_pipeline_runs_every_step_in_the_image_to_a_pushed_model(
    image, work, data_root):
  """The taxi pipeline compiled for KFP v2 (CPU), each task started as a KFP
  v2 backend starts it, in the DAG's order: its upstream artifacts read back
  from the producers' ExecutorOutput with the blank type schema the backend
  gives them (tensorflow/tfx#7768), `{{$}}` substituted by the launcher."""
  os.chmod(work, 0o755)
  v2 = work / 'kfp_v2'
  assert cli.main([
      'compile', '--runner', 'kubeflow_v2', '--no-use-tpu', '--no-vertex-job',
      '--pipeline-root', str(v2 / 'pipeline_root'), '--data-root', data_root,
      '--output-dir', str(v2 / 'compiled'), '--image',
      'gcr.io/test/tfx-tpu-trainer:1', '--train-steps',
      str(compiled_runs.TRAIN_STEPS), '--eval-steps', '5',
      '--train-batch-size', '32', '--eval-batch-size', '32',
      # One Beam worker process per step, each importing TensorFlow; the
      # default count runs in the KFP v1 taxi run (taxi_run).
      '--beam-arg=--direct_num_workers=1']) == 0
  with open(v2 / 'compiled' / 'taxi-tpu.kfp-v2-pipeline.yaml') as f:
    spec = list(yaml.safe_load_all(f))[0]
  # The pipeline root, like a bucket, is the pods' to write (the Pusher
  # writes `serving_model` there).
  (v2 / 'pipeline_root').mkdir()
  _shared_with_the_pods(v2)
  order = kfp_v2_launch.task_order(spec)
  assert order == V2_TASKS
  ids = itertools.count(1)
  results = {}
  for task in order:
    inputs = kfp_v2_launch.task_inputs(spec, task, results, ids)
    for listed in inputs.values():
      assert listed[0]['type'] == {'instanceSchema': ''}
    results[task] = kfp_v2_launch.run_task(
        spec, task, inputs, spec['defaultPipelineRoot'], str(v2 / 'pods'),
        [str(work)], image=image)
    assert results[task].returncode == 0, (
        f'{task}:\n{results[task].log()[-6000:]}')
    # The step's ExecutorInput parses as the pipeline spec's own message.
    json_format.ParseDict(results[task].executor_input,
                          pipeline_spec_pb2.ExecutorInput())
    # The ExecutorOutput the launcher reads, written by the image's user:
    # each output at the URI the driver gave it.
    assert os.stat(results[task].output_file).st_uid == USER_UID, task
    with open(results[task].output_file) as f:
      executor_output = json_format.Parse(f.read(),
                                          pipeline_spec_pb2.ExecutorOutput())
    for key, listed in executor_output.artifacts.items():
      assert listed.artifacts[0].uri == results[task].output_uri(key), (
          task, key)

  result = results['TPUTrainer']
  with open(result.output_file) as f:
    executor_output = json_format.Parse(f.read(),
                                        pipeline_spec_pb2.ExecutorOutput())
  artifacts = {k: v.artifacts[0] for k, v in executor_output.artifacts.items()}
  assert sorted(artifacts) == ['metrics', 'model', 'model_run']
  for key, artifact in artifacts.items():
    assert artifact.name == key
  metrics = json_format.MessageToDict(artifacts['metrics'].metadata)
  assert metrics['global_step'] == compiled_runs.TRAIN_STEPS
  assert 'loss' in metrics
  model_metadata = json_format.MessageToDict(artifacts['model'].metadata)
  assert model_metadata['eval_global_step'] == compiled_runs.TRAIN_STEPS
  serving = path_utils.serving_model_path(result.output_uri('model'))
  assert export.saved_model_tag_sets(serving) == [('serve',), ('serve', 'tpu')]
  assert os.stat(os.path.join(serving, 'saved_model.pb')).st_uid == USER_UID
  written = os.path.join(result.output_uri('model_run'),
                         metrics_lib.METRICS_FILE_NAME)
  assert os.stat(written).st_uid == USER_UID
  assert compiled_runs.read_json(written)['global_step'] == (
      compiled_runs.TRAIN_STEPS)

  # The Evaluator blessed the trainer's model and the Pusher pushed it.
  blessing = results['Evaluator'].output_uri('blessing')
  assert os.path.exists(os.path.join(blessing, 'BLESSED'))
  with open(results['Pusher'].output_file) as f:
    pushed = json.load(f)['artifacts']['pushed_model']['artifacts'][0]
  assert pushed['metadata']['pushed'] == 1
  destination = pushed['metadata']['pushed_destination']
  assert destination.startswith(str(v2 / 'pipeline_root' / 'serving_model'))
  assert export.saved_model_tag_sets(destination) == [('serve',),
                                                      ('serve', 'tpu')]
  assert os.stat(os.path.join(destination, 'saved_model.pb')).st_uid == (
      USER_UID)
