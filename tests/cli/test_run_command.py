"""`tfx-tpu-trainer run` argument errors: non-zero exit, clear message, no files."""

import os

import pytest

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import cli_exit

from tfx_tpu_trainer_cli import main as cli


@pytest.mark.parametrize('argv,message', [
    (['--data-root', '/no/such/dir'], "--data-root '/no/such/dir' is not a directory"),
    (['--train-steps', '0'], 'argument --train-steps: must be a positive integer, got 0'),
    (['--eval-steps', '-3'], 'argument --eval-steps: must be a positive integer, got -3'),
    (['--train-steps', 'ten'], "argument --train-steps: 'ten' is not an integer"),
    (['--train-batch-size', '0'], 'argument --train-batch-size: must be a positive integer'),
    (['--module-file', '/no/module.py'], "--module-file '/no/module.py' does not exist"),
    (['--use-tpu'], '--use-tpu needs --tpu-name'),
    (['--tpu-zone', 'us-central1-b'], '--tpu-zone and --tpu-project need --tpu-name'),
    (['--min-accuracy', '1.5'], '--min-accuracy must lie in [0, 1]'),
    (['--min-balanced-accuracy', '-0.1'],
     '--min-balanced-accuracy must lie in [0, 1], got -0.1.'),
    (['--eval-every-steps', '-1'],
     'argument --eval-every-steps: must be an integer >= 0, got -1'),
    (['--train-steps', '10', '--eval-every-steps', '20'],
     '--eval-every-steps 20 is more than --train-steps 10'),
])
def test_bad_arguments_exit_non_zero_and_write_nothing(tmp_path, capsys,
                                                       monkeypatch, argv,
                                                       message):
  monkeypatch.delenv('TPU_NAME', raising=False)
  output_root = tmp_path / 'out'
  assert cli_exit.exit_code(['run', '--output-root', str(output_root)] + argv) == 2
  assert message in capsys.readouterr().err
  assert not output_root.exists()


def test_data_root_without_csv(tmp_path, capsys):
  empty = tmp_path / 'empty'
  empty.mkdir()
  assert cli_exit.exit_code(['run', '--data-root', str(empty), '--output-root',
                     str(tmp_path / 'out')]) == 2
  assert 'holds no .csv file' in capsys.readouterr().err
  assert not (tmp_path / 'out').exists()


def test_output_root_that_is_a_file(tmp_path, capsys):
  not_a_dir = tmp_path / 'file'
  not_a_dir.write_text('x')
  assert cli_exit.exit_code(['run', '--output-root', str(not_a_dir)]) == 2
  assert 'is not a directory' in capsys.readouterr().err
  assert not_a_dir.read_text() == 'x'


@pytest.mark.parametrize('module_name,message', [
    ('no_model_fn.py', 'defines neither model_fn'),
    ('wrong_signature.py', "missing argument(s) ['mode', 'params']"),
    ('fails_to_import.py', 'failed to import'),
    ('stock_run_fn_module.py', 'Define build_keras_model(params) instead'),
])
def test_module_that_breaks_the_contract_fails_before_any_component(
    tmp_path, capsys, module_name, message):
  path = os.path.join(TEST_MODULES_DIR, module_name)
  output_root = tmp_path / 'out'
  assert cli_exit.exit_code(['run', '--output-root', str(output_root),
                     '--module-file', path]) == 2
  err = capsys.readouterr().err
  assert 'tfx-tpu-trainer run: error: --module-file: ' in err
  assert message in err and path in err
  assert not output_root.exists()


def _header(columns=None):
  from tfx_tpu_trainer_cli import csv_checks  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  columns = columns or csv_checks.required_columns(
      paths.PREPROCESSING_MODULE_FILE)
  return ','.join(columns) + '\n'


def _row(columns=None):
  from tfx_tpu_trainer_cli import csv_checks  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  columns = columns or csv_checks.required_columns(
      paths.PREPROCESSING_MODULE_FILE)
  return ','.join('1' for _ in columns) + '\n'


@pytest.mark.parametrize('content,message', [
    ('', 'data.csv is empty'),
    ('\n\n', 'data.csv is empty'),
    (None, 'data.csv has a header but no data row'),
    ('missing_column', "data.csv has no column(s) ['trip_miles'] in its "
     'header'),
])
def test_csv_data_root_is_checked_before_any_component(tmp_path, capsys,
                                                       content, message):
  data = tmp_path / 'data'
  data.mkdir()
  if content is None:
    content = _header()
  elif content == 'missing_column':
    content = _header().replace('trip_miles,', '') + _row()[2:]
  (data / 'data.csv').write_text(content)
  output_root = tmp_path / 'out'
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(output_root)]) == 2
  assert message in capsys.readouterr().err
  assert not output_root.exists()


def test_every_file_of_the_data_root_is_checked(tmp_path, capsys):
  data = tmp_path / 'data'
  data.mkdir()
  (data / 'a.csv').write_text(_header() + _row())
  (data / 'b.csv').write_text(_header())
  assert cli_exit.exit_code(['run', '--data-root', str(data), '--output-root',
                     str(tmp_path / 'out')]) == 2
  assert 'b.csv has a header but no data row' in capsys.readouterr().err


def test_tensorboard_command_quotes_the_path(capsys):
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
  run._print_summary(local_runner.RunSummary(  # pylint: disable=protected-access
      trainer_metrics={}, evaluator_metrics={}, blessed=False, pushed=False,
      pushed_model_path=None, pushed_model_tag_sets=[],
      model_path='/out dir/model/1', tensorboard_dir='/out dir/model_run/2',
      seconds=1.0))
  assert ("tensorboard --logdir '/out dir/model_run/2'"
          in capsys.readouterr().out)


@pytest.mark.parametrize('report_path,shown', [
    ('/out/model_run/2/training_report.html',
     'Training report:        /out/model_run/2/training_report.html'),
    (None, 'Training report:        none (see the log)'),
])
def test_summary_names_the_training_report(capsys, report_path, shown):
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
  run._print_summary(local_runner.RunSummary(  # pylint: disable=protected-access
      trainer_metrics={}, evaluator_metrics={}, blessed=False, pushed=False,
      pushed_model_path=None, pushed_model_tag_sets=[],
      model_path='/out/model/1', tensorboard_dir='/out/model_run/2',
      seconds=1.0, report_path=report_path))
  assert shown in capsys.readouterr().out


@pytest.mark.parametrize('argv,expected', [
    (['--train-steps', '1000'], 200),
    (['--train-steps', '7'], 2),
    (['--train-steps', '1000', '--eval-every-steps', '250'], 250),
    (['--train-steps', '1000', '--eval-every-steps', '0'], None),
    # On a TPU in whole loops of iterations_per_loop (100): checkpoints come
    # only between loops.
    (['--train-steps', '1000', '--tpu-name', 't'], 200),
    (['--train-steps', '1250', '--tpu-name', 't'], 300),
    (['--train-steps', '90', '--tpu-name', 't'], None),
])
def test_eval_every_steps_default_spreads_evaluations(argv, expected):
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  args = cli.build_parser().parse_args(['run'] + argv)
  run._TAXI_OPTIONS.check(args)  # pylint: disable=protected-access
  config = run._run_custom_config(args)  # pylint: disable=protected-access
  assert config.get('eval_every_steps') == expected
  assert config['show_progress'] is True
