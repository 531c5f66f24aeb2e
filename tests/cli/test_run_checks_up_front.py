"""`run` refuses, before any component, what would fail minutes later.

A read-only output root, a batch larger than its split, a one-row CSV and a
byte that is not UTF-8 past the rows the header check reads: each exits 2
with a message that names the flag or the file and line, and writes nothing.
"""

import contextlib
import os
import subprocess

import pytest

from tests.cli import test_run_command as run_command_tests
from tests.fixtures import cli_exit



@contextlib.contextmanager
def _read_only_dir(path):
  """A directory no one can write: a read-only tmpfs as root, else mode 555."""
  path.mkdir()
  if os.geteuid() != 0:
    path.chmod(0o555)
    try:
      yield path
    finally:
      path.chmod(0o755)
    return
  mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=1m',
                            'tmpfs', str(path)], capture_output=True,
                           check=False)
  if mounted.returncode:
    pytest.skip(f'cannot mount a read-only tmpfs: {mounted.stderr!r}')
  try:
    yield path
  finally:
    subprocess.run(['umount', str(path)], check=True)


# Item 10: a read-only --output-root is the documented exit-2 error.
@pytest.mark.parametrize('below', ['', 'new/out'])
def test_read_only_output_root_exits_2_naming_it(tmp_path, capsys, below):
  with _read_only_dir(tmp_path / 'ro') as read_only:
    output_root = os.path.join(str(read_only), below) if below else str(
        read_only)
    assert cli_exit.exit_code(['run', '--output-root', output_root]) == 2
    err = capsys.readouterr().err
    assert (f"tfx-tpu-trainer run: error: --output-root {output_root!r} is "
            'not writable') in err, err
    assert 'Read-only file system' in err or 'Permission denied' in err, err
    if below:
      assert f'its parent {str(read_only)!r} cannot be written' in err
    assert 'choose a writable directory' in err
    assert os.listdir(read_only) == []


# Item 12: the batch size is checked with the other arguments.
def test_train_batch_size_larger_than_the_data_exits_2_before_transform(
    tmp_path, capsys):
  output_root = tmp_path / 'out'
  assert cli_exit.exit_code(['run', '--output-root', str(output_root),
                     '--train-batch-size', '10000000']) == 2
  err = capsys.readouterr().err
  assert ('--train-batch-size 10000000 is larger than the train split: '
          '--data-root ') in err, err
  assert ('holds 15002 data row(s), of which ExampleGen puts about 10001 '
          '(67%) in train') in err, err
  assert 'Use a --train-batch-size of at most 10001' in err
  assert not output_root.exists()


# Item 8: a one-row CSV and a Latin-1 byte past row 2.
def test_one_row_csv_exits_2_naming_the_batch_it_cannot_fill(tmp_path,
                                                              capsys):
  data = tmp_path / 'data'
  data.mkdir()
  (data / 'data.csv').write_text(run_command_tests._header() +  # pylint: disable=protected-access
                                 run_command_tests._row())  # pylint: disable=protected-access
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(tmp_path / 'out')]) == 2
  err = capsys.readouterr().err
  assert ('--train-batch-size 64 is larger than the train split: --data-root '
          f"{str(data)!r} holds 1 data row(s), of which ExampleGen puts about "
          '0 (67%) in train') in err, err
  assert ('No batch size fits: add data (at least 97 rows for this batch '
          'size; any batch size needs at least 2).') in err, err
  assert 'at most 0' not in err  # Item 12.
  assert not (tmp_path / 'out').exists()


# Item 12: a byte order mark is named as such.
def test_csv_with_a_byte_order_mark_exits_2_naming_the_bom(tmp_path, capsys):
  data = tmp_path / 'data'
  data.mkdir()
  path = data / 'data.csv'
  path.write_bytes(b'\xef\xbb\xbf' + (
      run_command_tests._header() +  # pylint: disable=protected-access
      run_command_tests._row() * 300).encode())  # pylint: disable=protected-access
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(tmp_path / 'out')]) == 2
  err = capsys.readouterr().err
  assert (f'--data-root: {path} starts with a UTF-8 byte order mark (BOM, '
          'bytes ef bb bf), which CsvExampleGen would read as part of the '
          "first column's name: save it as UTF-8 without a BOM") in err, err
  assert not (tmp_path / 'out').exists()


