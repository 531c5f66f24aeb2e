"""The Dockerfile's images: they parse, pin what requirements.lock pins,
take TensorFlow 2.15's TPU build and libtpu from Google's Cloud TPU storage,
set each TPU runtime's environment as tpu/runtimes.py has it, and run as a
non-root user. Read only; test_built_image.py builds the CPU image."""

import os
import re
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _instructions(path):
  """(stage, instruction, arguments) of each instruction, lines joined."""
  with open(path) as f:
    text = re.sub(r'\\\n', ' ', f.read())
  stage, result, args = None, [], {}
  for line in text.splitlines():
    line = line.strip()
    if not line or line.startswith('#'):
      continue
    instruction, _, rest = line.partition(' ')
    instruction = instruction.upper()
    if instruction == 'FROM':
      parts = rest.split()
      stage = parts[2] if len(parts) > 2 and parts[1].upper() == 'AS' else None
    result.append((stage, instruction, rest.strip()))
  return result


def _lock():
  pins = {}
  with open(os.path.join(REPO, 'requirements.lock')) as f:
    for line in f:
      match = re.match(r'^([A-Za-z0-9_.\[\]-]+)==([^\s;]+)', line)
      if match:
        pins[match.group(1).lower()] = match.group(2)
  return pins


@pytest.fixture(scope='module')
def dockerfile():
  return _instructions(os.path.join(REPO, 'Dockerfile'))


def _stage(dockerfile, name):
  return [(i, a) for s, i, a in dockerfile if s == name]


def test_targets_image_tpu_and_one_per_runtime(dockerfile):
  froms = [a for _, i, a in dockerfile if i == 'FROM']
  assert froms == ['${BEAM_SDK_IMAGE} AS beam-sdk', 'scratch AS source',
                   '${PYTHON_IMAGE} AS image',
                   'image AS tpu', 'tpu AS tpu-se', 'tpu AS tpu-pjrt']
  # The bases are build arguments (scripts/build_image.sh passes locally
  # made ones where no registry is reachable); their defaults are the real
  # images.
  base_args = [a for s, i, a in dockerfile if s is None and i == 'ARG']
  assert base_args == ['PYTHON_IMAGE=python:3.10.13-slim-bookworm',
                       'BEAM_SDK_IMAGE=apache/beam_python3.10_sdk:2.59.0']


def _env(dockerfile, stage):
  env = {}
  for instruction, args in _stage(dockerfile, stage):
    if instruction == 'ENV':
      for pair in args.split():
        name, _, value = pair.partition('=')
        env[name] = value
  return env


def test_each_runtime_target_sets_the_environment_runtimes_py_names(
    dockerfile):
  from tfx_tpu_trainer.tpu import runtimes  # pylint: disable=g-import-not-at-top
  # The runtime-neutral TPU image records libtpu's version, no runtime.
  assert _env(dockerfile, 'tpu') == {
      runtimes.LIBTPU_VERSION_ENV: '${LIBTPU_VERSION}'}
  assert _env(dockerfile, 'tpu-se') == {runtimes.RUNTIME_ENV: runtimes.SE}
  assert _env(dockerfile, 'tpu-pjrt') == dict(
      runtimes.PJRT_ENV, **{runtimes.RUNTIME_ENV: runtimes.PJRT})
  for runtime in runtimes.RUNTIMES:
    choice = runtimes.choose(
        'tpu-v4-podslice' if runtime == runtimes.SE else 'tpu-v5p-slice',
        runtime)
    assert choice.image_target == f'tpu-{runtime}'
    target_env = _env(dockerfile, choice.image_target)
    assert {k: v for k, v in choice.env.items()
            if k != runtimes.ACCELERATOR_ENV} == target_env


def test_image_installs_exactly_the_lock_and_this_package(dockerfile):
  runs = [a for i, a in _stage(dockerfile, 'image') if i == 'RUN']
  assert any('pip install --no-cache-dir --no-deps -r requirements.lock' in r
             for r in runs)
  assert any('pip install --no-cache-dir --no-deps -e .' in r for r in runs)
  lock = _lock()
  # The Beam boot binary comes from the SDK image of the locked Beam.
  assert lock['apache-beam'] == '2.59.0'
  assert lock['tfx'] == '1.15.1' and lock['kfp'] == '1.8.22'


