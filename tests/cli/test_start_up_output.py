"""What a command prints before and around its own lines, as a user sees it.

Each command runs as the console script does, in a fresh process
(`python -m tfx_tpu_trainer_cli`): no TensorFlow start-up lines and no
google.api_core FutureWarnings before the command's output, usage errors
the command line and the files show answered before TensorFlow, TFX or kfp
is imported, a first line before they load, and `compile` keeping what
TFX, kfp and TFX's packaging print in a log file. The bundled compile and
the penguin run without data are the processes tests/cli/test_log_secrets.py
reads too, run once (tests/fixtures/cli_processes.py).
"""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.fixtures import cli_processes
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
# A program that reports whether TensorFlow, TFX or kfp was imported after
# the command returned (argparse errors exit through SystemExit).
_MODULES_AFTER = '''
import sys
from tfx_tpu_trainer_cli import main
try:
  code = main.main(sys.argv[1:])
except SystemExit as e:
  code = e.code
print('loaded:', sorted(m for m in ('tensorflow', 'tfx', 'kfp')
                        if m in sys.modules), file=sys.stderr)
sys.exit(code)
'''
TENSORFLOW_LOADS = cli_processes.TENSORFLOW_LOADS


def _noise(text):
  return [line for line in text.splitlines()
          if any(marker in line for marker in NOISE_MARKERS)]


def test_taxi_compile_prints_a_first_line_then_no_start_up_noise(
    taxi_compile_with_a_secret):
  # The compile whose secret tests/cli/test_log_secrets.py checks masked.
  result = taxi_compile_with_a_secret
  assert result.returncode == 0, result.stderr
  assert _noise(result.stderr) == [] and _noise(result.stdout) == []
  lines = result.stdout.splitlines()
  # What it does, at once: before TensorFlow starts to load.
  assert lines[:2] == ['Compiling the taxi pipeline for KFP v1 (TensorFlow, '
                       'TFX and kfp load first) ...', TENSORFLOW_LOADS]
  output = os.path.join(result.folder, 'taxi_tpu.tar.gz')
  assert lines[2].startswith(f'Wrote {output} ')
  assert result.stderr == ''


def test_run_prints_its_first_lines_before_tensorflow_loads(tmp_path):
  module = os.path.join(REPO, 'tests', 'fixtures', 'modules',
                        'no_model_fn.py')
  output_root = tmp_path / 'out'
  result = cli_processes.marked(['run', '--module-file', module,
                                 '--output-root', str(output_root)],
                                cwd=str(tmp_path))
  # The module breaks the contract: found once TensorFlow loaded.
  assert result.returncode == 2, result.stderr
  assert 'tfx-tpu-trainer run: error: --module-file: ' in result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].startswith('Running the taxi pipeline on ')
  assert lines[1:] == [f'  outputs under {output_root}',
                       '  checking the module files (TensorFlow and TFX '
                       'load first) ...', TENSORFLOW_LOADS]
  assert not output_root.exists()


def test_preflight_says_what_it_does_before_tensorflow_loads(tmp_path):
  module = os.path.join(REPO, 'tests', 'fixtures', 'modules',
                        'fails_to_import.py')
  result = subprocess.run(
      [sys.executable, '-c', cli_processes.MARKS_TENSORFLOW, 'preflight',
       '--module-file', module], cwd=str(tmp_path), stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, check=False)
  lines = result.stdout.splitlines()
  # On stderr (stdout holds the report alone), before TensorFlow loads.
  assert lines[:2] == [f'TPU preflight of {module}: TensorFlow loads, then '
                       'one step of each mode is built and compiled with XLA '
                       '...', TENSORFLOW_LOADS], lines
  assert 'TPU preflight: NOT TPU-ready' in result.stdout


