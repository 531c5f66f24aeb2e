"""The README's commands and figures, checked against what runs.

Its commands run in a fresh shell (no PATH but the system's, no variables
of this one) after the line the README gives to put `tfx-tpu-trainer` on
PATH; every `tfx-tpu-trainer` command it and the guides show parses; its
sample summary agrees with the defaults and with itself; the FROM lines of
the docs name images their build commands make; its environment size is the
environment's; the page its screenshot was rendered from shows the defaults
of every key, with no path of the machine it ran on.
"""

import contextlib
import dataclasses
import html
import math
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer_cli import main as cli
from tfx_tpu_trainer_cli import pipeline_choice
from tfx_tpu_trainer_cli import run as run_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, '.venv')
with open(os.path.join(REPO, 'README.md')) as _f:
  README = _f.read()
# The README and every page of the guide and reference.
DOCS = ['README.md'] + sorted(
    os.path.relpath(os.path.join(d, f), REPO)
    for d, _, files in os.walk(os.path.join(REPO, 'docs')) for f in files
    if f.endswith('.md') and f != 'architecture.md')
# A fresh login's environment: the system's PATH and a HOME, nothing else.
FRESH_ENV = {'HOME': os.environ.get('HOME', '/root'),
             'PATH': '/usr/local/bin:/usr/bin:/bin', 'LANG': 'C.UTF-8'}
DEFAULT_TRAIN_STEPS = pipeline_choice.STEP_OPTIONS['--train-steps'][1]
DEFAULT_BATCH_SIZE = pipeline_choice.STEP_OPTIONS['--train-batch-size'][1]


def _sh_blocks(text=README):
  return re.findall(r'```sh\n(.*?)```', text, re.S)


def _doc(relative):
  with open(os.path.join(REPO, relative)) as f:
    return f.read()


def _commands(block):
  """The block's commands: continuation lines joined, comments dropped."""
  joined = re.sub(r'\\\n\s*', ' ', block)
  for line in joined.splitlines():
    line = line.split(' #')[0].strip()
    if line and not line.startswith('#'):
      yield line


def _fresh_shell(script, cwd):
  return subprocess.run(
      ['bash', '--noprofile', '--norc', '-e', '-c', script], cwd=cwd,
      env=FRESH_ENV, capture_output=True, text=True, check=False)


def _activation_block():
  blocks = [b for b in _sh_blocks() if 'activate' in b]
  assert blocks, ('README.md never says how tfx-tpu-trainer gets on PATH: '
                  'no ```sh block with .venv/bin/activate')
  return blocks[0]


@pytest.mark.skipif(not os.path.isdir(VENV), reason='no .venv')
def test_readme_puts_the_command_on_path_in_a_fresh_shell():
  result = _fresh_shell(_activation_block(), cwd=REPO)
  assert result.returncode == 0, result.stderr
  from tfx_tpu_trainer import version  # pylint: disable=g-import-not-at-top
  assert f'tfx-tpu-trainer {version.__version__}' in result.stdout
  # Without it, a fresh shell has no such command.
  bare = _fresh_shell('command -v tfx-tpu-trainer', cwd=REPO)
  assert bare.returncode != 0


