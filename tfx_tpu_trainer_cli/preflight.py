"""`tfx-tpu-trainer preflight`: checks on CPU that a module is TPU-ready."""

import dataclasses
import glob
import json
import os
import sys
from typing import Any, Dict, List, Optional

from tfx_tpu_trainer_cli import common

EXIT_READY = 0
EXIT_NOT_READY = 1


def add_parser(subparsers) -> None:
  """Adds the `preflight` subcommand."""
  parser = subparsers.add_parser(
      'preflight',
      help='Check on CPU that a trainer module is TPU-ready.',
      description=(
          'Builds the train, eval and export steps of a TPUTrainer module as '
          'a TPU would, XLA-compiles and runs each once on a sample batch '
          '(on CPU), and reports what a TPU would reject: dynamic shapes, '
          'ops XLA cannot compile, float64, strings, batch sizes that do not '
          'divide by the shard count, a missing CrossShardOptimizer, v1 '
          'summaries, eval metric tensors without a batch axis.'))
  parser.add_argument('--module-file', required=True,
                      help='The trainer module (model_fn or '
                      'build_keras_model).')
  parser.add_argument('--examples', default=None,
                      help='An examples artifact directory (e.g. Transform\'s '
                      'transformed_examples) with Split-<split> TFRecords.')
  parser.add_argument('--split', default='train',
                      help='The split of --examples to sample (default: '
                      'train).')
  schema = parser.add_mutually_exclusive_group()
  schema.add_argument('--transform-graph', default=None,
                      help='The Transform graph artifact directory: parses '
                      '--examples, or shapes a zero sample without them; the '
                      'export is checked with the default serving input.')
  schema.add_argument('--schema', default=None,
                      help='A schema.pbtxt (or a SchemaGen artifact '
                      'directory) of the examples, when there is no transform '
                      'graph.')
  parser.add_argument('--custom-config', default=None,
                      help='The TPUTrainer custom_config as a JSON object '
                      '(train_batch_size, num_shards, params, label_key, ...).')
  parser.add_argument('--num-shards', type=common.positive_int, default=None,
                      help='TPU shards to check for (default: custom_config '
                      'num_shards, else 8).')
  parser.add_argument('--json', action='store_true',
                      help='Print the report as JSON.')
  parser.add_argument('--verbose', action='store_true',
                      help='Show the TensorFlow log.')
  parser.set_defaults(handler=_preflight)


def _custom_config(text: Optional[str]) -> Dict[str, Any]:
  if text is None:
    return {}
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise common.UsageError(f'--custom-config is not valid JSON: {e}') from e
  if not isinstance(value, dict):
    raise common.UsageError(
        f'--custom-config must be a JSON object, got {type(value).__name__}.')
  return value


def _trainer_config(custom_config: Dict[str, Any]):
  """Validates custom_config (as the executor does) and sets use_tpu."""
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  try:
    # Divisibility by num_shards is a preflight finding, not a usage error.
    config = config_lib.TrainerConfig.from_custom_config(
        dict(custom_config, use_tpu=False), environ={})
  except config_lib.ConfigError as e:
    raise common.UsageError(str(e)) from e
  return dataclasses.replace(config, use_tpu=True)


def _schema_file(path: str) -> str:
  if os.path.isdir(path):
    candidates = glob.glob(os.path.join(path, '*.pbtxt'))
    if len(candidates) != 1:
      raise common.UsageError(
          f'--schema {path!r} is a directory without exactly one .pbtxt file.')
    return candidates[0]
  if not os.path.isfile(path):
    raise common.UsageError(f'--schema {path!r} does not exist.')
  return path


