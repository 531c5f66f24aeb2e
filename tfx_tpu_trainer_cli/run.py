"""`tfx-tpu-trainer run`: a pipeline on the local runner (the main job)."""

import glob
import math
import os
import shlex
import shutil
import sys
import time
from typing import Optional

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.training import leftover_threads
from tfx_tpu_trainer_cli import check_server
from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import csv_checks
from tfx_tpu_trainer_cli import module_checks
from tfx_tpu_trainer_cli import output_root as output_root_lib
from tfx_tpu_trainer_cli import paths
from tfx_tpu_trainer_cli import pipeline_choice

# Without --eval-every-steps, training evaluates this many times (and the
# training report's evaluation curves have this many points).
DEFAULT_EVALUATIONS = 5


def add_parser(subparsers) -> None:
  """Adds the `run` subcommand."""
  parser = subparsers.add_parser(
      'run', help='Run the taxi pipeline, or yours, on the local runner.',
      description=(
          'Runs ExampleGen, StatisticsGen, SchemaGen, ExampleValidator, '
          'Transform, TPUTrainer, Evaluator and Pusher on the local runner '
          '(Beam DirectRunner, SQLite metadata). With no arguments it runs on '
          'the Chicago taxi data that the tfx wheel ships; --pipeline '
          'FILE:FUNCTION runs your pipeline instead.'))
  parser.add_argument(
      '--pipeline', default=None, metavar='FILE:FUNCTION',
      help='Your pipeline instead of the taxi one: FUNCTION in FILE takes no '
      'required arguments and returns a tfx.dsl.Pipeline with a TPUTrainer '
      '(without a metadata_connection_config, SQLite under --output-root is '
      'used). The taxi pipeline\'s options (--data-root, --module-file, '
      '--train-steps ...) do not apply.')
  parser.add_argument(
      '--data-root', default=None,
      help='Directory of CSV files with a big_tipper label column '
      '(default: the taxi data embedded in the tfx wheel).')
  parser.add_argument('--output-root', default='tfx_output',
                      help='Where pipeline outputs, metadata and pushed models '
                      'go (default: ./tfx_output).')
  parser.add_argument('--pipeline-name', default=None,
                      help='Pipeline name (default: taxi_tpu).')
  _TAXI_OPTIONS.add_step_arguments(parser)
  parser.add_argument(
      '--eval-every-steps', type=common.non_negative_int, default=None,
      help='Evaluate every N training steps (the eval curves of the '
      f'training report); 0: only at the end (default: {DEFAULT_EVALUATIONS} '
      'evaluations, every ceil(train-steps / '
      f'{DEFAULT_EVALUATIONS}) steps).')
  parser.add_argument('--no-progress', dest='show_progress',
                      action='store_const', const=False, default=None,
                      help='Do not show the training progress bar/lines.')
  trainer = parser.add_mutually_exclusive_group()
  trainer.add_argument('--module-file', default=None,
                       help='Trainer module file (default: the --model\'s).')
  trainer.add_argument(
      '--model', default=None, choices=sorted(paths.MODEL_MODULE_FILES),
      help='A bundled taxi model: wide_and_deep (components/'
      'taxi_tpu_module.py, the default), keras (the same model in Keras, '
      'components/taxi_keras_module.py) or embeddings (its categorical '
      'features in TPU embedding tables, one of them hashed into 2^20 rows: '
      'components/taxi_embedding_module.py).')
  parser.add_argument('--preprocessing-module-file', default=None,
                      help='Transform module file (default: '
                      'components/taxi_preprocessing.py).')
  parser.add_argument('--label-key', default=None,
                      help='The label feature the preprocessing_fn outputs, '
                      "for TPUTrainer's input (custom_config['label_key']; "
                      "default: the trainer module's LABEL_KEY).")
  parser.add_argument(
      '--eval-label-key', default=None,
      help='The label the Evaluator reads, a transformed feature (default: '
      'the trainer\'s label key: custom_config label_key, the module\'s '
      'LABEL_KEY, or a stock module\'s transformed _LABEL_KEY).')
  parser.add_argument(
      '--eval-prediction-key', default=None,
      help='The output of the model\'s serving_default signature the '
      'Evaluator reads (default: the first of scores, outputs, predictions, '
      'logistic, probabilities, logits it has, as TFMA looks for them).')
  parser.add_argument(
      '--bulk-infer', dest='bulk_infer', action='store_const', const=True,
      default=None,
      help='Add a TPUBulkInferrer that scores the eval split with the '
      'blessed model (on the TPU when training uses one; its PredictionLogs '
      'are listed at the end).')
  parser.add_argument('--min-accuracy', type=float, default=None,
                      help='Evaluator blesses models whose binary accuracy is '
                      'at least this (default: 0.5) and whose balanced '
                      'accuracy is at least --min-balanced-accuracy.')
  parser.add_argument('--min-balanced-accuracy', type=float, default=None,
                      help='Evaluator blesses models whose balanced accuracy '
                      '(the mean of both classes\' recalls) is at least '
                      'this (default: 0.55; a model that always answers the '
                      'majority class has 0.5).')
  tpu = parser.add_mutually_exclusive_group()
  tpu.add_argument('--use-tpu', dest='use_tpu', action='store_true',
                   default=None, help='Train on a TPU (needs --tpu-name or '
                   'TPU_NAME).')
  tpu.add_argument('--no-use-tpu', dest='use_tpu', action='store_false',
                   help='Train on CPU/GPU even if TPU_NAME is set.')
  parser.add_argument('--tpu-name', default=None,
                      help='The TPU to train on: a Cloud TPU name or '
                      'grpc://HOST:PORT (default: TPU_NAME).')
  parser.add_argument('--tpu-zone', default=None,
                      help='The Cloud TPU\'s zone, with --tpu-name.')
  parser.add_argument('--tpu-project', default=None,
                      help='The Cloud TPU\'s project, with --tpu-name.')
  parser.add_argument(
      '--tpu-wait-secs', type=common.positive_int, default=None,
      metavar='SECONDS',
      help='How long to wait, before any component runs, for the named TPU '
      'to list its devices (custom_config[\'tpu_wait_secs\']; default: '
      f'{config_lib.TrainerConfig.tpu_wait_secs}).')
  parser.add_argument('--verbose', action='store_true',
                      help='Show the full TFX and TensorFlow log.')
  parser.add_argument(
      '--beam-arg', action='append', default=[], metavar='ARG',
      help='A Beam pipeline argument for the components that run Beam, one '
      'option per flag, written --beam-arg=--NAME=VALUE (e.g. '
      '--beam-arg=--runner=PortableRunner --beam-arg=--job_endpoint='
      'localhost:8099 --beam-arg=--environment_type=LOOPBACK); repeatable; '
      'with --pipeline, added after your pipeline\'s own. Default: the '
      'DirectRunner in this process.')
  parser.set_defaults(handler=_run)


