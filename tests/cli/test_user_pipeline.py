"""`compile|run --pipeline FILE:FUNCTION`: a user's pipeline file.

The bad-input cases exit 2 with a message naming the file and the function
and write nothing; the guide's example pipeline (examples/penguin_tpu,
copied outside the repository) compiles for KFP v1 and v2 with the TPU on
its TPUTrainer only, and runs locally to a pushed model (slow).
"""

import json
import os
import re
import shutil
import tarfile
import textwrap

import pytest
import yaml

from tests.fixtures import beam_jobs
from tests.fixtures import cli_exit
from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import main as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLE_DIR = os.path.join(REPO, 'examples', 'penguin_tpu')
IMAGE = 'gcr.io/test-project/tfx-tpu-trainer:1'
TRAINER_IMAGE = 'gcr.io/test-project/tfx-tpu-trainer-tpu:1'
TPU_LIMIT = {'google.com/tpu': '8'}
V5E = 'tpu-v5-lite-podslice'
# The TPU runtime's environment on v5e (PJRT, tpu_runtimes.py).
V5E_RUNTIME_ENV = {'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'true',
                   'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': '/lib/libtpu.so',
                   'TFX_TPU_TRAINER_TPU_RUNTIME': 'pjrt',
                   'TFX_TPU_TRAINER_ACCELERATOR': V5E}

_NO_TRAINER = '''
from tfx import v1 as tfx

def create_pipeline():
  example_gen = tfx.components.CsvExampleGen(input_base='/data')
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs['examples'])
  return tfx.dsl.Pipeline(pipeline_name='no-trainer', pipeline_root='/root',
                          components=[example_gen, statistics_gen])
'''


def _write(directory, name, text):
  path = os.path.join(directory, name)
  with open(path, 'w') as f:
    f.write(textwrap.dedent(text))
  return path


@pytest.mark.parametrize('source,function,message', [
    (None, 'create_pipeline',
     "--pipeline: the pipeline file '{path}' does not exist or is not a file."),
    ('def other():\n  return 1\n', 'create_pipeline',
     "--pipeline: {path} defines no function 'create_pipeline' (functions it "
     "defines: ['other'])."),
    ('create_pipeline = 3\n', 'create_pipeline',
     '--pipeline: create_pipeline in p.py is a int, not a function.'),
    ('def create_pipeline(root, steps=3):\n  pass\n', 'create_pipeline',
     "--pipeline: create_pipeline(root, steps=3) in p.py has required "
     "argument(s) ['root']; the function must take none"),
    ('def create_pipeline():\n  raise ValueError("no data root")\n',
     'create_pipeline',
     '--pipeline: create_pipeline() in p.py raised ValueError: no data root'),
    ('def create_pipeline():\n  return {"components": []}\n',
     'create_pipeline',
     '--pipeline: create_pipeline() in p.py returned dict, not a '
     'tfx.dsl.Pipeline'),
    ('import no_such_module_xyz\n\ndef create_pipeline():\n  pass\n',
     'create_pipeline',
     "--pipeline: {path} failed to import: ModuleNotFoundError: No module "
     "named 'no_such_module_xyz'"),
    (_NO_TRAINER, 'create_pipeline',
     "--pipeline: create_pipeline() in p.py: Pipeline 'no-trainer' has no "
     "TPUTrainer (components: ['CsvExampleGen', 'StatisticsGen']), so no "
     'step would carry the TPU scheduling.'),
])
@pytest.mark.parametrize('command', ['compile', 'run'])
def test_bad_pipeline_file_exits_2_naming_file_and_function(
    tmp_path, capsys, command, source, function, message):
  path = str(tmp_path / 'p.py')
  if source is not None:
    _write(tmp_path, 'p.py', source)
  output = tmp_path / 'out'
  extra = (['--output-root', str(output)] if command == 'run' else
           ['--output-dir', str(output)])
  assert cli_exit.exit_code([command, '--pipeline', f'{path}:{function}'] +
                    extra) == 2
  err = capsys.readouterr().err
  assert f'tfx-tpu-trainer {command}: error: ' + message.format(
      path=path) in err, err
  assert not output.exists()


