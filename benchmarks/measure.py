"""One benchmark measurement, run in its own process."""

import json
import os
import resource
import time
from typing import Any, Callable, Dict, List, Optional

PROCESS_START = time.time()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging

from benchmarks import data as data_lib
from benchmarks import events
# pylint: enable=g-import-not-at-top,wrong-import-position

KINDS = ('tpu_trainer', 'stock_trainer', 'keras_trainer', 'compute_limit',
         'input', 'trainer_input', 'table_input', 'disk_input',
         'stream_input', 'record_input')
TRAINER_KINDS = ('tpu_trainer', 'stock_trainer', 'keras_trainer')
INPUT_CACHES = {'input': 'serialized', 'trainer_input': 'auto',
                # The training chain by cache (the scale comparison of
                # docs/guide/performance.md, "Streaming"); record_input streams
                # with input_shuffle="record".
                'table_input': 'parsed', 'disk_input': 'disk',
                'stream_input': 'none', 'record_input': 'none'}
INPUT_SHUFFLES = {'record_input': 'record'}
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU_MODULE_FILES = {
    'tpu': os.path.join(_REPO, 'components', 'taxi_tpu_module.py'),
    'keras': os.path.join(_REPO, 'components', 'taxi_keras_module.py'),
    # TPU embedding tables, and a Keras Embedding of the same tables.
    'embeddings': os.path.join(_REPO, 'components',
                               'taxi_embedding_module.py'),
    'keras_embeddings': os.path.join(_REPO, 'benchmarks',
                                     'keras_embedding_module.py'),
}
TPU_MODULE_FILE = TPU_MODULE_FILES['tpu']
KERAS_RUN_FN_MODULE_FILE = os.path.join(_REPO, 'benchmarks',
                                        'keras_run_fn_module.py')
LABEL_KEY = 'tips_xf'  # The stock preprocessing_fn's label.
STOCK_BATCH_SIZE = 40  # Hard-coded in taxi_utils.trainer_fn.
INPUT_SAMPLE_BATCHES = 100  # Batches per input-rate sample (as the hooks).
INPUT_WARMUP_BATCHES = 20
LIMIT_SAMPLE_STEPS = 100  # Steps per compute-limit sample.


def _exec_properties(module_file: str, train_steps: int, eval_steps: int,
                     custom_config: Any) -> Dict[str, Any]:
  # pylint: disable=g-import-not-at-top
  from tfx.proto import trainer_pb2
  from tfx.utils import proto_utils
  # pylint: enable=g-import-not-at-top
  return {
      'module_file': module_file,
      'train_args': proto_utils.proto_to_json(
          trainer_pb2.TrainArgs(num_steps=train_steps)),
      'eval_args': proto_utils.proto_to_json(
          trainer_pb2.EvalArgs(num_steps=eval_steps)),
      'custom_config': json.dumps(custom_config),
  }


def _output_dict(output_dir: str) -> Dict[str, List[Any]]:
  # pylint: disable-next=g-import-not-at-top
  from tfx.types import standard_artifacts
  model = standard_artifacts.Model()
  model.uri = os.path.join(output_dir, 'model')
  model_run = standard_artifacts.ModelRun()
  model_run.uri = os.path.join(output_dir, 'model_run')
  return {'model': [model], 'model_run': [model_run]}


def stock_module_file(batch_size: int, output_dir: str) -> str:
  """taxi_utils.py, or a copy of it training at `batch_size`."""
  path = data_lib.stock_taxi_utils_path()
  if batch_size == STOCK_BATCH_SIZE:
    return path
  with open(path) as f:
    source = f.read()
  for key in ('train_batch_size', 'eval_batch_size'):
    line = f'  {key} = {STOCK_BATCH_SIZE}\n'
    if source.count(line) != 1:
      raise RuntimeError(f'{path} no longer sets {line.strip()!r}.')
    source = source.replace(line, f'  {key} = {batch_size}\n')
  copy = os.path.join(output_dir, f'taxi_utils_batch{batch_size}.py')
  with open(copy, 'w') as f:
    f.write(source)
  return copy


