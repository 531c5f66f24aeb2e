"""A `--pipeline` file that ends the process or raises KeyboardInterrupt.

Run as real `tfx-tpu-trainer` processes: without the fix, `os._exit()` in
the file ends the command itself (with the file's exit code and no word).
`run` and `compile` load the file alike (user_pipeline.load_pipeline), so
these run `run`; each command's exit 2 for a file that fails to load:
tests/cli/test_user_pipeline.py.
"""

import os
import subprocess
import sys
import textwrap


REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _command(tmp_path, source, *argv):
  """`tfx-tpu-trainer ARGV --pipeline p.py:create_pipeline`: (code, stderr)."""
  path = tmp_path / 'p.py'
  path.write_text(textwrap.dedent(source))
  result = subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli'] + list(argv) +
      ['--pipeline', f'{path}:create_pipeline'],
      cwd=REPO, capture_output=True, text=True, check=False)
  return result.returncode, result.stderr, str(path)


def test_os_exit_at_import_of_the_pipeline_file_exits_2_naming_it(tmp_path):
  output = tmp_path / 'out'
  code, err, path = _command(
      tmp_path, 'import os\nos._exit(0)\n\ndef create_pipeline():\n  pass\n',
      'run', '--output-root', str(output))
  assert code == 2, err
  assert (f'tfx-tpu-trainer run: error: --pipeline: {path} failed to '
          'import: it called os._exit(0) while being imported. A pipeline '
          'file must not end the process') in err, err
  assert not output.exists()


def test_os_exit_in_the_pipeline_function_exits_2_naming_it(tmp_path):
  output = tmp_path / 'out'
  code, err, _ = _command(tmp_path, '''
      import os

      def create_pipeline():
        os._exit(3)
      ''', 'run', '--output-root', str(output))
  assert code == 2, err
  assert ('tfx-tpu-trainer run: error: --pipeline: create_pipeline() in p.py '
          'it called os._exit(3): the function must return the pipeline, '
          'never end the process.') in err, err
  assert not output.exists()


def test_keyboard_interrupt_in_the_pipeline_function_exits_130(tmp_path):
  output = tmp_path / 'out'
  code, err, path = _command(tmp_path, '''
      def create_pipeline():
        raise KeyboardInterrupt()
      ''', 'run', '--output-root', str(output))
  assert code == 130, err
  assert (f'tfx-tpu-trainer run: interrupted: --pipeline: KeyboardInterrupt '
          f'was raised in create_pipeline() of {path}; nothing ran.\n'
          ) in err, err
  assert 'Traceback' not in err, err
  assert not output.exists()