@pytest.mark.skipif(not os.path.isdir(VENV), reason='no .venv')
def test_readme_kfp_v1_compile_runs_in_a_fresh_shell(tmp_path):
  (block,) = [b for b in _sh_blocks() if '# KFP v1: an Argo workflow' in b]
  (compile_line,) = [c for c in _commands(block)
                     if c.startswith('tfx-tpu-trainer compile') and
                     '...' not in c]
  activate = next(c for c in _commands(_activation_block())
                  if 'activate' in c)
  result = _fresh_shell(
      f'cd {shlex.quote(REPO)} && {activate} && cd {shlex.quote(str(tmp_path))}'
      f' && {compile_line}', cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines()[1] == (
      f'Wrote {tmp_path / "taxi_tpu.tar.gz"} (Argo workflow for KFP v1).')
  assert result.stderr == ''


def _parsed_commands(text):
  """How many `tfx-tpu-trainer` commands of the text's sh blocks parse."""
  parser = cli.build_parser()
  checked = 0
  for block in _sh_blocks(text):
    for command in _commands(block):
      words = shlex.split(command)
      while words and re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', words[0]):
        words = words[1:]  # VARIABLE=value before the command.
      if not words or words[0] != 'tfx-tpu-trainer' or '...' in command:
        continue
      try:
        _, extras = parser.parse_known_args(words[1:])
      except SystemExit as e:  # --version and --help exit 0.
        if e.code:
          pytest.fail(f'Documented command does not parse: {command}')
        extras = []
      assert not extras, (command, extras)
      checked += 1
  return checked


def test_every_readme_command_parses():
  assert _parsed_commands(README) >= 4


@pytest.mark.parametrize('doc', DOCS[1:])
def test_every_command_of_the_guides_parses(doc):
  _parsed_commands(_doc(doc))


def test_the_guides_show_commands():
  assert sum(_parsed_commands(_doc(doc)) for doc in DOCS[1:]) >= 8


def _sample_summary():
  match = re.search(r'and a summary:\n\n```\n(.*?)```', README, re.S)
  assert match, 'README.md has no sample summary'
  return match.group(1)


def test_sample_summary_agrees_with_the_defaults_and_itself():
  sample = _sample_summary()
  bars = re.findall(
      r'^Training: .*?\| (\d+)/(\d+) \[.*?([\d,.]+) steps/s \(([\d,]+) '
      r'examples/s\)', sample, re.M)
  assert bars, 'no progress bar with steps/s and examples/s in the sample'
  for done, total, steps_per_sec, examples_per_sec in bars:
    assert int(total) == DEFAULT_TRAIN_STEPS and int(done) <= int(total)
    # One rate: examples/s is steps/s at the default batch size (the
    # steps/s shown rounded to a whole number).
    steps = float(steps_per_sec.replace(',', ''))
    examples = int(examples_per_sec.replace(',', ''))
    assert abs(examples - steps * DEFAULT_BATCH_SIZE) <= DEFAULT_BATCH_SIZE
  (global_step,) = re.findall(r'global_step=(\d+)', sample)
  assert int(global_step) == DEFAULT_TRAIN_STEPS
  every = math.ceil(DEFAULT_TRAIN_STEPS / run_command.DEFAULT_EVALUATIONS)
  for step in re.findall(r'^Evaluation at step (\d+):', sample, re.M):
    assert int(step) % every == 0
  (seconds,) = re.findall(r'Pipeline finished in (\d+)s\.', sample)
  (about,) = re.findall(r'then `make run`\s+takes about (\d+) s', README)
  assert 2 / 3 <= int(seconds) / int(about) <= 3 / 2, (seconds, about)


def test_from_lines_name_images_the_docs_build():
  built = set()
  for doc in DOCS:
    for block in _sh_blocks(_doc(doc)):
      for command in _commands(block):
        if command.startswith('make image') or command.startswith(
            'make tpu-image'):
          built.update(re.findall(r'\b[A-Z_]*IMAGE=(\S+)', command))
  assert built
  froms = [(doc, image) for doc in DOCS
           for image in re.findall(r'(?:^|`)FROM (\S+?)`?(?:\s|$)', _doc(doc),
                                   re.M)]
  assert froms
  for doc, image in froms:
    image = image.rstrip('`').replace('...', 'gcr.io/MY_PROJECT/')
    assert image in built, f'{doc}: FROM {image}: no doc command builds it'


@pytest.mark.skipif(not os.path.isdir(VENV), reason='no .venv')
def test_environment_size_is_the_environments():
  (figure,) = re.findall(r'([\d.]+) GB of disk for the environment', README)
  result = subprocess.run(['du', '-sk', VENV], capture_output=True,
                          text=True, check=True)
  gigabytes = int(result.stdout.split()[0]) / 1024**2  # As du -sh says.
  assert abs(float(figure) - gigabytes) / gigabytes < 0.05, gigabytes


def _page_table(page, heading):
  section = page.split(f'<h2>{heading}</h2>')[1].split('<h2>')[0]
  return {html.unescape(name): html.unescape(value) for name, value in
          re.findall(r'<tr><th>(.*?)</th><td>(.*?)</td></tr>', section)}


def test_the_screenshots_page_shows_the_defaults_and_the_sample():
  assert os.path.isfile(os.path.join(REPO, 'docs', 'training_report.png'))
  with open(os.path.join(REPO, 'docs', 'training_report.html')) as f:
    page = f.read()
  config = _page_table(page, 'Config')
  defaults = config_lib.TrainerConfig.from_custom_config(
      {'train_batch_size': DEFAULT_BATCH_SIZE,
       'eval_batch_size': DEFAULT_BATCH_SIZE})
  assert config['custom_config.host_iterations_per_loop'] == str(
      defaults.host_iterations_per_loop)
  assert config['custom_config.input_cache'] == str(defaults.input_cache)
  assert config['custom_config.eval_every_steps'] == str(math.ceil(
      DEFAULT_TRAIN_STEPS / run_command.DEFAULT_EVALUATIONS))
  assert config['train_args.num_steps'] == str(DEFAULT_TRAIN_STEPS)
  # A row for every key, and no path of the machine the run was on.
  for field in dataclasses.fields(config_lib.TrainerConfig):
    assert f'custom_config.{field.name}' in config, field.name
  assert config['module_file'] == 'components/taxi_tpu_module.py'
  text = re.sub(r'data:[^"]*', '', page)  # The plots' bytes.
  assert REPO not in text
  assert not re.findall(r'(?<![\w.])/(?:work|home|root|tmp)/', text)
  # The report as the code writes it now: no caption repeating a title.
  assert '<figcaption>' not in page
  from tfx_tpu_trainer.publishing import training_report as report  # pylint: disable=g-import-not-at-top
  assert f'alt="{html.escape(report.SPEED_TITLE)}"' in page
  # The README's sample summary is that run's.
  final = _page_table(page, 'Final metrics')
  (line,) = re.findall(r'Trainer eval metrics:\s+(.*)', _sample_summary())
  shown = dict(part.split('=') for part in line.split(', '))
  assert shown.keys() == final.keys()
  for name, value in shown.items():
    assert float(value) == pytest.approx(float(final[name]), abs=5e-4)


def test_pasted_commands_name_the_command_a_shell_finds(tmp_path):
  program = ('from tfx_tpu_trainer_cli import run\n'
             'print(run.command_name())\n')
  installed = os.path.join(os.path.dirname(sys.executable), 'tfx-tpu-trainer')
  if not os.path.isfile(installed):
    pytest.skip('no console script beside this Python')
  env = dict(os.environ, PATH='/usr/bin:/bin')
  without = subprocess.run([sys.executable, '-c', program], env=env,
                           capture_output=True, text=True, check=True)
  assert without.stdout.strip() == shlex.quote(installed)
  env['PATH'] = os.path.dirname(installed) + ':/usr/bin:/bin'
  on_path = subprocess.run([sys.executable, '-c', program], env=env,
                           capture_output=True, text=True, check=True)
  assert on_path.stdout.strip() == 'tfx-tpu-trainer'


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.skipif(not os.path.isdir(VENV), reason='no .venv')
def test_readme_job_server_lines_run_in_a_fresh_shell(tmp_path):
  """The pipeline guide's two lines: Beam's job server, and `run` on it (a
  port of the test's own, on a small slice of the data)."""
  from tests import conftest  # pylint: disable=g-import-not-at-top
  from tests.fixtures import beam_jobs  # pylint: disable=g-import-not-at-top
  (block,) = [b for b in _sh_blocks(_doc('docs/guide/your_pipeline.md'))
              if 'local_job_service_main' in b]
  server, run_line = _commands(block)
  assert '--port 8099' in server and '--job_endpoint=localhost:8099' in run_line
  port = beam_jobs.free_port()
  server, run_line = [c.replace('8099', str(port))
                      for c in (server, run_line)]
  data = conftest.write_taxi_slice(str(tmp_path / 'data'), rows=300)
  activate = next(c for c in _commands(_activation_block())
                  if 'activate' in c)
  script = (
      f'cd {shlex.quote(REPO)} && {activate} && cd {shlex.quote(str(tmp_path))}'
      f' && (setsid {server} > server.log 2>&1 & echo $! > server.pid)'
      f' && until (echo > /dev/tcp/localhost/{port}) 2>/dev/null; do sleep 1;'
      f' done && {run_line} --data-root {shlex.quote(data)} --train-steps 20'
      ' --eval-steps 2 --eval-every-steps 0 --train-batch-size 16'
      ' --eval-batch-size 16 --min-accuracy 0 --min-balanced-accuracy 0')
  try:
    result = _fresh_shell(script, cwd=str(tmp_path))
  finally:
    pid_file = tmp_path / 'server.pid'
    if pid_file.exists():
      with contextlib.suppress(ProcessLookupError):
        os.killpg(int(pid_file.read_text()), signal.SIGTERM)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert '[8/8] Pusher done in' in result.stdout
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in result.stdout