def tpu_trainer_config(batch_size: int,
                       overrides: Optional[Dict[str, Any]] = None
                      ) -> Dict[str, Any]:
  """The TPUTrainer custom_config of the benchmark (plus `overrides`)."""
  config = {
      'label_key': LABEL_KEY,
      'train_batch_size': batch_size,
      'eval_batch_size': batch_size,
      'use_tpu': False,
  }
  config.update(overrides or {})
  return config


def run_trainer(kind: str, spec: Dict[str, Any], batch_size: int,
                train_steps: int, eval_steps: int, output_dir: str,
                config_overrides: Optional[Dict[str, Any]] = None,
                module: str = 'tpu',
                steps_per_execution: int = 1,
                pipeline_run: bool = False) -> Dict[str, Any]:
  """Runs one trainer executor's `Do()` and reads its step rates.

  Args:
    kind: 'tpu_trainer', 'stock_trainer' or 'keras_trainer'.
    spec: the data spec (benchmarks.data).
    batch_size: the train and eval batch size.
    train_steps: train_args.num_steps.
    eval_steps: eval_args.num_steps.
    output_dir: where the model and model_run artifacts go.
    config_overrides: entries merged into TPUTrainer's custom_config.
    module: TPUTrainer's module file (a key of TPU_MODULE_FILES).
    steps_per_execution: the native-Keras Trainer's model.compile setting.
    pipeline_run: TPUTrainer only: run `Do()` as a pipeline's execution
      (`pipeline_context`), so it trains in a resumable checkpoint directory
      under `output_dir` (where `input_cache="disk"` writes its snapshot).

  Returns:
    The measurement: wall time of Do() and its parts; the event-file step
    rates where the trainer writes them (the estimators; not model.fit).
  """
  # pylint: disable=g-import-not-at-top
  if kind == 'tpu_trainer':
    from tfx_tpu_trainer import executor as executor_lib
    executor_class = executor_lib.Executor
    module_file = TPU_MODULE_FILES[module]
    custom_config = tpu_trainer_config(batch_size, config_overrides)
    if pipeline_run:
      custom_config.setdefault('checkpoint_dir',
                               os.path.join(os.path.abspath(output_dir),
                                            'checkpoints'))
  elif kind == 'keras_trainer':
    from tfx.components.trainer import executor as executor_lib
    executor_class = executor_lib.GenericExecutor
    module_file = KERAS_RUN_FN_MODULE_FILE
    custom_config = {'batch_size': batch_size, 'label_key': LABEL_KEY,
                     'steps_per_execution': steps_per_execution}
  else:
    from tfx.components.trainer import executor as executor_lib
    executor_class = executor_lib.Executor
    module_file = stock_module_file(batch_size, output_dir)
    custom_config = None
  # pylint: enable=g-import-not-at-top
  imported = time.time()

  input_dict = data_lib.parse_input_dict(spec)
  output_dict = _output_dict(output_dir)
  exec_properties = _exec_properties(module_file, train_steps, eval_steps,
                                     custom_config)
  executor = (executor_class(pipeline_context(output_dir)) if pipeline_run
              else executor_class())
  start = time.time()
  executor.Do(input_dict, output_dict, exec_properties)
  end = time.time()

  model_run_dir = output_dict['model_run'][0].uri
  do_seconds = end - start
  result = {
      'do_seconds': do_seconds,
      'import_seconds': imported - PROCESS_START,
      **model_sizes(model_run_dir, output_dict['model'][0].uri),
  }
  if kind == 'tpu_trainer':
    result['final_metrics'] = _final_metrics(model_run_dir)
  samples = events.step_rates(model_run_dir)
  if not samples:
    # model.fit writes no step rates, and a short estimator run may end
    # before its first sample: the external rate needs only the wall time.
    logging.warning('No %s scalars under %s.', events.STEP_RATE_TAG,
                    model_run_dir)
    return result
  windows = events.window_rates(samples)
  steps_per_sec = events.median_after_warmup(windows)
  train_seconds = train_steps / steps_per_sec
  result.update({
      'steps_per_sec': steps_per_sec,
      'examples_per_sec': steps_per_sec * batch_size,
      'window_steps_per_sec': windows,
      'step_rate_sample_count': len(samples),
      'step_rate_samples': [[sample.step, sample.value] for sample in samples],
      'train_seconds_at_median_rate': train_seconds,
      'overhead_seconds': do_seconds - train_seconds,
      'event_dir': os.path.dirname(samples[0].path),
  })
  window = events.training_window(model_run_dir)
  if window is not None:
    first, last = window
    result['phases'] = {
        'before_first_step_seconds': first - start,
        'training_loop_seconds': last - first,
        'after_last_step_seconds': end - last,
    }
    eval_end = events.last_eval_time(model_run_dir)
    if eval_end is not None and eval_end >= last:
      result['phases'].update(
          last_step_to_eval_end_seconds=eval_end - last,
          eval_end_to_do_end_seconds=end - eval_end)
  return result