# Item 12: a preprocessing_fn that raises is blamed on its own flag.
def test_preprocessing_fn_error_names_the_preprocessing_module(tmp_path,
                                                               capsys):
  data = tmp_path / 'data'
  data.mkdir()
  (data / 'data.csv').write_text(run_command_tests._header() +  # pylint: disable=protected-access
                                 run_command_tests._row() * 300)  # pylint: disable=protected-access
  module = tmp_path / 'broken_preprocessing.py'
  module.write_text('def preprocessing_fn(inputs):\n'
                    '  raise ValueError("no such feature: fare_xf")\n')
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(tmp_path / 'out'), '--preprocessing-module-file',
                     str(module), '--train-steps', '5',
                     '--eval-steps', '1']) == 2
  err = capsys.readouterr().err
  assert ('tfx-tpu-trainer run: error: --preprocessing-module-file: '
          f'preprocessing_fn of {module} raised ValueError: no such feature: '
          'fare_xf while it was traced on the CSV columns, before any '
          'component ran') in err, err
  assert 'error: --module-file' not in err
  assert not (tmp_path / 'out').exists()


def test_latin1_byte_past_row_2_names_file_line_and_byte(tmp_path, capsys):
  data = tmp_path / 'data'
  data.mkdir()
  rows = [run_command_tests._row() for _ in range(300)]  # pylint: disable=protected-access
  rows[4] = rows[4].replace('1', 'caf\xe9', 1)
  path = data / 'data.csv'
  path.write_bytes((run_command_tests._header() + ''.join(rows)).encode(  # pylint: disable=protected-access
      'latin-1'))
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(tmp_path / 'out')]) == 2
  err = capsys.readouterr().err
  assert (f'--data-root: {path} is not UTF-8 text: line 6, column 4 holds the '
          'byte 0xe9 (invalid continuation byte)') in err, err
  assert 'iconv -f latin1 -t utf-8' in err
  assert not (tmp_path / 'out').exists()


_EXAMPLE_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__)))), 'examples', 'penguin_tpu')


def _penguin_pipeline_file(tmp_path, pipeline_name='penguin-tpu'):
  """A `--pipeline` file: the guide's penguin pipeline, `pipeline_name`."""
  path = tmp_path / 'my_pipeline.py'
  path.write_text(
      'import sys\n'
      f'sys.path.insert(0, {_EXAMPLE_DIR!r})\n'
      'import penguin_pipeline\n\n'
      'def create_pipeline():\n'
      # The module stays imported for later tests in this process.
      '  default = penguin_pipeline.PIPELINE_NAME\n'
      f'  penguin_pipeline.PIPELINE_NAME = {pipeline_name!r}\n'
      '  try:\n'
      '    return penguin_pipeline.create_pipeline(\n'
      f'        data_root={str(tmp_path / "data")!r},\n'
      f'        pipeline_root={str(tmp_path / "root")!r})\n'
      '  finally:\n'
      '    penguin_pipeline.PIPELINE_NAME = default\n')
  return f'{path}:create_pipeline'


# Item 5: a pipeline name that leaves the output root.
@pytest.mark.parametrize('name', ['../../escaped', '..', 'a/b'])
def test_pipeline_name_leaving_the_output_root_exits_2_writing_nothing(
    tmp_path, capsys, name):
  data = tmp_path / 'data'
  data.mkdir()
  (data / 'data.csv').write_text(run_command_tests._header() +  # pylint: disable=protected-access
                                 run_command_tests._row() * 300)  # pylint: disable=protected-access
  output_root = tmp_path / 'a' / 'b' / 'out'
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(output_root), '--pipeline-name', name,
                     '--train-steps', '5', '--eval-steps', '1']) == 2
  err = capsys.readouterr().err
  assert (f'tfx-tpu-trainer run: error: --pipeline-name {name!r} is not a '
          'plain name: the run keeps each pipeline\'s outputs in a folder of '
          'that name under the output root') in err, err
  assert sorted(os.listdir(tmp_path)) == ['data']