def test_run_of_a_pipeline_file_says_it_loads_before_tensorflow_does(
    tmp_path):
  (tmp_path / 'p.py').write_text(_NO_TRAINER)
  result = cli_processes.marked(['run', '--pipeline', 'p.py:create_pipeline',
                                 '--output-root', str(tmp_path / 'out')],
                                cwd=str(tmp_path))
  assert result.returncode == 2, result.stderr
  assert 'has no TPUTrainer' in result.stderr
  assert result.stdout.splitlines() == [
      'Loading the pipeline of p.py:create_pipeline and checking its trainer '
      'modules (TensorFlow and TFX load first) ...', TENSORFLOW_LOADS]
  assert _noise(result.stderr) == []


_NO_TRAINER = """
from tfx import v1 as tfx

def create_pipeline():
  example_gen = tfx.components.CsvExampleGen(input_base='/data')
  return tfx.dsl.Pipeline(pipeline_name='no-trainer', pipeline_root='/root',
                          components=[example_gen])
"""


# A file (TensorFlow warns of a deprecated name only from a file) that
# imports TensorFlow, quietly given `quiet`, then writes a line of its own,
# uses a name of tf.compat.v1.estimator.tpu (what the library's model_fn
# wrapper does on import) and logs another deprecation.
_IMPORTS_TENSORFLOW = (
    'import logging, os, sys\n'
    'from tfx_tpu_trainer_cli import quiet_start\n'
    'if sys.argv[1:] == ["quiet"]:\n'
    '  quiet_start.install()\n'
    'import tensorflow as tf\n'
    'os.write(2, b"after the import\\n")\n'
    'spec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec\n'
    'logging.getLogger("tensorflow").warning(\n'
    '    "The name tf.foo is deprecated. Please use tf.bar instead.")\n')


@pytest.fixture(scope='module')
def tensorflow_imports(tmp_path_factory):
  """{'plain': ..., 'quiet': ...}: _IMPORTS_TENSORFLOW's finished runs.

  TF_CPP_MIN_LOG_LEVEL=0: TensorFlow's C++ start-up writes its I lines too.
  """
  work = tmp_path_factory.mktemp('tensorflow_imports')
  program = work / 'imports_tensorflow.py'
  program.write_text(_IMPORTS_TENSORFLOW)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='0')
  return {how: subprocess.run(
      [sys.executable, str(program), *argv], cwd=str(work), env=env,
      capture_output=True, text=True, check=True)
          for how, argv in (('plain', []), ('quiet', ['quiet']))}


def test_tensorflow_s_warning_that_a_name_is_deprecated_for_itself_is_dropped(
    tensorflow_imports):
  # Another deprecation still reaches stderr.
  plain, quiet = tensorflow_imports['plain'], tensorflow_imports['quiet']
  rename = ('The name tf.estimator.tpu.TPUEstimatorSpec is deprecated. Please '
            'use tf.compat.v1.estimator.tpu.TPUEstimatorSpec instead.')
  assert rename in plain.stderr
  assert rename not in quiet.stderr
  assert 'The name tf.foo is deprecated' in quiet.stderr


def test_the_program_ends_without_tearing_down_its_objects(tmp_path):
  # Python's own end would collect and tear down what TensorFlow, TFX and
  # Beam made (seconds after the summary): the program ends once its exit
  # handlers ran and its output is out.
  program = ('import atexit, sys\n'
             'from tfx_tpu_trainer_cli import main\n'
             'class Cycle:\n'
             '  def __init__(self):\n'
             '    self.me = self\n'
             '  def __del__(self):\n'
             '    print("torn down", flush=True)\n'
             'cycle = Cycle()\n'
             'atexit.register(print, "exit handler ran")\n'
             'how = sys.argv.pop(1)\n'
             'code = main.main(sys.argv[1:] if how == "list" else None)\n'
             'print("main returned", code)\n'
             'sys.exit(code)\n')
  (tmp_path / 'p.py').write_text('x = 1\n')
  program_end, returned = [subprocess.run(
      [sys.executable, '-c', program, how, 'run', '--pipeline', 'p.py'],
      cwd=str(tmp_path), capture_output=True, text=True, check=False)
                           for how in ('argv', 'list')]
  # The program itself (no argv given): its status, its exit handlers, no
  # teardown.
  assert program_end.returncode == 2
  assert program_end.stdout == 'exit handler ran\n'
  assert "--pipeline 'p.py' is not FILE:FUNCTION" in program_end.stderr
  # Called with a list (the tests, a caller in Python): it returns.
  assert returned.returncode == 2
  assert returned.stdout.splitlines() == ['main returned 2', 'exit handler ran',
                                          'torn down']