def _check_paths(args) -> Dict[str, Optional[str]]:
  module_file = os.path.abspath(args.module_file)
  if not os.path.isfile(module_file):
    raise common.UsageError(
        f'--module-file {args.module_file!r} does not exist or is not a file.')
  examples = None
  if args.examples:
    examples = os.path.abspath(args.examples)
    split_dir = os.path.join(examples, f'Split-{args.split}')
    if not os.path.isdir(split_dir):
      found = sorted(os.path.basename(p) for p in glob.glob(
          os.path.join(examples, 'Split-*'))) if os.path.isdir(examples) else []
      raise common.UsageError(
          f'--examples {args.examples!r} has no Split-{args.split} directory '
          f'(found: {found or "nothing"}); pass an examples artifact '
          'directory.')
  transform_graph = None
  if args.transform_graph:
    transform_graph = os.path.abspath(args.transform_graph)
    if not os.path.isdir(os.path.join(transform_graph,
                                      'transformed_metadata')):
      raise common.UsageError(
          f'--transform-graph {args.transform_graph!r} is not a Transform '
          'graph artifact directory (no transformed_metadata).')
  schema = _schema_file(os.path.abspath(args.schema)) if args.schema else None
  return dict(module_file=module_file, examples=examples,
              transform_graph=transform_graph, schema=schema)


def _record_files(split_dir: str) -> List[str]:
  files = sorted(p for p in glob.glob(os.path.join(split_dir, '*'))
                 if os.path.isfile(p))
  if not files:
    raise common.UsageError(f'{split_dir} holds no TFRecord file.')
  return files