def test_pipeline_spec_without_a_function_name(tmp_path, capsys):
  assert cli_exit.exit_code(['compile', '--pipeline', str(tmp_path / 'p.py'),
                     '--output-dir', str(tmp_path / 'out')]) == 2
  assert (f"--pipeline '{tmp_path / 'p.py'}' is not FILE:FUNCTION (e.g. "
          'my_pipeline.py:create_pipeline)' in capsys.readouterr().err)


@pytest.mark.parametrize('command,argv,flags', [
    ('compile', ['--data-root', 'gs://b/d', '--train-steps', '5'],
     '--data-root, --train-steps apply'),
    ('compile', ['--pipeline-root', 'gs://b/r'], '--pipeline-root applies'),
    ('run', ['--module-file', 'm.py'], '--module-file applies'),
    ('run', ['--min-accuracy', '0.7', '--no-use-tpu'],
     '--min-accuracy, --use-tpu/--no-use-tpu apply'),
])
def test_bundled_pipeline_options_are_refused_with_pipeline(
    tmp_path, capsys, command, argv, flags):
  path = _write(tmp_path, 'p.py', _NO_TRAINER)
  assert cli_exit.exit_code([command, '--pipeline', f'{path}:create_pipeline'] +
                    argv) == 2
  assert (f'error: {flags} to the bundled taxi pipeline only; with '
          '--pipeline' in capsys.readouterr().err)


def test_module_files_in_image_needs_pipeline(tmp_path, capsys):
  assert cli_exit.exit_code(['compile', '--pipeline-root', 'gs://b/r', '--data-root',
                     'gs://b/d', '--module-files-in-image', '--output-dir',
                     str(tmp_path)]) == 2
  assert '--module-files-in-image needs --pipeline' in capsys.readouterr().err


# --- Option parsing: no prefix matching, "did you mean" --------------------


@pytest.mark.parametrize('argv,usage,message', [
    (['run', '--train-step', '5'], 'usage: tfx-tpu-trainer run ',
     'tfx-tpu-trainer run: error: unrecognized arguments: --train-step '
     '(did you mean --train-steps?)'),
    (['compile', '--pipelin=x.py:f'], 'usage: tfx-tpu-trainer compile ',
     'tfx-tpu-trainer compile: error: unrecognized arguments: '
     '--pipelin=x.py:f (did you mean --pipeline?)'),
    (['run', '--pipe', 'x.py:f'], 'usage: tfx-tpu-trainer run ',
     'unrecognized arguments: --pipe (did you mean --pipeline?)'),
    (['preflight', '--module', 'm.py'], 'usage: tfx-tpu-trainer preflight ',
     'unrecognized arguments: --module (did you mean --module-file?)'),
    (['compile', '--pipeline-ro', 'gs://b'], 'usage: tfx-tpu-trainer compile ',
     'unrecognized arguments: --pipeline-ro (did you mean --pipeline-root?)'),
    (['tpu-check', '--time', '5'], 'usage: tfx-tpu-trainer tpu-check ',
     'unrecognized arguments: --time (did you mean --timeout?)'),
    (['compile', '--tpu-run', 'se'], 'usage: tfx-tpu-trainer compile ',
     'unrecognized arguments: --tpu-run (did you mean --tpu-runtime?)'),
    (['rnu'], 'usage: tfx-tpu-trainer ',
     "invalid choice: 'rnu' (choose from 'run', 'compile', 'preflight', "
     "'tpu-check') (did you mean run?)"),
])
def test_options_are_never_matched_by_prefix(capsys, argv, usage, message):
  assert cli_exit.exit_code(argv) == 2
  err = capsys.readouterr().err
  assert err.startswith(usage), err
  assert message in err, err


