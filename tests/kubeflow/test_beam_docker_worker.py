"""The built image as Beam's SDK harness: Transform, with a module file on
no one's path, on Beam's portable runner with `--environment_type=DOCKER`.

Beam's own job server, embedded (`--job_endpoint=embed`), starts each worker
as Flink's or Spark's task managers do: `docker run -d --network=host IMAGE
--id=... --control_endpoint=...` (Beam's DockerSdkWorkerHandler), so the
image's entrypoint, `/opt/apache/beam/boot`, fetches the job's staged files
(TFX's user-module wheel), installs them and starts the SDK harness as the
image's non-root user. ExampleGen, StatisticsGen and SchemaGen run here on
the DirectRunner.

What a cluster gives the workers, given here: storage every worker reaches
(a bucket there; here the test's work folder, mounted at the same path and
writable by the image's user). Beam's `docker run` mounts nothing, so a
`docker` first on PATH adds that volume, and a label to clean up by, to
Beam's `docker run` and passes every other command through.

Skipped only where Docker cannot be started, as test_built_image.py.
"""

import os
import re
import shutil
import subprocess

import pytest
import tensorflow as tf

from tests import conftest
from tests.fixtures import docker_pod
from tests.fixtures import pipeline_outputs
from tfx_tpu_trainer_cli import paths

_UNAVAILABLE = docker_pod.docker_unavailable_reason()

pytestmark = [pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.skipif(bool(_UNAVAILABLE), reason=_UNAVAILABLE)]

ROWS = 300
USER_UID = 1000
LABEL = f'tfx-tpu-trainer-test=beam-docker-{os.getpid()}'


@pytest.fixture(scope='module')
def image():
  docker_pod.build_image()
  return docker_pod.IMAGE


def _containers():
  """The ids of the containers Beam started in this run."""
  return subprocess.run(['docker', 'ps', '-aq', '--filter', f'label={LABEL}'],
                        capture_output=True, text=True,
                        check=True).stdout.split()


@pytest.fixture
def beam_docker(tmp_path, monkeypatch):
  """A work folder the workers reach; Beam's `docker run` mounts it."""
  work = tmp_path / 'work'
  work.mkdir()
  os.chown(work, USER_UID, -1)
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  docker = bin_dir / 'docker'
  docker.write_text(
      '#!/bin/sh\n'
      'if [ "$1" = run ]; then\n'
      '  shift\n'
      f'  exec {shutil.which("docker")} run --label {LABEL} '
      f'--volume {work}:{work} "$@"\n'
      'fi\n'
      f'exec {shutil.which("docker")} "$@"\n')
  docker.chmod(0o755)
  monkeypatch.setenv('PATH', f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
  # The image's user writes into folders this (root) process makes.
  umask = os.umask(0)
  try:
    yield work
  finally:
    os.umask(umask)
    ids = _containers()
    if ids:
      subprocess.run(['docker', 'rm', '--force'] + ids, capture_output=True,
                     check=False)


def _records(uri):
  files = tf.io.gfile.glob(os.path.join(uri, 'Split-*', '*'))
  assert files, uri
  return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type='GZIP'))


def test_transform_runs_in_the_image_as_beam_s_docker_sdk_harness(
    image, beam_docker):
  work = beam_docker
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

  artifacts = pipeline_outputs.run_data_components(
      str(work), data, str(modules / 'user_preprocessing.py'), beam_args)

  # Transform's outputs, written by the image's user in the container.
  examples = artifacts.transformed_examples.uri
  assert _records(examples) == _records(artifacts.raw_examples.uri) == ROWS
  graph = artifacts.transform_graph.uri
  saved_model = os.path.join(graph, 'transform_fn', 'saved_model.pb')
  assert os.path.isfile(saved_model)
  assert os.path.isfile(os.path.join(graph, 'transformed_metadata',
                                     'schema.pbtxt'))
  written = [os.path.join(d, f) for d, _, files in os.walk(examples)
             for f in files] + [saved_model]
  assert {os.stat(p).st_uid for p in written} == {USER_UID}, written

  # Beam started the workers from the image; its boot installed the staged
  # user-module wheel and ran the SDK harness.
  ids = _containers()
  assert ids
  logs = []
  for container in ids:
    assert subprocess.run(
        ['docker', 'inspect', '--format', '{{.Config.Image}}', container],
        capture_output=True, text=True, check=True).stdout.strip() == image
    logged = subprocess.run(['docker', 'logs', container], capture_output=True,
                            text=True, check=False)
    logs.append(logged.stdout + logged.stderr)
  log = '\n'.join(logs)
  assert 'Installing extra package: tfx_user_code_Transform-' in log, log
  assert re.search(r'Successfully installed tfx[-_]user[-_]code[-_]transform',
                   log, re.IGNORECASE), log
  assert 'Executing Python (worker' in log, log