def test_tensorflow_import_keeps_its_other_lines(tensorflow_imports):
  from tfx_tpu_trainer_cli import quiet_start  # pylint: disable=g-import-not-at-top
  # The filter drops the three registration lines only: anything else
  # TensorFlow writes while loading still reaches stderr.
  quiet = tensorflow_imports['quiet']
  assert not quiet_start.TENSORFLOW_NOISE.search(quiet.stderr)
  assert 'after the import' in quiet.stderr
  # TF_CPP_MIN_LOG_LEVEL=0 shows its I lines: they pass the filter.
  assert 'I ' in quiet.stderr or 'cpu_feature_guard' in quiet.stderr


# A pipeline file whose import would load TFX and TensorFlow.
_IMPORTS_TFX = """
from tfx import v1 as tfx

def create_pipeline(data_root, steps=3):
  return tfx.dsl.Pipeline(pipeline_name='p', pipeline_root='/r',
                          components=[])


def make_pipeline():
  return create_pipeline('/data')
"""
_TAXI_COMPILE = ['compile', '--pipeline-root', 'gs://b/r', '--data-root',
                 'gs://b/d']


@pytest.mark.parametrize('args,message', [
    (['compile'], 'the following arguments are required: --pipeline-root, '
     '--data-root'),
    (['compile', '--pipeline', 'p.py'], "--pipeline 'p.py' is not "
     'FILE:FUNCTION'),
    (['run', '--pipeline', 'p.py'], "--pipeline 'p.py' is not FILE:FUNCTION"),
    # Topology lists, pod options, Beam option names: no kfp, TFX or TF.
    (_TAXI_COMPILE + ['--topology', '2x2x3'],
     "topology '2x2x3' is not a multi-host topology of tpu-v4-podslice; "
     'accepted values: 2x2x2, 2x2x4'),
    (['compile', '--pipeline', 'tfx_p.py:make_pipeline', '--accelerator',
      'tpu-v5-lite-podslice', '--topology', '2x3'],
     "topology '2x3' is not a single-host topology of tpu-v5-lite-podslice"),
    (_TAXI_COMPILE + ['--tpu-style', 'tpu-node', '--tpu-cores', '7'],
     "tpu-cores 7 is not a v3 TPU size"),
    (_TAXI_COMPILE + ['--trainer-toleration', 'spot'],
     "trainer-toleration 'spot' has no effect"),
    (_TAXI_COMPILE + ['--beam-arg=--runnr=DirectRunner'],
     "--beam-arg '--runnr=DirectRunner': 'runnr' is not a Beam pipeline "
     'option.'),
    (['run', '--beam-arg=--runnr=DirectRunner'],
     "--beam-arg '--runnr=DirectRunner': 'runnr' is not a Beam pipeline "
     'option.'),
    # The pipeline file: its function, read from its source, unrun.
    (['run', '--pipeline', 'tfx_p.py:create_pipelin'],
     "tfx_p.py defines no function 'create_pipelin' (functions it defines: "
     "['create_pipeline', 'make_pipeline'])."),
    (['compile', '--pipeline', 'tfx_p.py:create_pipeline'],
     "--pipeline: create_pipeline(data_root, steps=3) in tfx_p.py has "
     "required argument(s) ['data_root']"),
    (['run', '--pipeline', 'p.py:create_pipeline'],
     "p.py defines no function 'create_pipeline' (functions it defines: [])."),
])
def test_usage_errors_come_before_tensorflow_and_tfx_load(tmp_path, args,
                                                          message):
  (tmp_path / 'p.py').write_text('x = 1\n')
  (tmp_path / 'tfx_p.py').write_text(_IMPORTS_TFX)
  result = subprocess.run([sys.executable, '-c', _MODULES_AFTER, *args],
                          cwd=str(tmp_path), capture_output=True, text=True,
                          check=False)
  assert result.returncode == 2, result.stderr
  assert message in result.stderr
  assert 'loaded: []' in result.stderr
  assert _noise(result.stderr) == []
  # Nothing written: no log folder, no output.
  assert sorted(os.listdir(tmp_path)) == ['p.py', 'tfx_p.py']