def _infer_schema(files: List[str]):
  """A schema from the feature types and lengths of the first example."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  compression = 'GZIP' if files[0].endswith('.gz') else ''
  record = next(iter(tf.data.TFRecordDataset(files[:1], compression)))
  example = tf.train.Example.FromString(record.numpy())
  schema = schema_pb2.Schema()
  for name, feature in sorted(example.features.feature.items()):
    kind = feature.WhichOneof('kind')
    values = getattr(feature, kind).value if kind else []
    schema.feature.add(
        name=name,
        type={'int64_list': schema_pb2.INT, 'float_list': schema_pb2.FLOAT,
              'bytes_list': schema_pb2.BYTES}.get(kind, schema_pb2.BYTES),
        presence=schema_pb2.FeaturePresence(min_fraction=1.0),
        shape=schema_pb2.FixedShape(dim=[schema_pb2.FixedShape.Dim(
            size=max(1, len(values)))]))
  return schema


def _examples_input_fn(examples: str, split: str, run):
  """The TPU input (module's or default) over one split of an artifact dir."""
  from tfx.components.trainer import fn_args_utils  # pylint: disable=g-import-not-at-top
  from tfx.components.util import tfxio_utils  # pylint: disable=g-import-not-at-top
  from tfx.types import artifact_utils  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  artifact = standard_artifacts.Examples()
  artifact.uri = examples
  artifact.split_names = artifact_utils.encode_split_names([
      os.path.basename(p)[len('Split-'):]
      for p in sorted(glob.glob(os.path.join(examples, 'Split-*')))
  ])
  files = _record_files(os.path.join(examples, f'Split-{split}'))
  accessor = fn_args_utils.DataAccessor(
      tf_dataset_factory=tfxio_utils.get_tf_dataset_factory_from_artifact(
          [artifact], []),
      record_batch_factory=tfxio_utils.get_record_batch_factory_from_artifact(
          [artifact], []),
      data_view_decode_fn=None)
  return run.input_fn(
      [os.path.join(examples, f'Split-{split}', '*')], accessor,
      training=True, repeat=True, cache='none',
      schema=None if run.schemas else _infer_schema(files))


def _sample(paths, args, run, batch_size):
  """The sample batch, from the best source at hand (module docstring)."""
  from tfx_tpu_trainer.data import schemas as schemas_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.model_fn import keras_adapter  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.preflight import sample as preflight_sample  # pylint: disable=g-import-not-at-top
  module, schemas, params = run.module, run.schemas, run.params
  if paths['examples']:
    input_fn = _examples_input_fn(paths['examples'], args.split, run)
    which = 'module' if module.input_fn else 'default'
    return preflight_sample.from_input_fn(
        input_fn, params, batch_size,
        f'first batch of the {which} input_fn over '
        f'{paths["examples"]}/Split-{args.split}')
  if schemas is not None:
    where = paths['transform_graph'] or paths['schema']
    try:
      feature_spec = schemas_lib.feature_spec(schemas.examples)
    except ValueError as e:
      raise common.UsageError(
          f'The schema of {where} has no feature spec: {e}') from e
    return preflight_sample.from_feature_spec(
        feature_spec, run.label_key, batch_size,
        f'zeros shaped by the feature spec of {where}')
  if module.input_fn is not None:

    def input_fn(input_params):
      return module.input_fn(file_pattern=[], data_accessor=None, schema=None,
                             params=input_params)

    try:
      return preflight_sample.from_input_fn(
          input_fn, params, batch_size,
          "first batch of the module's input_fn (called without files)")
    except Exception as e:  # pylint: disable=broad-except
      raise common.UsageError(
          f"The module's input_fn needs examples ({type(e).__name__}: {e}); "
          'pass --examples DIR (and --transform-graph or --schema).') from e
  if module.model_fn is None:
    template = keras_adapter.build_template(
        module.build_keras_model,
        dict(params, batch_size=batch_size, use_tpu=True))
    return preflight_sample.from_keras_model(
        template.model, batch_size,
        'zeros shaped by the Keras model inputs and outputs')
  raise common.UsageError(
      'preflight needs a sample batch for a model_fn module: pass --examples '
      'DIR (an examples artifact directory), or --transform-graph / --schema '
      'to synthesize one.')


def _load_module(module_file: str):
  """The trainer module; a package's module by its name (`models.x.model`).

  A module of a package (the TFX templates' `models/keras_model/model.py`)
  imports its siblings through the package, so it is imported as the
  executor imports `run_fn='models.keras_model.model.run_fn'`: by name,
  the package's folder first on sys.path.
  """
  from tfx_tpu_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.user_code import function_paths  # pylint: disable=g-import-not-at-top
  found = function_paths.package_module_name(module_file)
  if found is None:
    return user_module.load_user_module({'module_file': module_file})
  name, root = found
  with user_module.first_on_path(root):
    return user_module.load_user_module(
        {'module_path': name, user_module.USER_MODULE_FILE_KEY: module_file})


def _print_progress(line: str) -> None:
  """Progress on stderr (stdout holds the report, or its JSON)."""
  print(f'TPU preflight: {line}', file=sys.stderr, flush=True)


def _not_ready(message: str) -> int:
  print(f'TPU preflight: NOT TPU-ready\n  ERROR   {message}')
  return EXIT_NOT_READY


def _preflight(args) -> int:
  """Validates the arguments, runs the preflight, prints the report."""
  paths = _check_paths(args)
  config = _trainer_config(_custom_config(args.custom_config))
  # What it does, at once (stderr: stdout holds the report alone).
  print(f'TPU preflight of {paths["module_file"]}: TensorFlow loads, then one '
        'step of each mode is built and compiled with XLA ...',
        file=sys.stderr, flush=True)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not args.verbose:
    tf.get_logger().setLevel('ERROR')
    logging.set_verbosity(logging.ERROR)
  from tfx_tpu_trainer import errors  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import prepare  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.data import schemas as schemas_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.preflight import checks as preflight  # pylint: disable=g-import-not-at-top
  try:
    module = _load_module(paths['module_file'])
    schemas = None
    if paths['schema'] or paths['transform_graph']:
      schemas = schemas_lib.load_schemas(paths['schema'],
                                         paths['transform_graph'])
    run = prepare.prepare_run(config, module, schemas)
    num_shards, _ = preflight.resolve_num_shards(config, args.num_shards)
    batch_size = preflight.per_shard_batch_size(config, num_shards)
    sample = _sample(paths, args, run, batch_size)
  except errors.TPUTrainerError as e:
    return _not_ready(str(e))
  report = preflight.run_preflight(
      run.model_fn, config, run.params, sample, module.module_file,
      num_shards=args.num_shards,
      serving_input_receiver_fn=run.serving_input_receiver_fn,
      embedding=run.embedding,
      progress=_print_progress)
  print(report.to_json() if args.json else report.format(), flush=True)
  return EXIT_READY if report.ok else EXIT_NOT_READY
