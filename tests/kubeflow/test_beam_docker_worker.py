"""The built image as Beam's SDK harness: Transform, with a module file on
no one's path, on Beam's portable runner with `--environment_type=DOCKER`.

As on a cluster, the step runs in the image as its non-root user (a `docker
run` of the image, the driver below) and submits the job to Beam's own job
server, here embedded in it (`--job_endpoint=embed`), which starts each
worker as a Flink or Spark task manager with Docker does: `docker run -d
--network=host IMAGE --id=... --control_endpoint=...` (Beam's
DockerSdkWorkerHandler), through the host's Docker daemon (its socket and
CLI given to the driver). The image's entrypoint, `/opt/apache/beam/boot`,
fetches the job's staged files (TFX's user-module wheel), installs them in
its venv and starts the SDK harness, as the image's user. ExampleGen,
StatisticsGen and SchemaGen run in the driver on the DirectRunner.

What a cluster gives the pods, given here: storage every pod reaches (a
bucket there; here the test's work folder, mounted at the same path).
Beam's `docker run` mounts nothing, so a `docker` first on the driver's
PATH adds that volume, and a label to clean up by, to Beam's `docker run`
and passes every other command through.

Then the image as the worker pool sidecar of a Flink task manager (`docker
run IMAGE --worker_pool`), with a job on it.

Skipped only where Docker cannot be started, as test_built_image.py.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest
import tensorflow as tf

from tests import conftest
from tests.conftest import REPO_ROOT
from tests.fixtures import beam_jobs
from tests.fixtures import docker_pod
from tests.fixtures.docker_pod import built_image  # pylint: disable=unused-import
from tfx_tpu_trainer_cli import paths

pytestmark = docker_pod.image_marks()

ROWS = 300
USER_UID = 1000
LABEL = f'tfx-tpu-trainer-test=beam-docker-{os.getpid()}'
DOCKER_SOCKET = '/var/run/docker.sock'
WORKER_POOL_PORT = 50000  # boot.go's, for --worker_pool.
# In the driver: the host's docker CLI, and the repository's tests (for
# tests/fixtures/pipeline_outputs.py, which runs the data components).
DOCKER_CLI = '/usr/local/bin/docker-cli'
TESTS_PARENT = '/beam-driver'
DRIVER = """
import json, sys
from tests.fixtures import pipeline_outputs
a = pipeline_outputs.run_data_components(*sys.argv[1:4], sys.argv[4:])
print(json.dumps({k: getattr(a, k).uri for k in (
    'raw_examples', 'transformed_examples', 'transform_graph')}))
"""


def _containers():
  """The ids of the containers this test started (the driver, Beam's)."""
  return subprocess.run(['docker', 'ps', '-aq', '--filter', f'label={LABEL}'],
                        capture_output=True, text=True,
                        check=True).stdout.split()


@pytest.fixture
def work(tmp_path):
  """The pods' shared storage; the containers this test started go after."""
  work = tmp_path / 'work'
  (work / 'bin').mkdir(parents=True)
  (work / 'home').mkdir()
  docker = work / 'bin' / 'docker'
  docker.write_text(
      '#!/bin/sh\n'
      'if [ "$1" = run ]; then\n'
      '  shift\n'
      f'  exec {DOCKER_CLI} run --label {LABEL} --volume {work}:{work} "$@"\n'
      'fi\n'
      f'exec {DOCKER_CLI} "$@"\n')
  docker.chmod(0o755)
  try:
    yield work
  finally:
    ids = _containers()
    if ids:
      subprocess.run(['docker', 'rm', '--force'] + ids, capture_output=True,
                     check=False)


def _run_driver(image, work, argv):
  """The step: `python -c DRIVER argv` in the image, as its user."""
  for folder, _, files in os.walk(work):
    os.chown(folder, USER_UID, -1)
    for name in files:
      os.chown(os.path.join(folder, name), USER_UID, -1)
  result = subprocess.run(
      ['docker', 'run', '--name', f'beam-driver-{os.getpid()}', '--label',
       LABEL, '--network', 'host',
       '--group-add', str(os.stat(DOCKER_SOCKET).st_gid),
       '--volume', f'{DOCKER_SOCKET}:{DOCKER_SOCKET}',
       '--volume', f'{shutil.which("docker")}:{DOCKER_CLI}:ro',
       '--volume', f'{work}:{work}',
       '--volume', f'{os.path.join(REPO_ROOT, "tests")}:'
                   f'{TESTS_PARENT}/tests:ro',
       '--env', f'PATH={work}/bin:/usr/local/bin:/usr/bin:/bin',
       '--env', f'HOME={work}/home',
       '--env', f'PYTHONPATH={TESTS_PARENT}:/tfx-tpu-trainer/components',
       '--entrypoint', 'python', image, '-c', DRIVER] + argv,
      capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def _records(uri):
  files = tf.io.gfile.glob(os.path.join(uri, 'Split-*', '*'))
  assert files, uri
  return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type='GZIP'))


