"""`tfx-tpu-trainer run`: the taxi pipeline on the local runner (the main job)."""

import contextlib
import glob
import os
import shlex
import sys
import time
import traceback
from typing import Optional

from pipelines import csv_checks
from pipelines import output_root as output_root_lib
from pipelines import paths
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import leftover_threads
from tfx_tpu_trainer_cli import common


def add_parser(subparsers) -> None:
  """Adds the `run` subcommand."""
  parser = subparsers.add_parser(
      'run', help='Run the taxi pipeline on the local runner.',
      description=(
          'Runs ExampleGen, StatisticsGen, SchemaGen, ExampleValidator, '
          'Transform, TPUTrainer, Evaluator and Pusher on the local runner '
          '(Beam DirectRunner, SQLite metadata). With no arguments it runs on '
          'the Chicago taxi data that the tfx wheel ships.'))
  parser.add_argument(
      '--data-root', default=None,
      help='Directory of CSV files with a big_tipper label column '
      '(default: the taxi data embedded in the tfx wheel).')
  parser.add_argument('--output-root', default='tfx_output',
                      help='Where pipeline outputs, metadata and pushed models '
                      'go (default: ./tfx_output).')
  parser.add_argument('--pipeline-name', default=None,
                      help='Pipeline name (default: taxi_tpu).')
  parser.add_argument('--train-steps', type=common.positive_int, default=1000)
  parser.add_argument('--eval-steps', type=common.positive_int, default=50)
  parser.add_argument('--train-batch-size', type=common.positive_int, default=64)
  parser.add_argument('--eval-batch-size', type=common.positive_int, default=64)
  parser.add_argument('--module-file', default=None,
                      help='Trainer module file (default: '
                      'components/taxi_tpu_module.py).')
  parser.add_argument('--preprocessing-module-file', default=None,
                      help='Transform module file (default: '
                      'components/taxi_preprocessing.py).')
  parser.add_argument('--min-accuracy', type=float, default=0.5,
                      help='Evaluator blesses models whose binary accuracy is '
                      'at least this (default: 0.5).')
  tpu = parser.add_mutually_exclusive_group()
  tpu.add_argument('--use-tpu', dest='use_tpu', action='store_true',
                   default=None, help='Train on a TPU (needs --tpu-name or '
                   'TPU_NAME).')
  tpu.add_argument('--no-use-tpu', dest='use_tpu', action='store_false',
                   help='Train on CPU/GPU even if TPU_NAME is set.')
  parser.add_argument('--tpu-name', default=None)
  parser.add_argument('--tpu-zone', default=None)
  parser.add_argument('--tpu-project', default=None)
  parser.add_argument('--verbose', action='store_true',
                      help='Show the full TFX and TensorFlow log.')
  parser.set_defaults(handler=_run)


def _existing_file(path: Optional[str], default: str, flag: str) -> str:
  path = os.path.abspath(path) if path else default
  if not os.path.isfile(path):
    raise common.UsageError(f'{flag} {path!r} does not exist or is not a file.')
  return path


def _run_custom_config(args) -> dict:
  custom_config = {
      'train_batch_size': args.train_batch_size,
      'eval_batch_size': args.eval_batch_size,
  }
  if args.use_tpu is not None:
    custom_config['use_tpu'] = args.use_tpu
  if args.tpu_name:
    custom_config['tpu'] = config_lib.tpu_entry(args.tpu_name, args.tpu_zone,
                                                args.tpu_project)
  elif args.tpu_zone or args.tpu_project:
    raise common.UsageError('--tpu-zone and --tpu-project need --tpu-name.')
  if args.use_tpu and not (args.tpu_name or os.environ.get('TPU_NAME')):
    raise common.UsageError('--use-tpu needs --tpu-name (or TPU_NAME set).')
  return custom_config


def _validate_run_args(args) -> dict:
  """Checks every argument before anything is written; returns the options."""
  data_root = os.path.abspath(args.data_root or paths.embedded_data_root())
  if not os.path.isdir(data_root):
    raise common.UsageError(f'--data-root {data_root!r} is not a directory.')
  if not glob.glob(os.path.join(data_root, '*.csv')):
    raise common.UsageError(f'--data-root {data_root!r} holds no .csv file.')
  if not 0.0 <= args.min_accuracy <= 1.0:
    raise common.UsageError(
        f'--min-accuracy must lie in [0, 1], got {args.min_accuracy}.')
  output_root = os.path.abspath(args.output_root)
  if os.path.exists(output_root) and not os.path.isdir(output_root):
    raise common.UsageError(f'--output-root {output_root!r} is not a directory.')
  try:
    output_root_lib.check_writable(output_root)
  except output_root_lib.OutputRootError as e:
    raise common.UsageError(str(e)) from e
  custom_config = _run_custom_config(args)
  try:
    config = config_lib.TrainerConfig.from_custom_config(custom_config)
    config.check_steps(args.train_steps, args.eval_steps)
  except config_lib.ConfigError as e:
    raise common.UsageError(str(e)) from e
  preprocessing_module_file = _existing_file(
      args.preprocessing_module_file, paths.PREPROCESSING_MODULE_FILE,
      '--preprocessing-module-file')
  _check_csv_files(data_root, preprocessing_module_file, args)
  options = dict(
      data_root=data_root,
      trainer_module_file=_existing_file(args.module_file,
                                         paths.TRAINER_MODULE_FILE,
                                         '--module-file'),
      preprocessing_module_file=preprocessing_module_file,
      train_steps=args.train_steps,
      eval_steps=args.eval_steps,
      custom_config=custom_config,
      min_accuracy=args.min_accuracy)
  if args.pipeline_name:
    options['pipeline_name'] = args.pipeline_name
  _check_trainer_module(options['trainer_module_file'])
  return options


