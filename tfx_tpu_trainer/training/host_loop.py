"""Off TPU, `host_iterations_per_loop` training steps per session run."""

import inspect
from typing import Any, Callable, List, Optional, Tuple

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import errors

__all__ = ['CONFIG_KEY', 'ITERATIONS_COLLECTION', 'FINAL_STEP_COLLECTION',
           'GLOBAL_STEP_READ_KEY', 'ModelFn', 'HostLoopError', 'wrap_model_fn',
           'HostLoopStopHook', 'enable']

CONFIG_KEY = 'host_iterations_per_loop'
# Graph collections the stop hook reads (one entry each per training graph).
ITERATIONS_COLLECTION = 'tfx_tpu_trainer_host_loop_iterations'
FINAL_STEP_COLLECTION = 'tfx_tpu_trainer_host_loop_final_step'
_GET_NEXT_OPS = ('IteratorGetNext', 'IteratorGetNextSync')
# What tf.compat.v1.train.init_from_checkpoint makes for each variable.
_RESTORE_OP = 'RestoreV2'
_CHECKPOINT_INITIALIZER = 'checkpoint_initializer'
# Where training_util._get_or_create_global_step_read keeps the step that
# hooks read.
GLOBAL_STEP_READ_KEY = 'global_step_read_op_cache'


ModelFn = Callable[..., Any]


class HostLoopError(errors.TPUTrainerError, ValueError):
  """The model or input cannot run in the multi-step host loop."""


def _get_next_op(features, labels) -> tf.Operation:
  """The one IteratorGetNext op whose outputs are all of features/labels."""
  tensors = tf.nest.flatten((features, labels), expand_composites=True)
  ops = {tensor.op for tensor in tensors if tensor is not None}
  if len(ops) != 1 or next(iter(ops)).type not in _GET_NEXT_OPS:
    raise HostLoopError(
        f'custom_config[{CONFIG_KEY!r}] > 1 needs a training input_fn that '
        'returns a tf.data.Dataset of dense (features, label) tensors: the '
        'loop takes a new batch from the dataset iterator each step. The '
        f'features come from op(s) {sorted(op.type for op in ops)}. Return a '
        f'dataset of dense tensors, or set {CONFIG_KEY} to 1.')
  return next(iter(ops))


def _next_batch(get_next: tf.Operation, features, labels):
  """(features, labels) of a new get-next on the same iterator.

  The synchronous get-next: inside the loop (one iteration at a time) it
  dequeues the prefetched batch on the executor's thread instead of handing
  it over to a background thread and back (CHANGELOG.md,
  "Performance, round two (issue 16)").
  """
  outputs = tf.raw_ops.IteratorGetNextSync(
      iterator=get_next.inputs[0],
      output_types=get_next.get_attr('output_types'),
      output_shapes=get_next.get_attr('output_shapes'))
  return tf.nest.map_structure(
      lambda tensor: None if tensor is None else outputs[tensor.value_index],
      (features, labels))


def _scratch_spec(call: Callable[..., Any], features, labels, mode, params,
                  config) -> Tuple[Any, tf.Graph]:
  """The TRAIN spec of the model_fn, built in a throwaway graph (returned)."""
  with tf.Graph().as_default() as graph:
    tf.compat.v1.train.get_or_create_global_step()
    scratch_features, scratch_labels = tf.nest.map_structure(
        lambda tensor: tf.compat.v1.placeholder(tensor.dtype, tensor.shape),
        (features, labels))
    return call(scratch_features, scratch_labels, mode, params, config), graph


def _initializes_from_checkpoint(graph: tf.Graph) -> bool:
  """Whether the model_fn called `tf.compat.v1.train.init_from_checkpoint`.

  It gives variables initializers that restore from the checkpoint (ops
  named `checkpoint_initializer`); made inside the loop's body graph, they
  cannot assign the training graph's variables.
  """
  return any(op.type == _RESTORE_OP and op.name.rsplit('/', 1)[-1].startswith(
      _CHECKPOINT_INITIALIZER) for op in graph.get_operations())


def _loop_misfit(call: Callable[..., Any], features, labels, mode, params,
                 config) -> Optional[str]:
  """Why the model or input cannot run in the loop, or None when it can."""
  try:
    _get_next_op(features, labels)
  except HostLoopError:
    return 'the training input is not a tf.data.Dataset of dense tensors'
  spec, graph = _scratch_spec(call, features, labels, mode, params, config)
  if _initializes_from_checkpoint(graph):
    return ('the model_fn calls tf.compat.v1.train.init_from_checkpoint, '
            'whose initializers cannot be built inside the loop')
  if getattr(spec, 'host_call', None) is not None:
    return 'the model_fn returns a host_call'
  if spec.training_hooks:
    return 'the model_fn returns training_hooks'
  return None


