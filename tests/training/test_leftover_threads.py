"""A thread that user code never ends does not hang a finished process."""

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT
from tests.conftest import TEST_MODULES_DIR

_FINISH_WITH_USER_THREAD = (
    'import importlib.util, sys\n'
    'from tfx_tpu_trainer.training import leftover_threads\n'
    'def work():\n'
    '  spec = importlib.util.spec_from_file_location("m", sys.argv[1])\n'
    '  spec.loader.exec_module(importlib.util.module_from_spec(spec))\n'
    '  print("work done", flush=True)\n'
    '  if sys.argv[2] == "fail":\n'
    '    raise RuntimeError("the step failed")\n'
    # A short grace: the thread never ends, so the default 5 s is only waited.
    'leftover_threads.run_then_end(work, "The TPUTrainer step", 0.5)\n')


def _finish(outcome):
  # Without the fix this process never exits: the test would hang, not pass.
  return subprocess.run(
      [sys.executable, '-c', _FINISH_WITH_USER_THREAD,
       os.path.join(TEST_MODULES_DIR, 'starts_endless_thread.py'), outcome],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)


def test_a_finished_step_ends_despite_a_module_thread_and_names_it():
  result = _finish('ok')
  assert result.returncode == 0, result.stderr
  assert 'work done' in result.stdout
  assert ("The TPUTrainer step is done, but non-daemon thread(s) "
          "'metrics-poller' (m._poll_forever) started by module code are "
          'still running; ending the process with exit code 0') in (
              result.stderr), result.stderr
  assert 'Start such threads with daemon=True' in result.stderr


def test_a_failed_step_still_fails_and_ends():
  result = _finish('fail')
  assert result.returncode == 1, result.stderr
  assert 'RuntimeError: the step failed' in result.stderr
  assert 'ending the process with exit code 1' in result.stderr