def _beam_args(values, pipeline_root: Optional[str], existing=(),
               ask_services: bool = True) -> list:
  """`--beam-arg` after `existing`, checked for a run on this machine.

  Beam's options only: no TFX or TensorFlow loads (runners.for_local_run).
  """
  from tfx_tpu_trainer.beam import pipeline_args  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.beam import runners  # pylint: disable=g-import-not-at-top
  try:
    return runners.for_local_run(values, existing, pipeline_root,
                                 ask_services)
  except pipeline_args.BeamArgError as e:
    raise common.UsageError(str(e)) from e


# Options of the bundled pipeline only: flag -> (attribute, default).
_TAXI_OPTIONS = pipeline_choice.TaxiOptions({
    '--data-root': ('data_root', None),
    '--pipeline-name': ('pipeline_name', None),
    **pipeline_choice.STEP_OPTIONS,
    '--module-file': ('module_file', None),
    '--model': ('model', None),
    '--preprocessing-module-file': ('preprocessing_module_file', None),
    '--min-accuracy': ('min_accuracy', 0.5),
    # Default: the pipeline's (pipelines/taxi_pipeline.py).
    '--min-balanced-accuracy': ('min_balanced_accuracy', None),
    '--label-key': ('label_key', None),
    '--eval-every-steps': ('eval_every_steps', None),
    '--bulk-infer': ('bulk_infer', False),
    '--no-progress': ('show_progress', True),
    '--eval-label-key': ('eval_label_key', None),
    '--eval-prediction-key': ('eval_prediction_key', None),
    '--use-tpu/--no-use-tpu': ('use_tpu', None),
    '--tpu-name': ('tpu_name', None),
    '--tpu-zone': ('tpu_zone', None),
    '--tpu-project': ('tpu_project', None),
    '--tpu-wait-secs': ('tpu_wait_secs', None),
}, set_by_your_pipeline='its data, steps, module files and TPU')