@pytest.mark.parametrize('argv,message', [
    # A custom_config key is not an option: where it is set.
    (['run', '--input-cache', 'memory'],
     "unrecognized arguments: --input-cache (input_cache is a key of "
     "TPUTrainer's custom_config, not an option: set it in your pipeline, "
     "TPUTrainer(custom_config={'input_cache': ...}), and run or compile "
     'that with --pipeline FILE:FUNCTION; '
     'docs/reference/custom_config.md)'),
    (['compile', '--iterations-per-loop=50'],
     "(iterations_per_loop is a key of TPUTrainer's custom_config"),
    # A value that starts with '-' after a space: it needs '='.
    (['run', '--beam-arg', '--runner=PortableRunner'],
     "argument --beam-arg: expected one argument, got the option-like "
     "'--runner=PortableRunner'; a value that starts with \"-\" goes after "
     '"=": write --beam-arg=--runner=PortableRunner.'),
    (['compile', '--beam-arg', '--runner=DataflowRunner'],
     'write --beam-arg=--runner=DataflowRunner.'),
])
def test_a_mistaken_option_is_answered_with_what_is_meant(capsys, argv,
                                                          message):
  assert cli_exit.exit_code(argv) == 2
  err = capsys.readouterr().err
  assert message in err, err
  assert 'did you mean' not in err


@pytest.mark.parametrize('command', ['run', 'compile', 'preflight',
                                     'tpu-check'])
def test_help_never_breaks_an_example_at_a_hyphen(capsys, command):
  assert cli_exit.exit_code([command, '--help']) == 0
  text = capsys.readouterr().out
  for line in text.splitlines():
    assert not line.rstrip().endswith(('-', '=')), line
  if command == 'run':
    assert ' --beam-arg=--runner=PortableRunner ' in text.replace('\n', ' ')
    assert '--beam-arg=--job_endpoint=localhost:8099' in text


@pytest.mark.parametrize('source', [
    'from somewhere import *\n',
    'globals()["create_pipeline"] = lambda: None\n',
    'import sys\nsetattr(sys.modules[__name__], "create_pipeline", min)\n',
    'def __getattr__(name):\n  return min\n',
    'def make():\n  global create_pipeline\n  create_pipeline = min\n',
    'if True:\n  def create_pipeline():\n    pass\n',
    'try:\n  from x import create_pipeline\nexcept ImportError:\n'
    '  create_pipeline = None\n',
    'def create_pipeline(*args, root=None, **kwargs):\n  pass\n',
    'import functools\n@functools.lru_cache\ndef create_pipeline(root):\n'
    '  pass\n',
    'def broken(:\n',  # Does not parse: the import says so.
])
def test_the_source_check_leaves_what_it_cannot_read_to_the_import(
    tmp_path, source):
  from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'p.py'
  path.write_text(source)
  assert user_pipeline.check_spec(f'{path}:create_pipeline') == (
      str(path), 'create_pipeline')


@pytest.mark.parametrize('source,message', [
    ('import tensorflow\ndef other():\n  pass\n',
     "defines no function 'create_pipeline' (functions it defines: "
     "['other'])."),
    ('def create_pipeline(*, root):\n  pass\n',
     "create_pipeline(*, root) in p.py has required argument(s) ['root']"),
    ('def create_pipeline(a, /, b=1):\n  pass\n',
     "create_pipeline(a, /, b=1) in p.py has required argument(s) ['a']"),
    ('class create_pipelines:\n  def create_pipeline(self):\n    pass\n',
     "defines no function 'create_pipeline' (functions it defines: [])."),
])
def test_the_source_check_refuses_what_the_source_shows(tmp_path, source,
                                                         message):
  from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'p.py'
  path.write_text(source)
  with pytest.raises(common.UsageError) as error:
    user_pipeline.check_spec(f'{path}:create_pipeline')
  assert message in str(error.value)


