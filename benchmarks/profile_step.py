"""Where a training step's time goes: the same model, step by step removed."""

import os
import statistics
import sys
import time
from typing import Callable, Dict, List

from absl import app
from absl import flags

from benchmarks import data as data_lib
from benchmarks import measure

# --data_spec, --module (default tpu) and --batch_size are benchmarks.measure's.
_DATA_SPEC = measure._DATA_SPEC  # pylint: disable=protected-access
_MODULE = measure._MODULE  # pylint: disable=protected-access
_BATCH_SIZE = measure._BATCH_SIZE  # pylint: disable=protected-access
_STEPS = flags.DEFINE_integer('steps', 1000, 'Steps per timed run.')
_LOOP = flags.DEFINE_integer('loop', 100, 'Steps per session.run (loops).')


def _median_us(runners: Dict[str, Callable[[int], None]], steps: int,
               rounds: int = 5) -> Dict[str, float]:
  """Median microseconds per step of each runner, timed in turns."""
  for run in runners.values():
    run(max(20, steps // 10))
  times = {name: [] for name in runners}
  for _ in range(rounds):
    for name, run in runners.items():
      begin = time.perf_counter()
      run(steps)
      times[name].append((time.perf_counter() - begin) / steps * 1e6)
  return {name: statistics.median(values) for name, values in times.items()}


def profile(spec, module: str, batch_size: int, steps: int,
            loop: int) -> Dict[str, float]:
  """Microseconds per step of each variant: the median of 5 timed runs of
`steps` steps after a warm-up, the variants taking turns (so a busy spell of
a shared machine hits them all)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from tensorflow import estimator as tf_estimator
  from tfx.components.trainer import fn_args_utils
  from tfx_tpu_trainer.training import host_loop
  from tfx_tpu_trainer.data import input_fns
  from tfx_tpu_trainer.user_code import user_module
  from tfx_tpu_trainer.data import schemas as schemas_lib
  from tfx_tpu_trainer.model_fn import keras_adapter
  from tfx_tpu_trainer.model_fn import keras_compile
  sys.path.insert(0, os.path.dirname(measure.TPU_MODULE_FILES['keras']))
  import taxi_keras_module
  import taxi_tpu_module
  # pylint: enable=g-import-not-at-top

  fn_args = fn_args_utils.get_common_fn_args(
      data_lib.parse_input_dict(spec),
      measure._exec_properties(measure.TPU_MODULE_FILE, steps, 1, None))  # pylint: disable=protected-access
  schemas = schemas_lib.load_schemas(fn_args.schema_path,
                                     fn_args.transform_graph_path)

  def make_input_fn(cache):
    return input_fns.make_input_fn(
        fn_args.train_files, data_accessor=fn_args.data_accessor,
        schema=schemas.examples, label_key=measure.LABEL_KEY, training=True,
        repeat=True, cache=cache)

  features, label = next(iter(make_input_fn('serialized')(
      {'batch_size': batch_size})))
  features = {name: value.numpy() for name, value in features.items()}
  label = label.numpy()
  results = {}

  if module == 'keras':
    model_fn = keras_adapter.make_keras_model_fn(user_module.ModuleFunction(
        'build_keras_model', 'taxi_keras_module.py',
        taxi_keras_module.build_keras_model))
  else:
    model_fn = taxi_tpu_module.model_fn

  params = {'batch_size': batch_size, 'use_tpu': False}
  train = tf_estimator.ModeKeys.TRAIN

  def graph_variant(build) -> Callable[[int], None]:
    graph = tf.Graph()
    with graph.as_default():
      tf.compat.v1.train.get_or_create_global_step()
      fetch, count, initializers = build()
      session = tf.compat.v1.Session(graph=graph)
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()] + initializers)
    return fetch, count, session

  def constant_batch():
    return ({name: tf.constant(value) for name, value in features.items()},
            tf.constant(label))

  def single():
    spec = model_fn(*constant_batch(), train, dict(params))
    return spec.train_op, None, []

  fetch, _, session = graph_variant(single)

  def run_single(n, fetch=fetch, session=session):
    for _ in range(n):
      session.run(fetch)

  results['graph_run'] = run_single

  def looped(from_input):
    def build():
      if from_input:
        dataset = (make_input_fn('auto')(dict(params))
                   if from_input == 'chain' else
                   tf.data.Dataset.from_tensors((features, label)).repeat())
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        step_features, step_label = iterator.get_next()
        initializers = [iterator.initializer]
      else:
        step_features, step_label = constant_batch()
        step_features = {k: tf.identity(v) for k, v in step_features.items()}
        initializers = []
        # A constant batch has no iterator: loop over the same tensors.
        def body(index):
          spec = model_fn(step_features, tf.identity(step_label), train,
                          dict(params))
          with tf.control_dependencies([spec.train_op]):
            return index + 1
        count = tf.compat.v1.placeholder_with_default(loop, [])
        return tf.while_loop(lambda i: i < count, body, [0]), count, []
      wrapped = host_loop.wrap_model_fn(
          lambda f, l, m, p: model_fn(f, l, m, p), loop)
      config = tf_estimator.RunConfig(save_checkpoints_steps=None,
                                      save_checkpoints_secs=None)
      spec = wrapped(step_features, step_label, train, dict(params), config)
      [count] = tf.compat.v1.get_collection(host_loop.ITERATIONS_COLLECTION)
      return spec.train_op, count, initializers
    return build

  for name, from_input in (('graph_loop', None), ('repeat_loop', 'repeat'),
                           ('input_loop', 'chain')):
    fetch, _, session = graph_variant(looped(from_input))

    def run_loops(n, fetch=fetch, session=session):
      for _ in range(max(1, n // loop)):
        session.run(fetch)

    results[name] = run_loops

  # Eager Keras models after the graph ones: Keras invalidates models made
  # outside a graph once a graph makes layers.
  if module == 'keras':
    for name, optimizer_fn in (
        ('limit', None),
        ('limit_v1opt',
         lambda _: tf.compat.v1.train.AdamOptimizer(learning_rate=0.001)),
        ('limit_lib', lambda model: keras_compile.read_optimizer(
            model.optimizer).build(None))):
      model = taxi_keras_module.build_keras_model({})
      inputs = {name: tf.constant(value) for name, value in
                keras_adapter.conform_features(model, features).items()}
      labels = tf.constant(label.reshape([-1, 1]).astype('float32'))
      loss_fn = tf.keras.losses.BinaryCrossentropy()
      optimizer = optimizer_fn(model) if optimizer_fn else model.optimizer
      variables = model.trainable_variables

      @tf.function
      def train_loop(count, model=model, inputs=inputs, labels=labels,
                     loss_fn=loss_fn, optimizer=optimizer,
                     variables=variables):
        for _ in tf.range(count):
          with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
          optimizer.apply_gradients(
              zip(tape.gradient(loss, variables), variables))

      results[name] = lambda n, f=train_loop: f(tf.constant(n))
  return _median_us(results, steps)


def main(argv: List[str]) -> None:
  del argv
  import json  # pylint: disable=g-import-not-at-top
  with open(_DATA_SPEC.value) as f:
    spec = json.load(f)
  results = profile(spec, _MODULE.value, _BATCH_SIZE.value, _STEPS.value,
                    _LOOP.value)
  print(f'module={_MODULE.value} batch={_BATCH_SIZE.value} '
        f'steps={_STEPS.value} loop={_LOOP.value}: microseconds per step')
  for name, value in results.items():
    print(f'  {name:<12} {value:8.1f}')


if __name__ == '__main__':
  flags.mark_flag_as_required('data_spec')
  app.run(main)