def _existing_file(path: Optional[str], default: str, flag: str) -> str:
  path = os.path.abspath(path) if path else default
  if not os.path.isfile(path):
    raise common.UsageError(f'{flag} {path!r} does not exist or is not a file.')
  return path


def _run_custom_config(args) -> dict:
  custom_config = {
      'train_batch_size': args.train_batch_size,
      'eval_batch_size': args.eval_batch_size,
      'show_progress': args.show_progress,
  }
  if args.use_tpu is not None:
    custom_config['use_tpu'] = args.use_tpu
  if args.label_key is not None:
    if not args.label_key.strip():
      raise common.UsageError('--label-key must name the label feature, got '
                              f'{args.label_key!r}.')
    custom_config['label_key'] = args.label_key
  if args.tpu_name:
    custom_config['tpu'] = config_lib.tpu_entry(args.tpu_name, args.tpu_zone,
                                                args.tpu_project)
  elif args.tpu_zone or args.tpu_project:
    raise common.UsageError('--tpu-zone and --tpu-project need --tpu-name.')
  if args.tpu_wait_secs is not None:
    custom_config['tpu_wait_secs'] = args.tpu_wait_secs
  if args.use_tpu and not (args.tpu_name or os.environ.get('TPU_NAME')):
    raise common.UsageError('--use-tpu needs --tpu-name (or TPU_NAME set).')
  eval_every_steps = _eval_every_steps(args, _runs_on_tpu(custom_config))
  if eval_every_steps:
    custom_config['eval_every_steps'] = eval_every_steps
  return custom_config


def _runs_on_tpu(custom_config: dict) -> bool:
  """Whether the trainer will use a TPU (TrainerConfig decides `auto`)."""
  try:
    return config_lib.TrainerConfig.from_custom_config(custom_config).use_tpu
  except config_lib.ConfigError:
    return False  # _validate_run_args reports it, on the whole config.


def _eval_every_steps(args, on_tpu: bool) -> Optional[int]:
  """--eval-every-steps, or DEFAULT_EVALUATIONS spread over training.

  On a TPU the default is rounded up to whole TPU loops (checkpoints, which
  evaluations read, come only between loops: config.check_tpu_loop); none
  when that is the whole training (it evaluates at the end).
  """
  if args.eval_every_steps is None:
    every = math.ceil(args.train_steps / DEFAULT_EVALUATIONS)
    if not on_tpu:
      return every
    loop = config_lib.TrainerConfig().iterations_per_loop
    every = math.ceil(every / loop) * loop
    return every if every < args.train_steps else None
  if args.eval_every_steps > args.train_steps:
    raise common.UsageError(
        f'--eval-every-steps {args.eval_every_steps} is more than '
        f'--train-steps {args.train_steps}: training would evaluate only at '
        'the end. Use at most --train-steps, or 0 to evaluate only at the end.')
  return args.eval_every_steps or None