def _bytes_under(path: str) -> int:
  return sum(os.path.getsize(os.path.join(directory, name))
             for directory, _, names in os.walk(path) for name in names)


def model_sizes(model_run_dir: str, model_dir: str) -> Dict[str, int]:
  """Bytes of the last checkpoint in model_run and of the exported model."""
  # pylint: disable-next=g-import-not-at-top
  import tensorflow as tf
  sizes = {'export_bytes': _bytes_under(model_dir)}
  checkpoint = tf.train.latest_checkpoint(model_run_dir)
  if checkpoint:
    sizes['checkpoint_bytes'] = sum(
        os.path.getsize(path) for path in tf.io.gfile.glob(checkpoint + '.*'))
  return sizes


def _final_metrics(model_run_dir: str) -> Optional[Dict[str, Any]]:
  """The final evaluation TPUTrainer wrote to model_run, if any."""
  from tfx_tpu_trainer.publishing import metrics  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_run_dir, metrics.METRICS_FILE_NAME)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def pipeline_context(output_dir: str):
  """An executor context as a pipeline run gives it (one run per dir)."""
  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_executor
  from tfx.proto.orchestration import pipeline_pb2
  # pylint: enable=g-import-not-at-top
  return base_executor.BaseExecutor.Context(
      pipeline_info=pipeline_pb2.PipelineInfo(id='benchmark'),
      pipeline_node=pipeline_pb2.PipelineNode(
          node_info=pipeline_pb2.NodeInfo(id='TPUTrainer')),
      pipeline_run_id=os.path.basename(os.path.abspath(output_dir)))


