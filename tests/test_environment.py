"""The pinned stack (docs/architecture.md) is what the environment holds,
and `make env` installs it quietly."""

import importlib.metadata
import os
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PINNED = {
    'tfx': '1.15.1',
    'tensorflow': '2.15.1',
    'tensorflow-estimator': '2.15.0',
    'tensorflow-transform': '1.15.0',
    'apache-beam': '2.59.0',
    'kfp': '1.8.22',
}


def test_python_is_3_10():
  assert sys.version_info[:2] == (3, 10)


@pytest.mark.parametrize('distribution,version', sorted(PINNED.items()))
def test_pinned_distribution_versions(distribution, version):
  assert importlib.metadata.version(distribution) == version


def test_tensorflow_and_estimator_import_at_pinned_versions():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_estimator  # pylint: disable=g-import-not-at-top

  assert tf.__version__ == '2.15.1'
  assert tensorflow_estimator.estimator.tpu.TPUEstimator is (
      tf.compat.v1.estimator.tpu.TPUEstimator)
  tpu_estimator_cls = tf.compat.v1.estimator.tpu.TPUEstimator
  assert issubclass(tpu_estimator_cls, tf.compat.v1.estimator.Estimator)
  assert hasattr(tf.compat.v1.estimator.tpu, 'TPUEstimatorSpec')


def test_tfx_trainer_and_kubeflow_runner_import():
  from tfx import version  # pylint: disable=g-import-not-at-top
  from tfx.components.trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow import kubeflow_dag_runner  # pylint: disable=g-import-not-at-top
  import kfp  # pylint: disable=g-import-not-at-top

  assert version.__version__ == '1.15.1'
  assert kfp.__version__ == '1.8.22'
  assert issubclass(executor.Executor, executor.GenericExecutor)
  assert hasattr(kubeflow_dag_runner, 'KubeflowDagRunner')


def test_importing_kfp_builds_no_lark_grammar():
  # setup.py keeps jsonschema below 4.25: its rfc3987-syntax format checker
  # builds a Lark grammar on import, about 1.3 s in every kfp process.
  import kfp  # pylint: disable=g-import-not-at-top,unused-import

  assert 'rfc3987_syntax' not in sys.modules
  assert 'lark' not in sys.modules


def test_venv_has_pip_for_module_file_packaging():
  # TFX installs packaged module files with `python -m pip`.
  assert importlib.metadata.version('pip')
  import setuptools  # pylint: disable=g-import-not-at-top,unused-import
  import wheel  # pylint: disable=g-import-not-at-top,unused-import


def test_installing_uv_as_root_keeps_pips_root_warning_quiet(tmp_path):
  """`make env` where uv is missing: pip installs it into .tools/uv, and,
  run as root, would print its warning about root and virtualenvs."""
  # A python that reports how pip was asked to install uv, and a uv.
  fake_python = tmp_path / 'python3.10'
  fake_python.write_text(
      '#!/bin/sh\n'
      'echo "PIP_ROOT_USER_ACTION=$PIP_ROOT_USER_ACTION: $*" >&2\n')
  fake_python.chmod(0o755)
  script = (f'source {shlex.quote(os.path.join(REPO, "scripts", "setup_env.sh"))}'
            f' && tools={shlex.quote(str(tmp_path / "tools"))}'
            f' && find_uv {shlex.quote(str(fake_python))}')
  result = subprocess.run(['bash', '-c', script], capture_output=True,
                          text=True, env={'PATH': '/usr/bin:/bin'},
                          check=True)
  assert result.stdout == f'{tmp_path / "tools" / "uv" / "bin" / "uv"}\n'
  (asked,) = [line for line in result.stderr.splitlines()
              if line.startswith('PIP_ROOT_USER_ACTION')]
  assert asked == ('PIP_ROOT_USER_ACTION=ignore: -m pip install --quiet '
                   f'--disable-pip-version-check --target {tmp_path / "tools"}'
                   '/uv uv')