def _static_run_args(args) -> dict:
  """What the command line and the files say, before TFX and TensorFlow load.

  Every argument but the module files' contents and the Beam options
  (`_checked_beam_args`): the data, the output root, the config. Nothing is
  written.

  Returns:
    The run's options (`local_runner.local_options`), without the
    Evaluator's keys.
  """
  _TAXI_OPTIONS.check(args)
  if args.pipeline_name is not None:
    _check_pipeline_name(args.pipeline_name, '--pipeline-name')
  data_root = os.path.abspath(args.data_root or paths.embedded_data_root())
  if not os.path.isdir(data_root):
    raise common.UsageError(f'--data-root {data_root!r} is not a directory.')
  if not glob.glob(os.path.join(data_root, '*.csv')):
    raise common.UsageError(f'--data-root {data_root!r} holds no .csv file.')
  for flag, value in (('--min-accuracy', args.min_accuracy),
                      ('--min-balanced-accuracy', args.min_balanced_accuracy)):
    if value is not None and not 0.0 <= value <= 1.0:
      raise common.UsageError(f'{flag} must lie in [0, 1], got {value}.')
  output_root = os.path.abspath(args.output_root)
  _check_output_root(output_root)
  _check_output_outside_data(output_root, data_root)
  custom_config = _run_custom_config(args)
  try:
    config = config_lib.TrainerConfig.from_custom_config(custom_config)
    config.check_steps(args.train_steps, args.eval_steps)
  except config_lib.ConfigError as e:
    raise common.UsageError(str(e)) from e
  preprocessing_module_file = _existing_file(
      args.preprocessing_module_file, paths.PREPROCESSING_MODULE_FILE,
      '--preprocessing-module-file')
  options = dict(
      data_root=data_root,
      trainer_module_file=_existing_file(
          args.module_file,
          paths.model_module_file(args.model or paths.DEFAULT_MODEL),
          '--module-file'),
      preprocessing_module_file=preprocessing_module_file,
      train_steps=args.train_steps,
      eval_steps=args.eval_steps,
      custom_config=custom_config,
      min_accuracy=args.min_accuracy,
      bulk_infer=args.bulk_infer)
  _check_csv_files(data_root, preprocessing_module_file, args)
  if args.min_balanced_accuracy is not None:
    options['min_balanced_accuracy'] = args.min_balanced_accuracy
  if args.pipeline_name:
    options['pipeline_name'] = args.pipeline_name
  return options


def _checked_beam_args(args) -> dict:
  """The `--beam-arg`s as Beam reads them, their services asked (Beam loads).

  Returns:
    The `beam_pipeline_args` option, or nothing without `--beam-arg`.
  """
  if not args.beam_arg:
    return {}
  return {'beam_pipeline_args': _beam_args(args.beam_arg,
                                           os.path.abspath(args.output_root))}


def _checked_run_args(args, options: dict) -> dict:
  """The module files and the TPU, checked (TensorFlow and TFX load here).

  Args:
    args: the parsed arguments.
    options: from `_static_run_args`.

  Returns:
    The options, with the Evaluator's keys.
  """
  _check_modules(options['trainer_module_file'],
                 options['preprocessing_module_file'], args.label_key)
  options = options | pipeline_choice.evaluator_options(
      args, options['trainer_module_file'],
      options['preprocessing_module_file'], options['data_root'],
      options['custom_config'])
  _check_tpu_answers(config_lib.TrainerConfig.from_custom_config(
      options['custom_config']))
  return options


def _validate_run_args(args) -> dict:
  """Checks every argument before anything is written; returns the options."""
  options = _static_run_args(args) | _checked_beam_args(args)
  return _checked_run_args(args, options)


def _check_tpu_answers(config) -> None:
  """A TPU named by address answers now, not after Transform (bounded wait)."""
  if not config.use_tpu:
    return
  from tfx_tpu_trainer.training import tpu_connect  # pylint: disable=g-import-not-at-top
  try:
    tpu_connect.wait_for_tpu(config)
  except tpu_connect.TPUUnreachableError as e:
    raise common.UsageError(
        f'{e} (`run` sets the wait with --tpu-wait-secs.)') from e


def _check_output_root(output_root: str) -> None:
  """A directory this run can write: taxi run and `--pipeline` alike."""
  if os.path.exists(output_root) and not os.path.isdir(output_root):
    raise common.UsageError(f'--output-root {output_root!r} is not a directory.')
  try:
    output_root_lib.check_writable(output_root)
  except output_root_lib.OutputRootError as e:
    raise common.UsageError(str(e)) from e


def _check_output_outside_data(output_root: str, data_root: str) -> None:
  """The run's own files must not land among the CSV files it reads."""
  real_output, real_data = (os.path.realpath(output_root),
                            os.path.realpath(data_root))
  if os.path.commonpath([real_output, real_data]) == real_data:
    raise common.UsageError(
        f'--output-root {output_root!r} is inside --data-root {data_root!r}: '
        'ExampleGen reads the data folder, and the run would write its '
        'outputs (CSV files among them) into it, so this run or the next '
        'would read them as data. Choose an --output-root outside the data '
        'folder.')