def test_transform_runs_in_the_image_as_beam_s_docker_sdk_harness(
    image, work):
  data = conftest.write_taxi_slice(str(work / 'data'), rows=ROWS)
  modules = work / 'user_modules'  # Not on the image's PYTHONPATH.
  modules.mkdir()
  shutil.copy(paths.PREPROCESSING_MODULE_FILE,
              modules / 'user_preprocessing.py')
  shutil.copy(os.path.join(paths.COMPONENTS_DIR, 'taxi_features.py'), modules)
  beam_args = ['--runner=PortableRunner', '--job_endpoint=embed',
               '--environment_type=DOCKER', f'--environment_config={image}',
               # As the compile sets it: TFX then stages no copy of itself.
               f'--sdk_container_image={image}']

  uris = _run_driver(image, work, [
      str(work / 'run'), data, str(modules / 'user_preprocessing.py')] +
                     beam_args)

  # Transform's outputs, every row, written by the image's user.
  examples, graph = uris['transformed_examples'], uris['transform_graph']
  assert _records(examples) == _records(uris['raw_examples']) == ROWS
  saved_model = os.path.join(graph, 'transform_fn', 'saved_model.pb')
  assert os.path.isfile(saved_model)
  assert os.path.isfile(os.path.join(graph, 'transformed_metadata',
                                     'schema.pbtxt'))
  written = [os.path.join(d, f) for d, _, files in os.walk(examples)
             for f in files] + [saved_model]
  assert {os.stat(p).st_uid for p in written} == {USER_UID}, written

  # Beam started the workers from the image; its boot installed the staged
  # user-module wheel and ran the SDK harness.
  workers = [c for c in _containers() if subprocess.run(
      ['docker', 'inspect', '--format', '{{.Name}}', c], capture_output=True,
      text=True, check=True).stdout.strip() != f'/beam-driver-{os.getpid()}']
  assert workers
  logs = []
  for container in workers:
    assert subprocess.run(
        ['docker', 'inspect', '--format', '{{.Config.Image}}', container],
        capture_output=True, text=True, check=True).stdout.strip() == image
    logged = subprocess.run(['docker', 'logs', container], capture_output=True,
                            text=True, check=False)
    logs.append(logged.stdout + logged.stderr)
  log = '\n'.join(logs)
  assert re.search(r'Installing extra package: tfx_user_code_transform-\S+'
                   r'\.whl', log, re.IGNORECASE), log
  assert re.search(r'Successfully installed tfx[-_]user[-_]code[-_]transform',
                   log, re.IGNORECASE), log
  assert 'Executing Python (worker' in log, log


def _port_in_use(port):
  with socket.socket() as s:
    return s.connect_ex(('localhost', port)) == 0


def test_the_image_serves_beam_s_worker_pool_as_a_flink_sidecar(image, work):
  """`args: ["--worker_pool"]`, as the Flink operator's sidecar runs the
  image (docs/guide/kubeflow.md): boot serves Beam's worker pool on port 50000
  and starts a boot per worker; a job with `--environment_type=EXTERNAL
  --environment_config=localhost:50000` runs on it."""
  del work  # Its teardown removes the containers labelled for this run.
  if _port_in_use(WORKER_POOL_PORT):
    pytest.skip(f'port {WORKER_POOL_PORT} (boot\'s worker pool) is in use')
  pool = subprocess.run(
      ['docker', 'run', '-d', '--label', LABEL, '--network', 'host', image,
       '--worker_pool'], capture_output=True, text=True, check=True
  ).stdout.strip()
  while not _port_in_use(WORKER_POOL_PORT):
    state = subprocess.run(
        ['docker', 'inspect', '--format', '{{.State.Status}}', pool],
        capture_output=True, text=True, check=True).stdout.strip()
    assert state == 'running', subprocess.run(
        ['docker', 'logs', pool], capture_output=True, text=True,
        check=False).stderr
    time.sleep(1)
  beam_jobs.run_on_worker_pool(f'localhost:{WORKER_POOL_PORT}')
  logged = subprocess.run(['docker', 'logs', pool], capture_output=True,
                          text=True, check=False)
  log = logged.stdout + logged.stderr
  assert 'Starting worker pool' in log, log
  assert 'Initializing temporary Python venv in /opt/apache/beam-venv/' in log
  assert re.search(r'Executing Python \(worker worker_\d+\)', log), log
