"""A wheel of the repository, installed non-editable in a fresh venv.

Builds the wheel with uv, installs it into a new virtual environment with
requirements.lock as constraints, and from a directory outside the
repository: the library and the CLI import, `--version` answers, no
top-level `pipelines`/`components` package exists, and `tfx-tpu-trainer
run` trains the bundled pipeline to a model that the Evaluator's default
thresholds bless, and pushes it. Slow (the install takes
about a minute with a warm uv cache, the run two); skipped without uv.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from tfx_tpu_trainer import version

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _uv():
  found = shutil.which('uv') or os.path.join(REPO, '.tools', 'uv', 'bin',
                                             'uv')
  return found if os.path.isfile(found) else None


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
  uv = _uv()
  if uv is None:
    pytest.skip('uv is not installed (make env installs it into .tools/)')
  work = tmp_path_factory.mktemp('package')
  subprocess.run([uv, 'build', '--wheel', '-o', str(work / 'dist'), REPO],
                 check=True, capture_output=True)
  (wheel,) = glob.glob(str(work / 'dist' / '*.whl'))
  venv = work / 'venv'
  subprocess.run([uv, 'venv', '--quiet', '--seed', '--python', sys.executable,
                  str(venv)], check=True)
  subprocess.run([uv, 'pip', 'install', '--quiet', '--python',
                  str(venv / 'bin' / 'python'), wheel, '-c',
                  os.path.join(REPO, 'requirements.lock')], check=True)
  _link_bytecode(_site_packages(sys.prefix), _site_packages(str(venv)))
  elsewhere = work / 'elsewhere'
  elsewhere.mkdir()
  return venv, elsewhere


def _site_packages(prefix):
  (found,) = glob.glob(os.path.join(prefix, 'lib', 'python3*',
                                    'site-packages'))
  return found


def _link_bytecode(source_site, target_site):
  """Gives the new venv the bytecode that pip would compile at install.

  uv installs without bytecode and compiling all 3 GB costs more than the
  test's commands compiling what they import. Both venvs hold the same
  files from uv's cache, so this venv's compiled files serve: Python takes a
  .pyc only if its source's modification time and size match, and compiles
  any other file again.

  Args:
    source_site: this venv's site-packages.
    target_site: the new venv's.
  """
  for folder, _, files in os.walk(source_site):
    if os.path.basename(folder) != '__pycache__':
      continue
    target = os.path.join(target_site, os.path.relpath(folder, source_site))
    if not os.path.isdir(os.path.dirname(target)):
      continue
    os.makedirs(target, exist_ok=True)
    for name in files:
      if not os.path.exists(os.path.join(target, name)):
        try:  # Python replaces, never rewrites, a .pyc: links are safe.
          os.link(os.path.join(folder, name), os.path.join(target, name))
        except OSError:
          shutil.copy2(os.path.join(folder, name), os.path.join(target, name))


def _run(installed, *command):
  venv, elsewhere = installed
  # Bytecode of what _link_bytecode did not give is written as the first
  # command imports it, and reused by the next.
  env = {k: v for k, v in os.environ.items()
         if k not in ('PYTHONPATH', 'PYTHONDONTWRITEBYTECODE')}
  return subprocess.run(list(command), cwd=elsewhere, env=env,
                        capture_output=True, text=True)


def _metric(out, name):
  return float(re.search(rf'\b{name}=([0-9.]+)', out).group(1))


def test_wheel_has_no_top_level_pipelines_or_components(installed):
  venv, _ = installed
  site_packages = _site_packages(str(venv))
  assert not os.path.exists(os.path.join(site_packages, 'pipelines'))
  assert not os.path.exists(os.path.join(site_packages, 'components'))
  result = _run(installed, str(venv / 'bin' / 'python'), '-c',
                'import importlib.util as u, os\n'
                'assert u.find_spec("pipelines") is None\n'
                'from tfx_tpu_trainer import TPUTrainer\n'
                'from tfx_tpu_trainer.kubeflow import compiler\n'
                'from tfx_tpu_trainer_cli import paths\n'
                'assert paths.TRAINER_MODULE_FILE.startswith('
                'os.path.dirname(u.find_spec("tfx_tpu_trainer_cli").origin))\n'
                'assert os.path.isfile(paths.PREPROCESSING_MODULE_FILE)\n'
                'print(TPUTrainer.__name__)')
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().endswith('TPUTrainer')


def test_version(installed):
  venv, _ = installed
  result = _run(installed, str(venv / 'bin' / 'tfx-tpu-trainer'), '--version')
  assert result.stdout == f'tfx-tpu-trainer {version.__version__}\n'


def test_run_from_another_directory_pushes_a_model(installed):
  venv, elsewhere = installed
  # 200 steps train a model the Evaluator blesses; the Trainer's own
  # evaluations (5 over training) read 5 batches each, as the blessing is
  # TFMA's, on the whole eval split.
  result = _run(installed, str(venv / 'bin' / 'tfx-tpu-trainer'), 'run',
                '--train-steps', '200', '--eval-steps', '5')
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  # The Evaluator's default thresholds bless the trained model, and the
  # summary says why (a model that is not blessed: tests/cli/test_blessing.py).
  accuracy = _metric(result.stdout, 'binary_accuracy')
  balanced = _metric(result.stdout, 'balanced_accuracy')
  assert balanced >= 0.55
  assert (f'Blessed:                yes (binary_accuracy {accuracy:.4g} (needs '
          f'>= 0.5); balanced_accuracy {balanced:.4g} (needs >= 0.55))'
          in result.stdout), result.stdout
  pushed = [line.split()[-1] for line in result.stdout.splitlines()
            if line.startswith('  Pushed model:')][0]
  assert os.path.isfile(os.path.join(elsewhere, pushed, 'saved_model.pb'))
  # The README's client: one raw tf.Example to the pushed {serve} model.
  client = _run(installed, str(venv / 'bin' / 'python'),
                os.path.join(REPO, 'examples', 'predict_taxi.py'),
                os.path.dirname(os.path.join(elsewhere, pushed)))
  assert client.returncode == 0, client.stderr[-3000:]
  assert 'probabilities: [[' in client.stdout