def test_user_pipeline_name_leaving_the_output_root_exits_2_writing_nothing(
    tmp_path, capsys):
  spec = _penguin_pipeline_file(tmp_path, '../../escaped')
  output_root = tmp_path / 'a' / 'b' / 'out'
  assert cli_exit.exit_code(['run', '--pipeline', spec, '--output-root',
                     str(output_root)]) == 2
  err = capsys.readouterr().err
  assert (f"tfx-tpu-trainer run: error: --pipeline {spec}: pipeline_name "
          "'../../escaped' is not a plain name") in err, err
  assert sorted(os.listdir(tmp_path)) == ['my_pipeline.py']


# Item 6: `run --pipeline` with a read-only output root, as the taxi run.
def test_read_only_output_root_with_pipeline_exits_2_naming_it(tmp_path,
                                                               capsys):
  spec = _penguin_pipeline_file(tmp_path)
  with _read_only_dir(tmp_path / 'ro') as read_only:
    assert cli_exit.exit_code(['run', '--pipeline', spec, '--output-root',
                       str(read_only)]) == 2
    err = capsys.readouterr().err
    assert (f"tfx-tpu-trainer run: error: --output-root {str(read_only)!r} "
            'is not writable') in err, err
    assert 'Traceback' not in err
    assert os.listdir(read_only) == []


# Item 9: the output root inside the data root.
@pytest.mark.parametrize('below', ['', 'out', 'runs/out'])
def test_output_root_inside_data_root_exits_2_writing_nothing(
    tmp_path, capsys, below):
  data = tmp_path / 'data'
  data.mkdir()
  (data / 'data.csv').write_text(run_command_tests._header() +  # pylint: disable=protected-access
                                 run_command_tests._row() * 300)  # pylint: disable=protected-access
  output_root = os.path.join(str(data), below) if below else str(data)
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     output_root, '--train-steps', '5',
                     '--eval-steps', '1']) == 2
  err = capsys.readouterr().err
  assert (f'tfx-tpu-trainer run: error: --output-root {output_root!r} is '
          f'inside --data-root {str(data)!r}: ExampleGen reads the data '
          'folder') in err, err
  assert os.listdir(data) == ['data.csv']


# Item 8: TPU_NAME naming an address where no TPU answers.
def test_a_tpu_name_that_does_not_answer_exits_2_before_any_component(
    tmp_path, capsys, monkeypatch):
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as closed:
    closed.bind(('127.0.0.1', 0))
    address = f'grpc://127.0.0.1:{closed.getsockname()[1]}'
  monkeypatch.setenv('TPU_NAME', address)
  output_root = tmp_path / 'out'
  # Nothing listens there: a longer wait would only be waited out.
  assert cli_exit.exit_code(['run', '--output-root', str(output_root),
                     '--train-steps', '10', '--tpu-wait-secs', '2']) == 2
  err = capsys.readouterr().err
  assert (f'tfx-tpu-trainer run: error: TPU {address} did not answer within '
          "custom_config['tpu_wait_secs']=2 s") in err, err
  assert f'TPU_NAME={address} in the environment' in err
  assert 'unset TPU_NAME or set custom_config' in err
  assert '(`run` sets the wait with --tpu-wait-secs.)' in err
  assert not output_root.exists() or not os.listdir(output_root)


@pytest.mark.parametrize('argv,wait_secs', [
    ([], 60),  # custom_config['tpu_wait_secs']'s default.
    (['--tpu-wait-secs', '300'], 300),
])
def test_the_tpu_wait_is_the_config_default_unless_given(argv, wait_secs):
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  args = cli.build_parser().parse_args(['run', '--tpu-name', 't'] + argv)
  run._TAXI_OPTIONS.check(args)  # pylint: disable=protected-access
  custom_config = run._run_custom_config(args)  # pylint: disable=protected-access
  assert config_lib.TrainerConfig.from_custom_config(
      custom_config, environ={}).tpu_wait_secs == wait_secs


@pytest.mark.parametrize('value', ['0', '-1', 'soon'])
def test_a_tpu_wait_that_is_no_positive_integer_exits_2(capsys, value):
  assert cli_exit.exit_code(['run', '--tpu-wait-secs', value]) == 2
  assert 'argument --tpu-wait-secs:' in capsys.readouterr().err