def test_every_parser_refuses_abbreviations():
  parser = cli.build_parser()
  subparsers = [a for a in parser._actions  # pylint: disable=protected-access
                if a.__class__.__name__ == '_SubParsersAction'][0]
  assert not parser.allow_abbrev
  assert all(not p.allow_abbrev for p in subparsers.choices.values())


def test_version(capsys):
  from tfx_tpu_trainer import version  # pylint: disable=g-import-not-at-top
  assert cli_exit.exit_code(['--version']) == 0
  assert capsys.readouterr().out == f'tfx-tpu-trainer {version.__version__}\n'


# --- The example pipeline, outside the repository --------------------------


@pytest.fixture(scope='module')
def user_pipeline(tmp_path_factory):
  """examples/penguin_tpu copied outside the repo, with penguin data."""
  work = tmp_path_factory.mktemp('user_pipeline')
  shutil.copytree(EXAMPLE_DIR, work / 'my_pipeline')
  serving_data.write_penguins(str(work / 'data'), rows=300)
  return work


@pytest.fixture
def penguin_env(user_pipeline, monkeypatch):
  monkeypatch.setenv('PENGUIN_DATA_ROOT', str(user_pipeline / 'data'))
  monkeypatch.setenv('PENGUIN_PIPELINE_ROOT', str(user_pipeline / 'root'))
  monkeypatch.setenv('PENGUIN_TRAIN_STEPS', '300')
  return user_pipeline


def _spec(work):
  return f'{work / "my_pipeline" / "penguin_pipeline.py"}:create_pipeline'


def _tfx_parameters(step):
  args = step['container']['args']
  ir = json.loads(args[args.index('--tfx_ir') + 1])
  return ir['nodes'][0]['pipelineNode']['parameters']['parameters']


def _runtime_env(container):
  from tfx_tpu_trainer.tpu import runtimes  # pylint: disable=g-import-not-at-top
  return {e['name']: e['value'] for e in container.get('env') or []
          if e['name'] in runtimes.STEP_ENV_NAMES}