def run_input(spec: Dict[str, Any], batch_size: int, batches: int,
              output_dir: str, cache: str,
              shuffle: str = 'window') -> Dict[str, Any]:
  """Drains TPUTrainer's default training input for `batches` batches.

  The dataset is `input_fns.make_input_fn(...)({'batch_size': B})` over the
  train split, built as the executor builds it (transformed schema, the
  pipeline's DataAccessor) with the given `cache` mode. Batches are pulled inside a `tf.function` loop,
  `INPUT_SAMPLE_BATCHES` per sample, so per-batch Python overhead does not
  count: the rate is the input pipeline's own.

  Args:
    spec: the data spec (benchmarks.data).
    batch_size: examples per batch.
    batches: batches to time (after `INPUT_WARMUP_BATCHES` untimed ones).
    output_dir: a working directory (unused but for symmetry and logs).
    cache: the chain's input_cache mode ("disk" writes its snapshot under
      `output_dir`).
    shuffle: the chain's input_shuffle mode.

  Returns:
    The measurement: per-sample batch rates, examples/s.
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from tfx.components.trainer import fn_args_utils
  from tfx_tpu_trainer.data import input_fns
  from tfx_tpu_trainer.data import schemas as schemas_lib
  # pylint: enable=g-import-not-at-top
  imported = time.time()

  input_dict = data_lib.parse_input_dict(spec)
  fn_args = fn_args_utils.get_common_fn_args(
      input_dict, _exec_properties(TPU_MODULE_FILE, batches, 1, None))
  schemas = schemas_lib.load_schemas(fn_args.schema_path,
                                     fn_args.transform_graph_path)
  input_fn = input_fns.make_input_fn(
      fn_args.train_files,
      data_accessor=fn_args.data_accessor,
      schema=schemas.examples,
      label_key=LABEL_KEY,
      training=True,
      repeat=True,
      cache=cache,
      shuffle=shuffle,
      cache_dir=os.path.join(output_dir, 'input_cache'))
  dataset = input_fn({'batch_size': batch_size})
  iterator = iter(dataset)

  @tf.function
  def drain(count):
    examples = tf.constant(0, tf.int64)
    for _ in tf.range(count):
      _, label = next(iterator)
      examples += tf.cast(tf.shape(label)[0], tf.int64)
    return examples

  start = time.time()
  drain(tf.constant(INPUT_WARMUP_BATCHES)).numpy()
  built = time.time()
  samples = []
  total_examples = 0
  for _ in range(max(1, batches // INPUT_SAMPLE_BATCHES)):
    sample_start = time.perf_counter()
    examples = int(drain(tf.constant(INPUT_SAMPLE_BATCHES)).numpy())
    elapsed = time.perf_counter() - sample_start
    total_examples += examples
    samples.append(examples / elapsed)
  if total_examples != batch_size * INPUT_SAMPLE_BATCHES * len(samples):
    raise RuntimeError(f'Batches were not all of size {batch_size}.')
  examples_per_sec = events.median_after_warmup(samples)
  return {
      'steps_per_sec': examples_per_sec / batch_size,
      'examples_per_sec': examples_per_sec,
      'window_steps_per_sec': [s / batch_size for s in samples],
      'setup_seconds': built - start,
      'import_seconds': imported - PROCESS_START,
  }


def _one_batch(spec: Dict[str, Any], batch_size: int, steps: int):
  """One batch (features, label) of the transformed training data (eager)."""
  # pylint: disable=g-import-not-at-top
  from tfx.components.trainer import fn_args_utils
  from tfx_tpu_trainer.data import input_fns
  from tfx_tpu_trainer.data import schemas as schemas_lib
  # pylint: enable=g-import-not-at-top
  input_dict = data_lib.parse_input_dict(spec)
  fn_args = fn_args_utils.get_common_fn_args(
      input_dict, _exec_properties(TPU_MODULE_FILE, steps, 1, None))
  schemas = schemas_lib.load_schemas(fn_args.schema_path,
                                     fn_args.transform_graph_path)
  dataset = input_fns.make_input_fn(
      fn_args.train_files, data_accessor=fn_args.data_accessor,
      schema=schemas.examples, label_key=LABEL_KEY, training=True,
      repeat=True, cache='serialized')({'batch_size': batch_size})
  return next(iter(dataset))


def _limit_result(timed: Callable[[int], float], batch_size: int, steps: int,
                  short_steps: int, imported: float) -> Dict[str, Any]:
  """Rates of a compute-limit loop `timed(count) -> seconds`."""
  timed(INPUT_WARMUP_BATCHES)  # Traces or builds, and warms up.
  short_seconds = timed(short_steps)
  long_seconds = timed(steps)
  samples = [LIMIT_SAMPLE_STEPS * batch_size / timed(LIMIT_SAMPLE_STEPS)
             for _ in range(5)]
  external = ((steps - short_steps) * batch_size /
              (long_seconds - short_seconds))
  return {
      'external_examples_per_sec': external,
      'examples_per_sec': events.median(samples),
      'steps_per_sec': events.median(samples) / batch_size,
      'window_steps_per_sec': [s / batch_size for s in samples],
      'short_seconds': short_seconds,
      'long_seconds': long_seconds,
      'import_seconds': imported - PROCESS_START,
  }


def run_compute_limit(spec: Dict[str, Any], batch_size: int, steps: int,
                      short_steps: int, module: str = 'keras'
                     ) -> Dict[str, Any]:
  """A module's model's own step rate: no input, no hooks, no estimator.

  `module='keras'`: `build_keras_model` (the module TPUTrainer and the
  native-Keras Trainer train) is called eagerly; one batch of the
  transformed training data becomes constants; the train step (forward with
  training=True, the compiled binary cross-entropy, gradients, the compiled
  Adam's `apply_gradients`) runs `n` times in a `tf.function` loop.
  `module='tpu'`: the model_fn module's `model_fn` (TRAIN, use_tpu=False)
  is called in the body of a `tf.while_loop` of `n` iterations on the same
  constant batch, and its train op runs each iteration, in a plain session
  (the shape of TPUTrainer's host loop without its input and hooks).

  Like the trainers, the rate is taken from the wall time of two step counts
  (after a warm-up call that traces or builds the loop): (steps -
  short_steps) * batch / (t(steps) - t(short_steps)); the median of samples
  of LIMIT_SAMPLE_STEPS steps is reported beside it.

  Args:
    spec: the data spec (benchmarks.data).
    batch_size: examples per step.
    steps: the long step count.
    short_steps: the short step count.
    module: 'keras' or 'tpu' (a key of TPU_MODULE_FILES).

  Returns:
    The measurement.
  """
  # pylint: disable=g-import-not-at-top
  import importlib
  import sys
  import tensorflow as tf
  from tfx_tpu_trainer.model_fn import keras_adapter
  sys.path.insert(0, os.path.dirname(TPU_MODULE_FILES[module]))
  user_module = importlib.import_module(
      os.path.splitext(os.path.basename(TPU_MODULE_FILES[module]))[0])
  # pylint: enable=g-import-not-at-top
  imported = time.time()
  features, label = _one_batch(spec, batch_size, steps)
  if module == 'tpu':
    return _model_fn_limit(tf, user_module.model_fn, features, label,
                           batch_size, steps, short_steps, imported)

  model = user_module.build_keras_model({})
  inputs = {name: tf.constant(value) for name, value in
            keras_adapter.conform_features(model, features).items()}
  labels = tf.constant(tf.reshape(tf.cast(label, tf.float32), [-1, 1]))
  loss_fn = tf.keras.losses.BinaryCrossentropy()
  optimizer = model.optimizer
  variables = model.trainable_variables

  @tf.function
  def train_loop(count):
    loss = tf.constant(0.0)
    for _ in tf.range(count):
      with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(inputs, training=True))
      optimizer.apply_gradients(zip(tape.gradient(loss, variables),
                                    variables))
    return loss

  def timed(count):
    begin = time.perf_counter()
    train_loop(tf.constant(count)).numpy()
    return time.perf_counter() - begin

  return _limit_result(timed, batch_size, steps, short_steps, imported)


def _model_fn_limit(tf, model_fn, features, label, batch_size: int,
                    steps: int, short_steps: int,
                    imported: float) -> Dict[str, Any]:
  """The model_fn's train op in a while loop on one constant batch."""
  graph = tf.Graph()
  with graph.as_default():
    constant_features = {name: tf.constant(value.numpy())
                         for name, value in features.items()}
    constant_label = tf.constant(label.numpy())
    tf.compat.v1.train.get_or_create_global_step()
    count = tf.compat.v1.placeholder(tf.int32, shape=[], name='count')

    def body(index, loss):
      del loss
      spec = model_fn(constant_features, constant_label,
                      tf.estimator.ModeKeys.TRAIN, {'use_tpu': False})
      with tf.control_dependencies([spec.train_op]):
        return index + 1, tf.identity(tf.cast(spec.loss, tf.float32))

    _, loss = tf.while_loop(lambda index, loss: index < count, body,
                            [tf.constant(0), tf.constant(0.0)],
                            parallel_iterations=1)
    initialize = tf.group(tf.compat.v1.global_variables_initializer(),
                          tf.compat.v1.local_variables_initializer(),
                          tf.compat.v1.tables_initializer())
  session = tf.compat.v1.Session(graph=graph)
  session.run(initialize)

  def timed(n):
    begin = time.perf_counter()
    session.run(loss, feed_dict={count: n})
    return time.perf_counter() - begin

  try:
    return _limit_result(timed, batch_size, steps, short_steps, imported)
  finally:
    session.close()


_KIND = flags.DEFINE_enum('kind', None, KINDS, 'What to measure.')
_DATA_SPEC = flags.DEFINE_string('data_spec', None, 'benchmarks.data JSON.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 40, 'Batch size.')
_TRAIN_STEPS = flags.DEFINE_integer('train_steps', 3000,
                                    'Training steps (input: batches).')
_EVAL_STEPS = flags.DEFINE_integer('eval_steps', 100, 'Evaluation steps.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Output directory.')
_RESULT = flags.DEFINE_string('result', None, 'Where to write the result.')
_TPU_TRAINER_CONFIG = flags.DEFINE_string(
    'tpu_trainer_config', '{}', 'JSON dict merged into the TPUTrainer '
    'custom_config (for A/B runs, e.g. {"save_checkpoints_steps": 1000}).')
_MODULE = flags.DEFINE_enum('module', 'tpu', list(TPU_MODULE_FILES),
                            "TPUTrainer's module file (compute_limit: whose "
                            'model).')
_STEPS_PER_EXECUTION = flags.DEFINE_integer(
    'steps_per_execution', 1, "The native-Keras Trainer's "
    'model.compile(steps_per_execution=...).')
_PIPELINE_RUN = flags.DEFINE_boolean(
    'pipeline_run', False, 'tpu_trainer: run Do() as a pipeline execution '
    '(resumable checkpoints under --output_dir; what input_cache="disk" '
    'needs).')
_SHORT_STEPS = flags.DEFINE_integer(
    'short_steps', 100, 'compute_limit: the short step count.')


def main(argv: List[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  with open(_DATA_SPEC.value) as f:
    spec = json.load(f)
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  if _KIND.value in INPUT_CACHES:
    result = run_input(spec, _BATCH_SIZE.value, _TRAIN_STEPS.value,
                       _OUTPUT_DIR.value, INPUT_CACHES[_KIND.value],
                       INPUT_SHUFFLES.get(_KIND.value, 'window'))
  elif _KIND.value == 'compute_limit':
    result = run_compute_limit(spec, _BATCH_SIZE.value, _TRAIN_STEPS.value,
                               _SHORT_STEPS.value, module=_MODULE.value)
  else:
    result = run_trainer(_KIND.value, spec, _BATCH_SIZE.value,
                         _TRAIN_STEPS.value, _EVAL_STEPS.value,
                         _OUTPUT_DIR.value,
                         json.loads(_TPU_TRAINER_CONFIG.value),
                         module=_MODULE.value,
                         steps_per_execution=_STEPS_PER_EXECUTION.value,
                         pipeline_run=_PIPELINE_RUN.value)
  result.update(
      kind=_KIND.value,
      batch_size=_BATCH_SIZE.value,
      train_steps=_TRAIN_STEPS.value,
      self_max_rss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      process_seconds=time.time() - PROCESS_START)
  with open(_RESULT.value, 'w') as f:
    json.dump(result, f, indent=2)
  logging.info('Measurement %s: %s', _KIND.value, result)


if __name__ == '__main__':
  flags.mark_flags_as_required(['kind', 'data_spec', 'output_dir', 'result'])
  app.run(main)