def _drop_loop_summaries(graph: tf.Graph) -> List[str]:
  """Takes the loop body's v1 summaries out of `graph`'s summary collection.

  The body is a graph of its own that shares the collections of the training
  graph: the estimator's `merge_all` would merge the body's tensors into an
  op the training session cannot fetch.

  Args:
    graph: the training graph.

  Returns:
    The names of the summaries taken out.
  """
  key = tf.compat.v1.GraphKeys.SUMMARIES
  summaries = graph.get_collection(key)
  kept = [tensor for tensor in summaries if tensor.graph is graph]
  if len(kept) == len(summaries):
    return []
  graph.clear_collection(key)
  for tensor in kept:
    graph.add_to_collection(key, tensor)
  return [tensor.op.name for tensor in summaries if tensor.graph is not graph]


def wrap_model_fn(model_fn: ModelFn, iterations: int,
                  auto: bool = False) -> ModelFn:
  """`model_fn` whose TRAIN graph runs up to `iterations` steps per run.

  Args:
    model_fn: a TPUEstimator model_fn `(features, labels, mode, params[,
      config])`.
    iterations: the most steps per `session.run` (> 1).
    auto: the length was chosen by the library (`auto`): a model or input
      that cannot run in the loop trains one step per run instead of raising
      HostLoopError.

  Returns:
    The model_fn; EVAL and PREDICT pass through unchanged.
  """

  passes_config = 'config' in inspect.signature(model_fn).parameters

  def call(features, labels, mode, params, config):
    if passes_config:
      return model_fn(features, labels, mode, params, config=config)
    return model_fn(features, labels, mode, params)

  def looped_model_fn(features, labels, mode, params, config):
    if mode != tf_estimator.ModeKeys.TRAIN:
      return call(features, labels, mode, params, config)
    if auto:
      misfit = _loop_misfit(call, features, labels, mode, params, config)
      if misfit:
        logging.info('%s=%r: %s, so training runs one step per session.run.',
                     CONFIG_KEY, 'auto', misfit)
        return call(features, labels, mode, params, config)
    get_next = _get_next_op(features, labels)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    # HostLoopStopHook feeds each run its count. Unfed, the loop runs no
    # step: a hook that fetches the step read (the loop's output) in a run
    # of its own reads the step instead of training.
    count = tf.compat.v1.placeholder_with_default(
        tf.constant(0, tf.int32), shape=[], name='host_loop_count')
    specs, body_graphs = [], []

    def body(index, loss, finite):
      del loss, finite
      step_features, step_labels = _next_batch(get_next, features, labels)
      spec = call(step_features, step_labels, mode, params, config)
      specs.append(spec)
      body_graphs.append(tf.compat.v1.get_default_graph())
      if spec.train_op is None or spec.loss is None:
        raise HostLoopError('The TRAIN TPUEstimatorSpec needs a loss and a '
                            'train_op.')
      with tf.control_dependencies([spec.train_op]):
        step_loss = tf.identity(tf.cast(spec.loss, tf.float32))
      return index + 1, step_loss, tf.reduce_all(tf.math.is_finite(step_loss))

    def cond(index, loss, finite):
      del loss
      return tf.logical_and(index < count, finite)

    _, loss, _ = tf.while_loop(
        cond, body,
        [tf.constant(0), tf.constant(0.0), tf.constant(True)],
        parallel_iterations=1, name='host_loop')
    with tf.control_dependencies([loss]):
      final_step = tf.identity(global_step.read_value(), name='host_loop_step')
    graph = tf.compat.v1.get_default_graph()
    dropped = _drop_loop_summaries(graph)
    if dropped:
      logging.warning(
          '%s=%d: the model_fn\'s %d v1 summaries are not written (their ops '
          'run inside the loop; TensorBoard will not show them; set %s to 1 '
          'to keep them): %s', CONFIG_KEY, iterations, len(dropped),
          CONFIG_KEY, ', '.join(dropped))
    graph.add_to_collection(ITERATIONS_COLLECTION, count)
    graph.add_to_collection(FINAL_STEP_COLLECTION, final_step)
    # The estimator's hooks (step rate, checkpoints, summaries) read the step
    # from this collection; a plain read would race the loop and see the
    # step before it, so they read the step after it.
    graph.clear_collection(GLOBAL_STEP_READ_KEY)
    graph.add_to_collection(GLOBAL_STEP_READ_KEY, final_step)
    if _initializes_from_checkpoint(body_graphs[0]):
      raise HostLoopError(
          f'The model_fn calls tf.compat.v1.train.init_from_checkpoint, '
          f'which custom_config[{CONFIG_KEY!r}] > 1 cannot run (it would '
          'build the variable initializers inside the loop). Set '
          f"{CONFIG_KEY} to 1 or 'auto' (one step per session.run for such "
          'a model_fn), or warm-start from base_model instead.')
    spec = specs[0]
    if getattr(spec, 'host_call', None) is not None:
      raise HostLoopError(
          f'The model_fn returns a host_call, which custom_config'
          f'[{CONFIG_KEY!r}] > 1 does not run (its tensors live inside the '
          f'loop). Set {CONFIG_KEY} to 1.')
    hooks = list(spec.training_hooks or ())
    if hooks:
      logging.warning('%s=%d: the model_fn\'s training_hooks %s run once per '
                      'loop and cannot fetch tensors from inside it.',
                      CONFIG_KEY, iterations, hooks)
    saver_hooks = []
    if config.is_chief and (config.save_checkpoints_steps or
                            config.save_checkpoints_secs):
      saver = tf.compat.v1.train.CheckpointSaverHook(
          config.model_dir,
          save_secs=config.save_checkpoints_secs,
          save_steps=config.save_checkpoints_steps,
          save_graph_def=config.checkpoint_save_graph_def)
      # It reads the step after the loop (the step read below), so it saves
      # at the first loop end at or past each multiple of the save steps.
      saver_hooks.append(saver)
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=mode,
        loss=loss,
        train_op=final_step.op,
        scaffold_fn=spec.scaffold_fn,
        training_hooks=hooks + saver_hooks)

  return looped_model_fn