def test_user_pipeline_compiles_for_kfp_v1_with_tpu_on_the_trainer_only(
    penguin_env, capsys):
  out = penguin_env / 'v1'
  assert cli.main(['compile', '--pipeline', _spec(penguin_env),
                   '--output-dir', str(out), '--image', IMAGE,
                   '--trainer-image', TRAINER_IMAGE, '--accelerator', V5E,
                   '--tpu-check']) == 0
  captured = capsys.readouterr()
  stdout = captured.out
  assert f'Wrote {out / "penguin-tpu.tar.gz"} (Argo workflow for KFP v1).' in (
      stdout)
  assert 'Trainer step:   TPUTrainer' in stdout
  # The runtime env, read back from the file; PJRT's report as a warning.
  assert ('TPU runtime env ' + ', '.join(
      f'{k}={v}' for k, v in V5E_RUNTIME_ENV.items())) in stdout
  assert '  TPU runtime:    pjrt (TPU v5e, Dockerfile target tpu-pjrt;' in (
      stdout)
  assert '  TPU check:      step TPUCheck first' in stdout
  assert 'issues/90807' in captured.err
  with tarfile.open(out / 'penguin-tpu.tar.gz') as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  steps = {t['name']: t for t in workflow['spec']['templates']
           if 'container' in t}
  assert sorted(steps) == ['csvexamplegen', 'evaluator', 'pusher', 'schemagen',
                           'statisticsgen', 'tpucheck', 'tputrainer',
                           'transform']
  # The check runs first: every other step waits for it.
  (dag,) = [t['dag'] for t in workflow['spec']['templates'] if 'dag' in t]
  for task in dag['tasks']:
    if task['name'] != 'tpucheck':
      assert 'tpucheck' in task['dependencies'], task['name']
  for name, step in steps.items():
    if name in ('tputrainer', 'tpucheck'):
      # Both scheduled alike: TPU, node selectors, image, runtime env.
      assert step['container']['resources']['limits'] == TPU_LIMIT, name
      assert step['nodeSelector'] == {
          'cloud.google.com/gke-tpu-accelerator': V5E,
          'cloud.google.com/gke-tpu-topology': '2x4'}, name
      assert step['container']['image'] == TRAINER_IMAGE, name
      assert _runtime_env(step['container']) == V5E_RUNTIME_ENV, name
    else:
      assert not _runtime_env(step['container']), name
    if name == 'tpucheck':
      continue
    if name == 'tputrainer':
      assert step['container']['resources']['limits'] == TPU_LIMIT
      assert step['nodeSelector'] == {
          'cloud.google.com/gke-tpu-accelerator': 'tpu-v5-lite-podslice',
          'cloud.google.com/gke-tpu-topology': '2x4'}
      assert step['container']['image'] == TRAINER_IMAGE
      parameters = _tfx_parameters(step)
      custom_config = json.loads(parameters['custom_config']['fieldValue'][
          'stringValue'])
      assert {k: v for k, v in custom_config.items()
              if not k.startswith('_')} == {
                  'train_batch_size': 32, 'eval_batch_size': 32,
                  'use_tpu': True, 'tpu': {'name': 'local'}}
    else:
      assert 'resources' not in step['container'], name
      assert 'nodeSelector' not in step and 'tolerations' not in step, name
      assert step['container']['image'] == IMAGE, name
  # TFX packaged the module file (outside the repo) under the pipeline root.
  module_path = _tfx_parameters(steps['tputrainer'])['module_path'][
      'fieldValue']['stringValue']
  name, wheel = module_path.split('@')
  assert name.startswith('penguin_tpu_module') and os.path.isfile(wheel)
  assert wheel.startswith(str(penguin_env / 'root' / '_wheels'))
  assert 'TPUTrainer: penguin_tpu_module' in stdout


def test_user_pipeline_compiles_for_kfp_v2_with_tpu_on_the_trainer_only(
    penguin_env, capsys):
  out = penguin_env / 'v2'
  wheels = penguin_env / 'root' / '_wheels'
  before = sorted(os.listdir(wheels)) if wheels.exists() else []
  # A Vertex AI job cannot carry the TPU: the KFP v2 spec alone.
  assert cli.main(['compile', '--pipeline', _spec(penguin_env), '--runner',
                   'kubeflow_v2', '--output-dir', str(out), '--image', IMAGE,
                   '--module-files-in-image', '--accelerator', V5E,
                   '--no-vertex-job', '--tpu-check']) == 0
  stdout = capsys.readouterr().out
  assert 'as given, inside the image' in stdout
  assert 'TPU runtime env NEXT_PLUGGABLE_DEVICE_USE_C_API=true' in stdout
  assert sorted(os.listdir(out)) == ['penguin-tpu.kfp-v2-pipeline.yaml']
  with open(out / 'penguin-tpu.kfp-v2-pipeline.yaml') as f:
    spec, platform = yaml.safe_load_all(f)
  assert spec['defaultPipelineRoot'] == str(penguin_env / 'root')
  executors = spec['deploymentSpec']['executors']
  tasks = spec['root']['dag']['tasks']
  tpu_executors = [spec['components'][tasks[task]['componentRef']['name']][
      'executorLabel'] for task in ('TPUTrainer', 'TPUCheck')]
  trainer = tpu_executors[0]
  for label, executor in executors.items():
    # Each step types the inputs a KFP v2 backend hands over untyped; the
    # trainer's entrypoint also reads back its system.Metrics output.
    assert executor['container']['command'] == ['python', '-m', (
        'tfx_tpu_trainer.kubeflow.v2_metrics' if label == trainer
        else 'tfx_tpu_trainer.kubeflow.v2_step')], label
    resources = executor['container'].get('resources')
    if label in tpu_executors:
      assert resources['accelerator']['resourceType'] == 'google.com/tpu'
      assert resources['accelerator']['resourceCount'] == '8'
      assert _runtime_env(executor['container']) == V5E_RUNTIME_ENV, label
    else:
      assert resources is None, label
      assert not _runtime_env(executor['container']), label
  assert sorted(platform['platforms']['kubernetes']['deploymentSpec'][
      'executors']) == sorted(tpu_executors)
  # The check runs first.
  for task_name, task in tasks.items():
    if task_name != 'TPUCheck':
      assert 'TPUCheck' in task.get('dependentTasks', []), task_name
  # --module-files-in-image: the path as given, no wheel written.
  assert (sorted(os.listdir(wheels)) if wheels.exists() else []) == before
  module = penguin_env / 'my_pipeline' / 'penguin_tpu_module.py'
  assert str(module) in json.dumps(spec)