def test_a_beam_job_server_that_does_not_answer_comes_before_tensorflow(
    tmp_path):
  from tests.fixtures import beam_jobs  # pylint: disable=g-import-not-at-top
  port = beam_jobs.free_port()  # Nothing listens on it.
  result = subprocess.run(
      [sys.executable, '-c', _MODULES_AFTER, 'run',
       '--beam-arg=--runner=PortableRunner',
       f'--beam-arg=--job_endpoint=localhost:{port}',
       '--beam-arg=--environment_type=LOOPBACK'], cwd=str(tmp_path),
      capture_output=True, text=True, check=False)
  assert result.returncode == 2, result.stderr
  assert (f'tfx-tpu-trainer run: error: --beam-arg: no Beam job server '
          f'answers at localhost:{port}') in result.stderr
  assert 'local_job_service_main --port' in result.stderr
  assert 'loaded: []' in result.stderr
  assert os.listdir(tmp_path) == []


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
  result = cli_processes.cli(
      ['compile', '--pipeline',
       f'{penguin / "my_pipeline" / "penguin_pipeline.py"}:create_pipeline',
       '--output-dir', str(out), '--no-use-tpu'], cwd=str(penguin), env=env)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].startswith('Compiling the pipeline of ')
  assert lines[1] == f'Wrote {out / "penguin-tpu.tar.gz"} (Argo workflow ' \
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


_COMPILES_FROM_PYTHON = '''
import sys
from tfx_tpu_trainer.kubeflow import compiler
sys.path.insert(0, sys.argv[1])
import penguin_pipeline
result = compiler.compile_pipeline(penguin_pipeline.create_pipeline(),
                                   sys.argv[2], compiler.KubeflowOptions())
print('compiled:', result.user_code)
'''


def test_the_python_compile_keeps_tfx_packaging_off_the_terminal(penguin):
  env = dict(os.environ, PENGUIN_DATA_ROOT=str(penguin / 'data'),
             PENGUIN_PIPELINE_ROOT=str(penguin / 'python_root'))
  output = penguin / 'python_out' / 'penguin.tar.gz'
  result = subprocess.run(
      [sys.executable, '-c', _COMPILES_FROM_PYTHON,
       str(penguin / 'my_pipeline'), str(output)], cwd=str(penguin),
      env=env, capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  # TFX packaged the module file (a wheel under the pipeline root) ...
  assert result.stdout.startswith("compiled: ('Transform: penguin_tpu_module@")
  assert list((penguin / 'python_root' / '_wheels').glob('*.whl'))
  # ... and its setuptools output did not reach the caller's terminal.
  output_lines = (result.stdout + result.stderr).splitlines()
  assert not [line for line in output_lines
              if 'bdist_wheel' in line or line.startswith('copying ')]
  assert output.exists()


def test_run_of_a_user_pipeline_names_its_root_as_where_outputs_go(
    penguin_run_without_data):
  # No data: the run fails at its first component, after the heading.
  result = penguin_run_without_data
  folder = result.folder
  output_root = os.path.join(folder, 'out')
  assert result.returncode == 1, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0].startswith('Loading the pipeline of ')
  assert lines[1].startswith("Running pipeline 'penguin-tpu' from ")
  run_root = os.path.join(folder, 'run_root')
  assert lines[2] == f'  outputs under {run_root} (its pipeline root)'
  assert lines[3].startswith(f'  full log: {os.path.join(output_root, "logs")}')
  assert lines[4] == ('  starting the local runner (it packages the module '
                      'files first) ...')
  assert not any(line.startswith(f'  outputs under {output_root}')
                 for line in lines)