def _check_trainer_module(module_file: str) -> None:
  """Loads the trainer module and checks it against the contract.

  What the TPUTrainer executor checks first, done before any component
  runs, so a module that breaks the contract fails in seconds, not after
  Transform. (Checks that need the data, such as the label key, stay in the
  executor.)
  """
  # In a child process (module_check.py): an exit in the module's code must
  # not end this one.
  from tfx_tpu_trainer import module_check  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import user_module  # pylint: disable=g-import-not-at-top
  try:
    module_check.check_trainer_module(module_file)
  except user_module.UserModuleError as e:
    raise common.UsageError(f'--module-file: {e}') from e


def _check_csv_files(data_root: str, preprocessing_module_file: str,
                     args) -> None:
  """The CSV files have the columns, UTF-8 text and rows for the batches."""
  try:
    csv_checks.check_data_root(
        data_root, csv_checks.required_columns(preprocessing_module_file),
        batch_sizes=(('--train-batch-size', args.train_batch_size),
                     ('--eval-batch-size', args.eval_batch_size)))
  except csv_checks.CsvDataError as e:
    raise common.UsageError(str(e)) from e


def _run(args) -> int:
  """Validates the arguments, runs the pipeline, prints the summary."""
  options = _validate_run_args(args)
  output_root = os.path.abspath(args.output_root)
  # The process id keeps concurrent runs started in one second apart.
  log_path = os.path.join(output_root, 'logs',
                          time.strftime('run-%Y%m%d-%H%M%S') +
                          f'-{os.getpid()}.log')
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  print(f'Running the taxi pipeline on {options["data_root"]}\n'
        f'  outputs under {output_root}\n'
        f'  full log: {log_path}', flush=True)
  with _output_to_log(log_path, enabled=not args.verbose) as console:
    try:
      # TFX and TensorFlow load here, after the arguments are checked.
      from pipelines import local_runner  # pylint: disable=g-import-not-at-top
      if not args.verbose:
        _quiet_tensorflow()
      summary = local_runner.run(
          local_runner.local_options(output_root, **options),
          printer=lambda line, **_: print(line, file=console, flush=True))
    except Exception as e:  # pylint: disable=broad-except
      traceback.print_exc()
      print(f'\nThe pipeline failed: {type(e).__name__}: {e}\n'
            f'Full log: {log_path}', file=console, flush=True)
      code = 1
    else:
      code = 0
  if code == 0:
    _print_summary(summary)
  leftover_threads.end_process_if_threads_left(code, 'The pipeline run')
  return code


@contextlib.contextmanager
def _output_to_log(log_path: str, enabled: bool):
  """Sends file descriptors 1 and 2 (TF, Beam, pip output) to `log_path`.

  Yields a stream to the original stdout, for progress lines.
  """
  if not enabled:
    yield sys.stdout
    return
  sys.stdout.flush()
  sys.stderr.flush()
  saved_out, saved_err = os.dup(1), os.dup(2)
  console = os.fdopen(os.dup(saved_out), 'w', buffering=1)
  with open(log_path, 'ab') as log:
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    try:
      yield console
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os.dup2(saved_out, 1)
      os.dup2(saved_err, 2)
      os.close(saved_out)
      os.close(saved_err)
      console.close()


def _quiet_tensorflow() -> None:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')


def _print_summary(summary) -> None:
  def metrics_line(metrics):
    return ', '.join(f'{name}={value:.4g}' if isinstance(value, float) else
                     f'{name}={value}' for name, value in sorted(metrics.items()))
  print(f'\nPipeline finished in {summary.seconds:.0f}s.')
  print(f'  Trainer eval metrics:   {metrics_line(summary.trainer_metrics)}')
  print(f'  Evaluator metrics:      {metrics_line(summary.evaluator_metrics)}')
  print(f'  Blessed:                {"yes" if summary.blessed else "no"}')
  if summary.pushed:
    print(f'  Pushed model:           {summary.pushed_model_path}')
    print('  Pushed model tag sets:  ' + ', '.join(
        '{' + ', '.join(tags) + '}' for tags in summary.pushed_model_tag_sets))
  else:
    print('  Pushed model:           none (the model was not blessed)')
  print(f'  Trained model:          {summary.model_path}')
  print(f'  TensorBoard logs:       tensorboard --logdir '
        f'{shlex.quote(summary.tensorboard_dir)}')


# Modules that each define `add_parser(subparsers)` for one more subcommand;
# their handlers return an exit code and may raise UsageError.