def test_user_pipeline_vertex_job_with_a_tpu_is_refused(penguin_env, capsys):
  out = penguin_env / 'vertex_tpu'
  assert cli_exit.exit_code(['compile', '--pipeline', _spec(penguin_env), '--runner',
                     'kubeflow_v2', '--output-dir', str(out), '--image',
                     IMAGE, '--module-files-in-image', '--accelerator',
                     V5E]) == 2
  assert capsys.readouterr().err == (
      'tfx-tpu-trainer compile: error: the Vertex AI job cannot schedule the '
      f'trainer on this TPU: Vertex AI runs {V5E} 2x4 as machine type '
      'ct5lp-hightpu-8t (TPU_V5_LITEPOD) with tpuTopology 2x4, which a '
      'pipeline step cannot carry (its resources hold an accelerator type '
      'and count only; steps take TPU_V2/TPU_V3). Pass --no-vertex-job to '
      'write the KFP v2 spec alone (for a KFP v2 backend on GKE), or '
      '--no-use-tpu for a CPU Vertex job; see docs/guide/kubeflow.md, '
      '"Vertex AI and TPUs".\n')
  assert not out.exists()


def test_user_pipeline_cpu_vertex_job(penguin_env, capsys):
  out = penguin_env / 'vertex_cpu'
  assert cli.main(['compile', '--pipeline', _spec(penguin_env), '--runner',
                   'kubeflow_v2', '--output-dir', str(out), '--image', IMAGE,
                   '--module-files-in-image', '--no-use-tpu',
                   '--trainer-cpu', '4']) == 0
  assert 'no TPU' in capsys.readouterr().out
  assert sorted(os.listdir(out)) == ['penguin-tpu.kfp-v2-pipeline.yaml',
                                     'penguin-tpu.vertex-pipeline-job.json']
  with open(out / 'penguin-tpu.vertex-pipeline-job.json') as f:
    job = json.load(f)
  spec = job['pipelineSpec']
  trainer_executor = spec['components'][spec['root']['dag']['tasks'][
      'TPUTrainer']['componentRef']['name']]['executorLabel']
  for label, executor in spec['deploymentSpec']['executors'].items():
    resources = executor['container'].get('resources')
    if label == trainer_executor:
      assert resources == {'cpuLimit': 4.0}
    else:
      assert resources is None, label
    assert not _runtime_env(executor['container']), label
  module = penguin_env / 'my_pipeline' / 'penguin_tpu_module.py'
  assert str(module) in json.dumps(spec)