def test_tpu_image_takes_tf_215_tpu_build_and_libtpu(dockerfile):
  args = dict(a.split('=', 1) for i, a in _stage(dockerfile, 'tpu')
              if i == 'ARG' and '=' in a)
  lock = _lock()
  assert args['TF_TPU_VERSION'] == '2.15.0'
  # Google's TPU build exists for 2.15.0 only; the lock's CPU build is
  # 2.15.1, the same minor (and tensorflow-estimator 2.15.0 for both).
  assert lock['tensorflow'].rsplit('.', 1)[0] == args[
      'TF_TPU_VERSION'].rsplit('.', 1)[0]
  assert lock['tensorflow-estimator'] == '2.15.0'
  assert args['LIBTPU_VERSION'] == '1.9.0'
  assert args['TF_TPU_WHEEL'] == (
      'https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/'
      'tf-${TF_TPU_VERSION}/tensorflow-${TF_TPU_VERSION}-cp310-cp310-'
      'manylinux_2_17_x86_64.manylinux2014_x86_64.whl')
  assert args['LIBTPU_URL'] == (
      'https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/'
      '${LIBTPU_VERSION}/libtpu.so')


def test_both_images_run_as_a_non_root_user(dockerfile):
  for stage in ('image', 'tpu', 'tpu-se', 'tpu-pjrt'):
    users = [a for i, a in _stage(dockerfile, stage) if i == 'USER']
    assert users and users[-1] == '${USER_UID}', stage
    assert ('ARG', 'USER_UID=1000') in _stage(dockerfile, stage), stage
  runs = ' '.join(a for i, a in _stage(dockerfile, 'image') if i == 'RUN')
  assert 'useradd --uid "${USER_UID}"' in runs
  assert 'chown tfx /mlpipeline-ui-metadata.json /mlpipeline-metrics.json' in (
      runs)


def test_image_path_and_pythonpath_match_the_compiler(dockerfile):
  from tfx_tpu_trainer_cli import kubeflow_compile  # pylint: disable=g-import-not-at-top
  image = _stage(dockerfile, 'image')
  assert ('WORKDIR', kubeflow_compile.IMAGE_REPO_ROOT) in image
  assert ('ENV', 'PYTHONPATH=' +
          kubeflow_compile.STEP_ENV['PYTHONPATH']) in image
  assert ('COPY', 'components ./components') in _stage(dockerfile, 'source')
  assert ('COPY', '--from=source /tfx-tpu-trainer ./') in image


def test_image_stage_has_one_layer_after_the_locked_install(dockerfile):
  """Under the vfs driver every layer is a full copy of the file system:
  after the big layer (the lock), only the repository's files and its
  editable install add layers."""
  image = _stage(dockerfile, 'image')
  layers = [i for i, _ in image if i in ('RUN', 'COPY', 'ADD')]
  lock = layers.index('RUN', layers.index('COPY', 2))
  assert layers[lock:] == ['RUN', 'COPY', 'RUN'], layers


def test_pip_settings_are_build_arguments_not_environment(dockerfile):
  for stage in ('image', 'tpu'):
    assert ('ARG', 'PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST '
            'PIP_CERT') in _stage(dockerfile, stage), stage
    assert not [a for i, a in _stage(dockerfile, stage)
                if i == 'ENV' and 'PIP_' in a], stage


def test_makefile_builds_every_target():
  with open(os.path.join(REPO, 'Makefile')) as f:
    makefile = f.read()
  assert 'bash scripts/build_image.sh image $(IMAGE)' in makefile
  assert 'docker build --target tpu-se -t $(TPU_SE_IMAGE) .' in makefile
  assert 'docker build --target tpu-pjrt -t $(TPU_PJRT_IMAGE) .' in makefile


@pytest.mark.skipif(not shutil.which('hadolint'), reason='hadolint not found')
def test_hadolint_passes():
  result = subprocess.run(['hadolint', os.path.join(REPO, 'Dockerfile')],
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