def _check_pipeline_name(name: str, flag: str) -> None:
  try:
    output_root_lib.check_pipeline_name(name, flag)
  except output_root_lib.OutputRootError as e:
    raise common.UsageError(str(e)) from e


def _check_modules(module_file: str, preprocessing_module_file: str,
                   label_key: Optional[str]) -> None:
  """The preprocessing and trainer modules, before any component runs."""
  preprocessing_outputs = module_checks.check_preprocessing_module(
      preprocessing_module_file)
  module_checks.check_trainer_module(module_file, label_key,
                                     preprocessing_outputs,
                                     preprocessing_module_file)


def _check_trainer_module(module_file: str,
                          flag: str = '--module-file',
                          function_location=None) -> None:
  """Loads the trainer module and checks it against the contract.

  What the TPUTrainer executor checks first, done before any component
  runs, so a module that breaks the contract fails in seconds, not after
  Transform. (Checks that need the data, such as the label key, stay in the
  executor.)
  """
  # In a child process (check_server.py): an exit in the module's code must
  # not end this one.
  from tfx_tpu_trainer.user_code import user_module  # pylint: disable=g-import-not-at-top
  try:
    check_server.check_in_child(module_file, function_location)
  except user_module.UserModuleError as e:
    raise common.UsageError(f'{flag}: {e}') from e


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
  output_root = os.path.abspath(args.output_root)
  if args.pipeline:
    run_it, module_file = _checked_pipeline_file(args, output_root)
  else:
    run_it, module_file = _checked_taxi_pipeline(args, output_root)
  # Every module is checked: the server's memory goes back to the run.
  check_server.stop_server()
  # The process id keeps concurrent runs started in one second apart.
  log_path = os.path.join(output_root, 'logs',
                          time.strftime('run-%Y%m%d-%H%M%S') +
                          f'-{os.getpid()}.log')
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  print(f'  full log: {log_path}', flush=True)
  with common.output_to_log(log_path, enabled=not args.verbose) as console:
    print('  starting the local runner (it packages the module files '
          'first) ...', file=console, flush=True)
    try:
      # TFX and TensorFlow load here, after the arguments are checked.
      from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
      from tfx_tpu_trainer.training import progress  # pylint: disable=g-import-not-at-top
      if not args.verbose:
        _quiet_tensorflow()
      with progress.console(console):
        summary = run_it(
            local_runner,
            lambda line, **_: print(line, file=console, flush=True))
    except Exception as e:  # pylint: disable=broad-except
      from tfx_tpu_trainer.publishing import secrets  # pylint: disable=g-import-not-at-top
      sys.stderr.write(secrets.masked_exception(e))
      print(f'\nThe pipeline failed: {type(e).__name__}: '
            f'{secrets.mask_text(str(e))}\nFull log: {log_path}',
            file=console, flush=True)
      code = 1
    else:
      code = 0
  if code == 0:
    _print_summary(summary, module_file)
  leftover_threads.end_process_if_threads_left(code, 'The pipeline run')
  return code


def _checked_pipeline_file(args, output_root: str):
  """`run --pipeline`: checked, with a line at each step.

  Returns:
    (`run_it(local_runner, printer)`, the first trainer's module file).
  """
  _static_user_pipeline_args(args, output_root)
  print(f'Loading the pipeline of {args.pipeline} and checking its trainer '
        'modules (TensorFlow and TFX load first) ...', flush=True)
  # Where the pipeline writes is known once it is loaded: the checks that
  # need its root come then (_merge_beam_args).
  user_beam_args = _beam_args(args.beam_arg, pipeline_root=None)
  # The module checks run in a child of this server (check_server.py).
  check_server.start_server()
  pipeline, module_file = _prepare_user_pipeline(args, output_root,
                                                 user_beam_args)
  print(f'Running pipeline {pipeline.pipeline_info.pipeline_name!r} from '
        f'{args.pipeline}\n'
        '  outputs under '
        f'{os.path.abspath(pipeline.pipeline_info.pipeline_root)} (its '
        'pipeline root)', flush=True)

  def run_it(local_runner, printer):
    # As `python FILE` would: the pipeline's folder stays importable while
    # it runs (Transform's preprocessing_fn='models.preprocessing...').
    from tfx_tpu_trainer.user_code import user_module  # pylint: disable=g-import-not-at-top
    with user_module.first_on_path(os.path.dirname(os.path.abspath(
        args.pipeline.rpartition(':')[0]))):
      return local_runner.run_pipeline(pipeline, printer=printer)

  return run_it, module_file