def test_user_pipeline_name_must_suit_kfp_v2(tmp_path, capsys):
  source = _NO_TRAINER.replace("'no-trainer'", "'My_Pipeline'")
  path = _write(tmp_path, 'p.py', source.replace(
      'components=[example_gen, statistics_gen]',
      'components=[example_gen, statistics_gen, _trainer(example_gen)]') +
                textwrap.dedent('''
      def _trainer(example_gen):
        from tfx_tpu_trainer import TPUTrainer
        return TPUTrainer(module_file='/m.py',
                          examples=example_gen.outputs['examples'],
                          train_args=tfx.proto.TrainArgs(num_steps=1),
                          eval_args=tfx.proto.EvalArgs(num_steps=1))
      '''))
  assert cli_exit.exit_code(['compile', '--pipeline', f'{path}:create_pipeline',
                     '--runner', 'kubeflow_v2', '--module-files-in-image',
                     '--no-vertex-job', '--output-dir',
                     str(tmp_path / 'out')]) == 2
  assert ("--pipeline: the pipeline name 'My_Pipeline' is not accepted by "
          '--runner kubeflow_v2' in capsys.readouterr().err)
  assert not (tmp_path / 'out').exists()


@pytest.mark.slow
@pytest.mark.heavy
def test_run_pipeline_runs_the_user_pipeline_to_a_pushed_model(
    penguin_env, capfd):
  output_root = penguin_env / 'run_out'
  assert cli.main(['run', '--pipeline', _spec(penguin_env), '--output-root',
                   str(output_root)]) == 0
  out = capfd.readouterr().out  # Progress lines go to file descriptor 1.
  assert "Running pipeline 'penguin-tpu' from" in out
  assert '[5/7] TPUTrainer done in' in out
  # The blessing names the value the Evaluator metrics line shows (TFMA's
  # name of Keras' SparseCategoricalAccuracy).
  accuracy = re.search(r'Evaluator metrics: .*\bsparse_categorical_accuracy='
                       r'([0-9.]+)', out).group(1)
  assert ('Blessed:                yes (sparse_categorical_accuracy '
          f'{accuracy} (needs >= 0.6))') in out, out
  pushed = [line.split()[-1] for line in out.splitlines()
            if line.startswith('  Pushed model:')][0]
  assert pushed.startswith(str(penguin_env / 'root' / 'serving_model'))
  assert os.path.isfile(os.path.join(pushed, 'saved_model.pb'))
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in out
  # The command a pasted line finds: the full path off PATH.
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  assert (f'TPU preflight:          {run.command_name()} preflight '
          '--module-file ') in out
  # No metadata config in the pipeline: SQLite under --output-root.
  assert (output_root / 'metadata' / 'penguin-tpu' / 'metadata.db').exists()


def test_the_guide_shows_the_example_pipeline_as_it_is():
  with open(os.path.join(REPO, 'docs', 'guide', 'your_pipeline.md')) as f:
    guide = f.read()
  with open(os.path.join(EXAMPLE_DIR, 'penguin_pipeline.py')) as f:
    example = f.read()
  assert f'```python\n{example}```\n' in guide


def test_run_beam_args_on_a_user_pipeline_are_checked_up_front(
    penguin_env, capsys):
  root = penguin_env / 'root'  # Other tests of the module compile into it.
  before = sorted(str(p) for p in root.rglob('*')) if root.exists() else None
  services = penguin_env / 'services'
  services.mkdir(exist_ok=True)
  # A job server that answers (run asks it first, before loading the file).
  with beam_jobs.job_server(str(services)) as job_endpoint:
    try:
      code = cli.main([
          'run', '--pipeline', _spec(penguin_env), '--output-root',
          str(penguin_env / 'out'), '--beam-arg=--runner=FlinkRunner',
          f'--beam-arg=--job_endpoint={job_endpoint}',
          '--beam-arg=--environment_type=DOCKER'])
    except SystemExit as e:
      code = e.code
  assert code == 2
  err = capsys.readouterr().err
  # Checked on each Beam component's args, against the pipeline's own root.
  assert ('--environment_type=DOCKER starts the workers where they cannot '
          'see this run\'s files under ' + str(root)) in err
  after = sorted(str(p) for p in root.rglob('*')) if root.exists() else None
  assert after == before  # Nothing written.
