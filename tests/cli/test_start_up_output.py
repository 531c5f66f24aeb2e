"""What a command prints before and around its own lines, as a user sees it.

Each command runs as the console script does, in a fresh process
(`python -m tfx_tpu_trainer_cli`): no TensorFlow start-up lines and no
google.api_core FutureWarnings before the command's output, usage errors
answered before TensorFlow or TFX is imported, and `compile` keeping what
TFX, kfp and TFX's packaging print in a log file. (The bundled pipeline's
compile, with nothing on stderr: the README's command in a fresh shell,
tests/test_readme.py.)
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.fixtures import serving_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLE_DIR = os.path.join(REPO, 'examples', 'penguin_tpu')
# Lines that are not the command's own: TensorFlow's C++ start-up, Python
# warnings, TensorFlow's and absl's deprecation logging, setuptools.
NOISE_MARKERS = ('Unable to register', 'FutureWarning', 'warnings.warn',
                 'WARNING:tensorflow', 'WARNING:absl', 'deprecated',
                 'running bdist_wheel', 'running build', 'copying ',
                 'setuptools')
# A program that reports whether TensorFlow or TFX was imported after the
# command returned (argparse errors exit through SystemExit).
_MODULES_AFTER = '''
import sys
from tfx_tpu_trainer_cli import main
try:
  code = main.main(sys.argv[1:])
except SystemExit as e:
  code = e.code
print('loaded:', sorted(m for m in ('tensorflow', 'tfx') if m in sys.modules),
      file=sys.stderr)
sys.exit(code)
'''


def _cli(args, cwd, env=None):
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', *args], cwd=cwd,
      capture_output=True, text=True, env=env, check=False)


def _noise(text):
  return [line for line in text.splitlines()
          if any(marker in line for marker in NOISE_MARKERS)]


def test_tensorflow_import_keeps_its_other_lines(tmp_path):
  from tfx_tpu_trainer_cli import quiet_start  # pylint: disable=g-import-not-at-top
  # The filter drops the three registration lines only: anything else
  # TensorFlow writes while loading still reaches stderr.
  program = ('import os, sys\n'
             'from tfx_tpu_trainer_cli import quiet_start\n'
             'quiet_start.install()\n'
             'import tensorflow\n'
             'os.write(2, b"after the import\\n")\n')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='0')
  result = subprocess.run([sys.executable, '-c', program], cwd=str(tmp_path),
                          capture_output=True, text=True, env=env,
                          check=True)
  assert not quiet_start.TENSORFLOW_NOISE.search(result.stderr)
  assert 'after the import' in result.stderr
  # TF_CPP_MIN_LOG_LEVEL=0 shows its I lines: they pass the filter.
  assert 'I ' in result.stderr or 'cpu_feature_guard' in result.stderr


@pytest.mark.parametrize('args,message', [
    (['compile'], 'the following arguments are required: --pipeline-root, '
     '--data-root'),
    (['compile', '--pipeline', 'p.py'], "--pipeline 'p.py' is not "
     'FILE:FUNCTION'),
    (['run', '--pipeline', 'p.py'], "--pipeline 'p.py' is not FILE:FUNCTION"),
])
def test_usage_errors_come_before_tensorflow_and_tfx_load(tmp_path, args,
                                                          message):
  (tmp_path / 'p.py').write_text('x = 1\n')
  result = subprocess.run([sys.executable, '-c', _MODULES_AFTER, *args],
                          cwd=str(tmp_path), capture_output=True, text=True,
                          check=False)
  assert result.returncode == 2, result.stderr
  assert message in result.stderr
  assert 'loaded: []' in result.stderr
  assert _noise(result.stderr) == []
  # Nothing written: no log folder, no output.
  assert sorted(os.listdir(tmp_path)) == ['p.py']


@pytest.fixture(scope='module')
def penguin(tmp_path_factory):
  work = tmp_path_factory.mktemp('penguin')
  shutil.copytree(EXAMPLE_DIR, work / 'my_pipeline')
  serving_data.write_penguins(str(work / 'data'), rows=100)
  return work


def test_compile_of_a_user_pipeline_keeps_tfx_packaging_in_a_log(penguin):
  env = dict(os.environ, PENGUIN_DATA_ROOT=str(penguin / 'data'),
             PENGUIN_PIPELINE_ROOT=str(penguin / 'root'))
  out = penguin / 'out'
  result = _cli(['compile', '--pipeline',
                 f'{penguin / "my_pipeline" / "penguin_pipeline.py"}'
                 ':create_pipeline', '--output-dir', str(out),
                 '--no-use-tpu'], cwd=str(penguin), env=env)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0] == f'Wrote {out / "penguin-tpu.tar.gz"} (Argo workflow ' \
      'for KFP v1).'
  assert _noise(result.stdout) == [] and result.stderr == ''
  # TFX packaged the module file (its setuptools output is in the log).
  assert 'TPUTrainer: penguin_tpu_module@' in result.stdout
  (log_line,) = [line for line in lines if line.startswith('  Full log:')]
  log_path = log_line.split()[-1]
  assert os.path.dirname(log_path) == tempfile.gettempdir()
  # The output directory holds the compiled file alone.
  assert os.listdir(out) == ['penguin-tpu.tar.gz']
  with open(log_path) as f:
    log = f.read()
  assert 'bdist_wheel' in log
  assert len(lines) < 15, result.stdout


def test_run_of_a_user_pipeline_names_its_root_as_where_outputs_go(penguin):
  # No data: the run fails at its first component, after the heading.
  (penguin / 'no_data').mkdir()
  env = dict(os.environ, PENGUIN_DATA_ROOT=str(penguin / 'no_data'),
             PENGUIN_PIPELINE_ROOT=str(penguin / 'run_root'))
  result = _cli(['run', '--pipeline',
                 f'{penguin / "my_pipeline" / "penguin_pipeline.py"}'
                 ':create_pipeline', '--output-root', str(penguin / 'out')],
                cwd=str(penguin), env=env)
  assert result.returncode == 1, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].startswith("Running pipeline 'penguin-tpu' from ")
  assert lines[1] == (f'  outputs under {penguin / "run_root"} (its '
                      'pipeline root)')
  assert lines[2].startswith(f'  full log: {penguin / "out" / "logs"}')
  assert not any(line.startswith(f'  outputs under {penguin / "out"}')
                 for line in lines)