def _checked_taxi_pipeline(args, output_root: str):
  """The bundled pipeline's arguments, checked, with a line at each step.

  Returns:
    (`run_it(local_runner, printer)`, the trainer module file).
  """
  options = _static_run_args(args)
  print(f'Running the taxi pipeline on {options["data_root"]}\n'
        f'  outputs under {output_root}', flush=True)
  options |= _checked_beam_args(args)
  print('  checking the module files (TensorFlow and TFX load first) ...',
        flush=True)
  # A user's trainer module is checked in a child of this server: it
  # imports TensorFlow and TFX while this process checks the other module.
  # A bundled one is checked here (module_checks.check_trainer_module).
  if not paths.is_bundled_module(options['trainer_module_file']):
    check_server.start_server()
  options = _checked_run_args(args, options)

  def run_it(local_runner, printer):
    return local_runner.run(local_runner.local_options(output_root,
                                                       **options),
                            printer=printer)

  return run_it, options['trainer_module_file']


def _static_user_pipeline_args(args, output_root: str) -> None:
  """`run --pipeline`: what is known before the file (and TFX) is imported."""
  from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
  _TAXI_OPTIONS.check(args)
  user_pipeline.check_spec(args.pipeline)
  _check_output_root(output_root)


def _prepare_user_pipeline(args, output_root: str, beam_args=()):
  """`run --pipeline`: the checked pipeline and its first trainer module.

  A pipeline without a metadata config gets SQLite under `output_root`;
  every TPUTrainer's module file is checked against the contract first, and
  the Beam components' job server and worker pool are asked to answer.
  """
  from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
  pipeline = user_pipeline.load_pipeline(args.pipeline)
  from tfx_tpu_trainer import component  # pylint: disable=g-import-not-at-top
  _check_pipeline_name(pipeline.pipeline_info.pipeline_name,
                       f'{user_pipeline.FLAG} {args.pipeline}: pipeline_name')
  _merge_beam_args(pipeline, beam_args)
  # Each Pusher's push a version of its own (two into one serving folder in
  # one second would otherwise publish one model for both).
  from tfx_tpu_trainer.publishing import pusher as pusher_lib  # pylint: disable=g-import-not-at-top
  pusher_lib.own_versions_for_stock_pushers(pipeline.components)
  module_files = []
  for trainer in component.tpu_trainers(pipeline):
    module_file = trainer.exec_properties.get('module_file')
    location = trainer.function_location
    if isinstance(module_file, str) and module_file:
      _check_trainer_module(module_file, f'{user_pipeline.FLAG}: '
                            f'TPUTrainer {trainer.id!r}: module_file')
      module_files.append(module_file)
    elif location is not None:  # run_fn= / trainer_fn=, by import path.
      _check_trainer_module(
          location.file, f'{user_pipeline.FLAG}: TPUTrainer {trainer.id!r}: '
          f'{location.argument}={location.path!r}', location)
      module_files.append(location.file)
  if pipeline.metadata_connection_config is None:
    from tfx.orchestration import metadata  # pylint: disable=g-import-not-at-top
    path = os.path.join(output_root, 'metadata',
                        pipeline.pipeline_info.pipeline_name, 'metadata.db')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pipeline.metadata_connection_config = (
        metadata.sqlite_metadata_connection_config(path))
  return pipeline, (module_files[0] if module_files else None)


def _merge_beam_args(pipeline, beam_args) -> None:
  """Each Beam component's args, then `--beam-arg`s; their services asked.

  The pipeline's own Beam args are asked too: a PortableRunner job server
  that does not answer fails the run here, not 60 s into ExampleGen.
  """
  from tfx.dsl.components.base import executor_spec  # pylint: disable=g-import-not-at-top
  asked = []
  for node in pipeline.components:
    if not isinstance(node.executor_spec, executor_spec.BeamExecutorSpec):
      continue
    spec = node.executor_spec
    # The pipeline's own portable runner gets the job defaults too.
    own = list(spec.beam_pipeline_args)
    spec.beam_pipeline_args = _beam_args(
        beam_args, pipeline.pipeline_info.pipeline_root, own,
        ask_services=(beam_args, own) not in asked)
    asked.append((beam_args, own))


