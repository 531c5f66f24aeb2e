"""`preflight` and `compile --pipeline` end when user code leaves a thread.

Real processes: a non-daemon thread the trainer module or the pipeline file
starts and never ends would keep the finished command alive for ever; it is
named and the command exits with its own code, as `run` does.
"""

import os
import subprocess
import sys

from tests.conftest import TEST_MODULES_DIR
from tests.preflight.test_preflight import SCHEMA

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EXAMPLE_DIR = os.path.join(REPO, 'examples', 'penguin_tpu')
# Only a guard against a hang failing no test: the command takes seconds.
_HANG_GUARD_SECS = 900

_THREAD = '''
import threading
import time

threading.Thread(target=time.sleep, args=(100000,), name='forever',
                 daemon=False).start()
'''


# `python -m tfx_tpu_trainer_cli`, giving left threads 0.5 s to end, not
# leftover_threads.GRACE_SECS: the test's thread never ends, so a longer
# grace would only be waited out.
_CLI = ('import sys\n'
        'from tfx_tpu_trainer.training import leftover_threads\n'
        'leftover_threads.GRACE_SECS = 0.5\n'
        'from tfx_tpu_trainer_cli import main\n'
        'sys.argv[0] = "tfx-tpu-trainer"\n'
        'sys.exit(main.main())\n')


def _command(*argv):
  result = subprocess.run(
      [sys.executable, '-c', _CLI] + list(argv), cwd=REPO,
      capture_output=True, text=True, check=False, timeout=_HANG_GUARD_SECS)
  return result.returncode, result.stdout, result.stderr


def _assert_thread_named(err, command, code):
  assert (f"tfx-tpu-trainer {command} is done, but non-daemon thread(s) "
          "'forever' (time.sleep) started by module code are still running; "
          f'ending the process with exit code {code}') in err, err


def test_preflight_ends_with_its_result_when_the_module_leaves_a_thread(
    tmp_path):
  module = tmp_path / 'threaded_module.py'
  module.write_text(f'import sys\nsys.path.insert(0, {TEST_MODULES_DIR!r})\n'
                    'from preflight_ready_module import *  # noqa\n' + _THREAD)
  schema = tmp_path / 'schema.pbtxt'
  schema.write_text(SCHEMA)
  code, out, err = _command('preflight', '--module-file', str(module),
                            '--schema', str(schema))
  assert code == 0, err
  assert f'TPU preflight of {module}: TPU-ready' in out, out
  _assert_thread_named(err, 'preflight', 0)


def test_compile_pipeline_ends_when_the_pipeline_file_leaves_a_thread(
    tmp_path):
  path = tmp_path / 'my_pipeline.py'
  path.write_text(
      f'import sys\nsys.path.insert(0, {EXAMPLE_DIR!r})\n'
      'import penguin_pipeline\n' + _THREAD + '\n'
      'def create_pipeline():\n'
      '  return penguin_pipeline.create_pipeline(\n'
      f'      data_root={str(tmp_path / "data")!r},\n'
      f'      pipeline_root={str(tmp_path / "root")!r})\n')
  output = tmp_path / 'out'
  code, out, err = _command('compile', '--pipeline',
                            f'{path}:create_pipeline', '--output-dir',
                            str(output), '--image', 'gcr.io/p/i:1')
  assert code == 0, err
  assert f'Wrote {output / "penguin-tpu.tar.gz"}' in out, out
  _assert_thread_named(err, 'compile', 0)
