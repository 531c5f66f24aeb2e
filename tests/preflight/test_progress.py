"""The preflight says what it is doing, and compiles for CPU without LLVM's
optimizations (most of its time on a large model: XLA's CPU compile of the
train step, which grows with the step's ops)."""

import os
import re

from tfx_tpu_trainer.preflight import xla_flags
from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR

MODULE = os.path.join(TEST_MODULES_DIR, 'conv_batch_norm_module.py')


def test_each_step_is_shown_on_stderr_as_it_runs(capsys):
  assert cli.main(['preflight', '--module-file', MODULE, '--json']) == 0
  captured = capsys.readouterr()
  progress = [line for line in captured.err.splitlines()
              if line.startswith('TPU preflight: ')]
  steps = ('the train step', 'the eval step', "the export's PREDICT step")
  expected = []
  for phase, step in zip(('train', 'eval', 'export'), steps):
    expected += [f'TPU preflight: {phase}: building {step} (the model_fn, as '
                 'on a TPU) ...',
                 f'TPU preflight: {phase}: XLA-compiling {step} for CPU and '
                 'running it once (N ops; the more ops, the longer the '
                 'compile) ...']
    if phase == 'export':
      expected.append('TPU preflight: export: exporting the {serve} and '
                      '{serve, tpu} SavedModel ...')
    expected.append(f'TPU preflight: {phase}: done in Xs.')
  normalized = [re.sub(r'done in [0-9.]+s\.$', 'done in Xs.',
                        re.sub(r'\([0-9]+ ops;', '(N ops;', line))
                 for line in progress]
  assert normalized == expected
  # stdout is the JSON report alone.
  assert captured.out.lstrip().startswith('{')


def test_fast_cpu_compiles_add_the_flags_keep_the_users_and_restore(
    monkeypatch):
  monkeypatch.setenv(xla_flags.ENV,
                     '--xla_backend_optimization_level=2 --xla_dump_to=/x')
  with xla_flags.fast_cpu_compiles():
    assert os.environ[xla_flags.ENV] == (
        '--xla_backend_optimization_level=2 --xla_dump_to=/x '
        '--xla_llvm_disable_expensive_passes=true')
  assert os.environ[xla_flags.ENV] == (
      '--xla_backend_optimization_level=2 --xla_dump_to=/x')
  monkeypatch.delenv(xla_flags.ENV)
  with xla_flags.fast_cpu_compiles():
    assert os.environ[xla_flags.ENV] == ' '.join(xla_flags.FAST_COMPILE_FLAGS)
  assert xla_flags.ENV not in os.environ