class HostLoopStopHook(tf.compat.v1.train.SessionRunHook):
  """Feeds each run its loop length and stops at the last step.

  Loops end at multiples of `iterations` (so checkpoints every multiple of it
  land on loop ends), and the last loop ends exactly at the last step. The
  global step after each loop is fetched in the same run, from the loop's
  output. A graph without the loop (`auto` fell back to one step per run)
  stops as the estimator's own `StopAtStepHook` does.
  """

  def __init__(self, iterations: int, num_steps: Optional[int] = None,
               last_step: Optional[int] = None):
    if num_steps is not None and last_step is not None:
      raise ValueError('Give at most one of num_steps and last_step.')
    self._iterations = iterations
    self._num_steps = num_steps
    self._last_step = last_step
    self._step = None
    self._single_step = None

  def begin(self):
    graph = tf.compat.v1.get_default_graph()
    counts = graph.get_collection(ITERATIONS_COLLECTION)
    steps = graph.get_collection(FINAL_STEP_COLLECTION)
    if not counts and not steps:
      self._single_step = (
          tf.compat.v1.train.SessionRunHook()
          if self._num_steps is None and self._last_step is None else
          tf.compat.v1.train.StopAtStepHook(num_steps=self._num_steps,
                                            last_step=self._last_step))
      self._single_step.begin()
      return
    if len(counts) != 1 or len(steps) != 1:
      raise RuntimeError('The training graph has no single host loop.')
    self._count, self._final_step = counts[0], steps[0]
    self._global_step = tf.compat.v1.train.get_global_step()

  def after_create_session(self, session, coord):
    if self._single_step is not None:
      self._single_step.after_create_session(session, coord)
      return
    del coord
    self._step = int(session.run(self._global_step))
    if self._num_steps is not None:
      self._last_step = self._step + self._num_steps

  def next_iterations(self) -> int:
    """Steps of the next loop: to the next multiple, at most to the last."""
    to_boundary = self._iterations - self._step % self._iterations
    if self._last_step is None:
      return to_boundary
    return max(0, min(to_boundary, self._last_step - self._step))

  def before_run(self, run_context):
    if self._single_step is not None:
      return self._single_step.before_run(run_context)
    return tf.compat.v1.train.SessionRunArgs(
        self._final_step, feed_dict={self._count: self.next_iterations()})

  def after_run(self, run_context, run_values):
    if self._single_step is not None:
      self._single_step.after_run(run_context, run_values)
      return
    self._step = int(run_values.results)
    if self._last_step is not None and self._step >= self._last_step:
      run_context.request_stop()


def enable(estimator: tf.compat.v1.estimator.tpu.TPUEstimator,
           iterations: int) -> None:
  """Makes `estimator.train` stop with `HostLoopStopHook`.

  Estimator forbids subclasses to override its methods, so this sets the
  one extension point TPUEstimator itself overrides for its TPU loop
  (`_convert_train_steps_to_hooks`) on this instance.

  Args:
    estimator: a TPUEstimator whose model_fn was wrapped by `wrap_model_fn`.
    iterations: the most steps per run.
  """

  def convert_train_steps_to_hooks(steps, max_steps):
    # Without steps, training runs until the input ends, a loop per run.
    return [HostLoopStopHook(iterations, num_steps=steps, last_step=max_steps)]

  # pylint: disable-next=protected-access
  estimator._convert_train_steps_to_hooks = convert_train_steps_to_hooks