def _quiet_tensorflow() -> None:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')


def _print_summary(summary, module_file: Optional[str] = None) -> None:
  """The run's outcome; with several TPUTrainers, a block for each."""
  print(f'\nPipeline finished in {summary.seconds:.0f}s.')
  trainers = summary.trainers
  if len(trainers) > 1:
    for trainer in trainers:
      print(f'  TPUTrainer {trainer.trainer_id!r}:')
      _print_trainer(trainer, indent='    ')
  else:
    _print_trainer(trainers[0] if trainers else _first_trainer(summary))
  if summary.transform_graph_path:
    print(f'  Transform graph:        {summary.transform_graph_path}')
  if summary.transformed_examples_path:
    print(f'  Transformed examples:   {summary.transformed_examples_path}')
  if (module_file and summary.transform_graph_path and
      summary.transformed_examples_path):
    print(f'  TPU preflight:          {command_name()} preflight --module-file '
          f'{shlex.quote(os.path.abspath(module_file))} --examples '
          f'{shlex.quote(summary.transformed_examples_path)} '
          f'--transform-graph {shlex.quote(summary.transform_graph_path)}')


def _first_trainer(summary):
  """The summary's own fields as one trainer's (a summary built by hand)."""
  from tfx_tpu_trainer_cli import local_runner  # pylint: disable=g-import-not-at-top
  return local_runner.TrainerSummary(
      trainer_id='', metrics=summary.trainer_metrics,
      model_path=summary.model_path, tensorboard_dir=summary.tensorboard_dir,
      report_path=summary.report_path,
      evaluator_metrics=summary.evaluator_metrics, blessed=summary.blessed,
      blessing=summary.blessing,
      inference_result_path=summary.inference_result_path,
      pusher_id=None, pushed=summary.pushed,
      pushed_model_path=summary.pushed_model_path,
      pushed_model_tag_sets=summary.pushed_model_tag_sets)


def _print_trainer(trainer, indent: str = '  ') -> None:
  """One TPUTrainer's lines: metrics, blessing, push, model and report."""
  def metrics_line(metrics):
    return ', '.join(f'{name}={value:.4g}' if isinstance(value, float) else
                     f'{name}={value}' for name, value in sorted(metrics.items()))

  def line(label, value):
    print(f'{indent}{label + ":":<24}{value}')
  line('Trainer eval metrics', metrics_line(trainer.metrics))
  if trainer.blessed is None:
    line('Blessed', 'n/a (no Evaluator)')
  else:
    line('Evaluator metrics', metrics_line(trainer.evaluator_metrics))
    line('Blessed',
         trainer.blessing or ('yes' if trainer.blessed else 'no'))
  if trainer.pushed:
    line('Pushed model', trainer.pushed_model_path)
    line('Pushed model tag sets', ', '.join(
        '{' + ', '.join(tags) + '}' for tags in trainer.pushed_model_tag_sets))
  elif trainer.blessed is False:
    line('Pushed model', 'none (the model was not blessed)')
  else:
    line('Pushed model', 'none')
  if trainer.inference_result_path:
    line('Bulk inference', trainer.inference_result_path)
  line('Trained model', trainer.model_path)
  line('TensorBoard logs',
       f'tensorboard --logdir {shlex.quote(trainer.tensorboard_dir)}')
  line('Training report', trainer.report_path or 'none (see the log)')


def command_name() -> str:
  """`tfx-tpu-trainer` where the shell finds this one; else its full path.

  So that a command the summary prints works when pasted: `make run` calls
  .venv/bin/tfx-tpu-trainer without putting .venv/bin on PATH.
  """
  installed = os.path.join(os.path.dirname(sys.executable), 'tfx-tpu-trainer')
  found = shutil.which('tfx-tpu-trainer')
  if not os.path.isfile(installed) or (
      found and os.path.realpath(found) == os.path.realpath(installed)):
    return 'tfx-tpu-trainer'
  return shlex.quote(installed)


# Modules that each define `add_parser(subparsers)` for one more subcommand;
# their handlers return an exit code and may raise UsageError.
