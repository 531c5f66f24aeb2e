"""The built image runs every compiled step, as its pods would on a cluster.

The image is built here (`scripts/build_image.sh`, as `make image`: local
bases, docker's build cache). Each step of the taxi pipeline's KFP v1
workflow then runs as a `docker run` of that image with the container spec's
command, arguments and environment as Argo starts it, as the image's
non-root user (`tests/fixtures/docker_pod.py`), the pipeline root on a
volume and MLMD behind the test's gRPC server
(`tests/fixtures/taxi_kfp_v1_run.py`, with Beam's default worker count, one
process per core): the CPU compile's data steps, the TPU compile's trainer
step failing with "no TPU", the CPU trainer as Argo's retry of it, the
Evaluator and Pusher to a pushed model (written by the image's user), the
trainer retried again; the KFP UI files written in each container by that
user. test_compiled_pipeline_runs.py runs the same steps with the same
checks in chroot pods, in `make test`.

The built image's tests (`image`) run in `make test-image`, which .ci/run
runs after `make test`; a user's pipeline in the image:
test_built_image_user_pipeline.py; the KFP v2 compile:
test_built_image_kfp_v2.py. Skipped only where Docker cannot be started (no
docker CLI or dockerd, or not root); `.ci/run` installs and starts it.
"""

import functools
import json
import os
import subprocess

import pytest

from tests.fixtures import docker_pod
from tests.fixtures import taxi_kfp_v1_run
from tests.fixtures.compiled_runs import data_root  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import
from tests.fixtures.docker_pod import built_image  # pylint: disable=unused-import
from tfx_tpu_trainer_cli import kubeflow_compile

pytestmark = docker_pod.image_marks()

USER_UID = docker_pod.IMAGE_UID


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


@pytest.fixture(scope='module')
def taxi_run(image, work, data_root, mlmd_server):
  """The taxi KFP v1 run's data steps and TPU trainer step, in the image.

  Beam's default worker count (one process per core) in both compiles. The
  TPU compile's trainer step runs in this CPU image too (no TPU image can be
  built here: libtpu's host is not reachable).
  """
  os.chmod(work, 0o755)
  docker_pod.shared_with_the_pods(work / 'pipeline_root')
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
