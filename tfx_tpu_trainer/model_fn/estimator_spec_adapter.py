"""Adapts a `tf.estimator.Estimator` model_fn into a TPUEstimator model_fn.

An EstimatorSpec's `train_op` is opaque and its `eval_metric_ops` cannot run
in a TPU computation, so while the model_fn builds its graph (patches.py
scopes): `Optimizer.apply_gradients` sums gradients across shards first,
as `CrossShardOptimizer` does (optimizers that apply gradients another way
are not reached: an error says so); every `tf.compat.v1.metrics.*` call is
recorded and answered with a stand-in, and replayed on the host by the
returned `metric_fn` (its tensors travel through the outfeed, which
concatenates shards on the first axis: they need a batch axis). v1
summaries on a TPU and `training_chief_hooks` are errors.
"""

import contextlib
import dataclasses
import functools
import inspect
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow.python.tpu import tpu_function  # pylint: disable=g-direct-tensorflow-import
from tensorflow_estimator.python.estimator import model_fn as estimator_model_fn_lib
from tensorflow_estimator.python.estimator.head import base_head

from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.model_fn import patches
from tfx_tpu_trainer.model_fn import tpu_ops

__all__ = ['AdapterError', 'call_model_fn', 'to_tpu_model_fn']

_V1_METRICS = tf.compat.v1.metrics
_V1_SUMMARY = tf.compat.v1.summary
_V1_SUMMARY_FUNCTIONS = ('scalar', 'histogram', 'image', 'audio', 'text',
                         'tensor_summary')
# The optimizer classes whose apply_gradients the adapter reaches: v1 and the
# legacy Keras optimizers that canned Estimators (v2) use.
_OPTIMIZER_CLASSES = (tf.compat.v1.train.Optimizer,
                      tf.keras.optimizers.legacy.Optimizer)
_METRIC_FUNCTION_NAMES = tuple(
    name for name in dir(_V1_METRICS)
    if not name.startswith('_') and callable(getattr(_V1_METRICS, name)))


class AdapterError(user_module_lib.UserModuleError):
  """An Estimator model_fn needs a change before it can run on TPU."""


def argument_names(fn: Callable[..., Any]) -> frozenset:  # pylint: disable=g-bare-generic
  """The names of the arguments `fn` takes (what the estimator passes)."""
  return frozenset(inspect.signature(fn).parameters)


def function_name(fn: Callable[..., Any]) -> str:
  """`module.qualname` of a function, for messages."""
  return (f'{getattr(fn, "__module__", "?")}.'
          f'{getattr(fn, "__qualname__", repr(fn))}')


@dataclasses.dataclass
class _MetricCall:
  """One recorded `tf.compat.v1.metrics.<name>(*args, **kwargs)` call."""
  name: str
  arguments: inspect.BoundArguments
  stand_in: tuple  # pylint: disable=g-bare-generic
  tensor_keys: Dict[str, str] = dataclasses.field(default_factory=dict)


class _MetricRecorder:
  """Records v1 metric calls on the device; replays them on the host."""

  def __init__(self, source: str):
    self._source = source
    self._calls: List[_MetricCall] = []

  def recording(self):
    """Records this thread's tf.compat.v1.metrics calls while in the block."""
    return patches.all_patched([(_V1_METRICS, name, self._recorder(name))
                                for name in _METRIC_FUNCTION_NAMES])

  def _recorder(self, name: str):
    """Given the original metric function, the call that records instead."""

    def make_record(fn: Callable[..., Any]):

      @functools.wraps(fn)
      def record(*args, **kwargs):
        arguments = inspect.signature(fn).bind(*args, **kwargs)
        with tf.name_scope(f'{name}_on_host'):
          stand_in = (tf.constant(0.0, name='value'),
                      tf.constant(0.0, name='update_op'))
        self._calls.append(_MetricCall(name, arguments, stand_in))
        return stand_in

      return record

    return make_record

  def eval_metrics(self, eval_metric_ops: Mapping[str, Any]):
    """`(metric_fn, tensors)` that rebuilds `eval_metric_ops` on the host."""
    by_stand_in = {id(call.stand_in[0]): call for call in self._calls}
    chosen = {}
    for key, value in eval_metric_ops.items():
      call = None
      if isinstance(value, (tuple, list)) and len(value) == 2:
        call = by_stand_in.get(id(value[0]))
        if call is not None and value[1] is not call.stand_in[1]:
          call = None
      if call is None:
        what = (f'a {type(value).__name__}' if not isinstance(
            value, (tuple, list)) else 'not the unchanged result of a '
                'tf.compat.v1.metrics.* call')
        raise AdapterError(
            f'eval_metric_ops[{key!r}] returned by {self._source} is {what}; '
            'the adapter can move into a TPU metric_fn only results of '
            'tf.compat.v1.metrics functions, returned as they are. Return '
            "the metric call's (value, update_op), or write a "
            'TPUEstimatorSpec with eval_metrics=(metric_fn, tensors).')
      chosen[key] = call
    tensors = {}
    for key, call in chosen.items():
      self._collect_tensors(key, call, tensors)

    def metric_fn(**host_tensors):
      return {key: self._replay(call, host_tensors)
              for key, call in chosen.items()}

    return metric_fn, tensors

  def _collect_tensors(self, key: str, call: _MetricCall,
                       tensors: Dict[str, tf.Tensor]) -> None:
    """Names the call's tensor arguments for the outfeed."""
    for argument, value in call.arguments.arguments.items():
      if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        raise AdapterError(
            f'eval_metric_ops[{key!r}] in {self._source}: argument '
            f'{argument!r} of tf.compat.v1.metrics.{call.name} is a '
            f'{type(value).__name__}; TPU metrics take dense tensors.')
      if isinstance(value, tf.Variable):
        value = tf.convert_to_tensor(value)
      if not isinstance(value, tf.Tensor):
        continue
      if value.shape.rank == 0:
        if call.name == 'mean' and argument == 'values':
          value = tf.reshape(value, [1])
        else:
          raise AdapterError(
              f'eval_metric_ops[{key!r}] in {self._source}: argument '
              f'{argument!r} of tf.compat.v1.metrics.{call.name} is a '
              'scalar. TPU metric tensors go to the host through the '
              'outfeed, which concatenates shards on the first (batch) '
              'axis: pass a tensor with a batch axis.')
      tensor_key = f'{len(tensors)}_{call.name}_{argument}'
      call.tensor_keys[argument] = tensor_key
      tensors[tensor_key] = value

  def _replay(self, call: _MetricCall, host_tensors: Mapping[str, tf.Tensor]):
    arguments = dict(call.arguments.arguments)
    for argument, tensor_key in call.tensor_keys.items():
      arguments[argument] = host_tensors[tensor_key]
    return getattr(tf.compat.v1.metrics, call.name)(**arguments)


def _summed_across_shards(grads_and_vars, num_shards: int):
  """Averages each gradient across shards, unless already summed."""
  grads_and_vars = list(grads_and_vars)
  already_summed = all(
      grad is None or getattr(grad, 'op', None) is not None and
      grad.op.type == tpu_ops.CROSS_REPLICA_SUM_OP
      for grad, _ in grads_and_vars)
  if already_summed:
    return grads_and_vars
  with tf.name_scope('cross_shard_gradients'):
    return [(None if grad is None else
             tf.compat.v1.tpu.cross_replica_sum(tf.convert_to_tensor(grad)) /
             num_shards, var) for grad, var in grads_and_vars]


def _cross_shard_gradients(num_shards: int):
  """Makes v1 and legacy Keras optimizers average gradients across shards."""

  def patched(original):

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
      return original(self, _summed_across_shards(grads_and_vars, num_shards),
                      *args, **kwargs)

    return apply_gradients

  return patches.all_patched([(cls, 'apply_gradients', patched)
                              for cls in _OPTIMIZER_CLASSES])


class _HeadMetrics:
  """The eval metrics of a canned Estimator head (tf.estimator heads, v2).

  A v2 head builds its metrics as Keras `Metric` objects in
  `update_metrics`, through `base_head.create_eval_metrics_tuple`. While the
  model_fn runs, that call is recorded and answered with no metrics; the
  host `metric_fn` then makes the head's metrics anew from the logits,
  labels (and weights) sent through the outfeed, and turns each `Metric`
  into `(value, update_op)` as an EstimatorSpec does.
  """

  def __init__(self):
    self.calls = []

  def recording(self):
    """Records this thread's create_eval_metrics_tuple calls in the block."""

    def make_record(unused_original):

      def record(fn, kwargs):
        self.calls.append((fn, dict(kwargs)))
        return (lambda **_: {}), {}

      return record

    return patches.patched(base_head, 'create_eval_metrics_tuple',
                           make_record)

  def eval_metrics(self, source: str):
    """`(metric_fn, tensors)` computing the recorded head's metrics."""
    if len(self.calls) != 1:
      raise AdapterError(
          f'{source} builds the eval metrics of {len(self.calls)} Estimator '
          'heads; the adapter moves the metrics of one head to the TPU host.')
    update_metrics, kwargs = self.calls[0]
    head = getattr(update_metrics, '__self__', None)
    if head is None or not hasattr(head, 'metrics'):
      raise AdapterError(
          f'{source} builds eval metrics with a function that is not the '
          'update_metrics of an Estimator head; return tf.compat.v1.metrics '
          'results in eval_metric_ops instead.')
    tensors = {'logits': kwargs['logits']}
    labels = kwargs.get('labels')
    for index, label in enumerate(tf.nest.flatten(labels)):
      tensors[f'label_{index}'] = label
    weight_column = getattr(head, '_weight_column', None)
    weight_key = getattr(weight_column, 'key', weight_column)
    if weight_key is not None:
      tensors['weights'] = kwargs['features'][weight_key]
    regularization = kwargs.get('regularization_losses')
    if regularization is not None:
      # One value per shard on the outfeed; the host takes their mean.
      tensors['regularization_loss'] = tf.reshape(
          tf.math.add_n(list(regularization)), [1])

    def metric_fn(**host):
      host_labels = tf.nest.pack_sequence_as(
          labels, [host[f'label_{i}'] for i in
                   range(len(tf.nest.flatten(labels)))])
      features = {}
      if weight_key is not None:
        features[weight_key] = host['weights']
      host_regularization = None
      if 'regularization_loss' in host:
        host_regularization = [tf.reduce_mean(host['regularization_loss'])]
      metrics = head.metrics(regularization_losses=host_regularization)
      metrics = head.update_metrics(
          metrics, features=features, logits=host['logits'],
          labels=host_labels, regularization_losses=host_regularization)
      # As an EstimatorSpec does: Metric -> (result, update), variables local.
      return estimator_model_fn_lib._validate_eval_metric_ops(dict(metrics))  # pylint: disable=protected-access

    return metric_fn, tensors


def _v1_summaries_dropped(dropped: List[str]):
  """Makes this thread's tf.compat.v1.summary calls no-ops; records names."""

  def dropper(kind):

    def make_drop(unused_original):

      def drop(name, *args, **kwargs):
        del args, kwargs
        dropped.append(f'{name} ({kind})')
        return tf.constant('', name='dropped_summary')

      return drop

    return make_drop

  return patches.all_patched([(_V1_SUMMARY, name, dropper(name))
                              for name in _V1_SUMMARY_FUNCTIONS])


def _num_shards() -> Optional[int]:
  return tpu_function.get_tpu_context().number_of_shards


def _check_tpu_graph(new_ops: List[tf.Operation], mode: str,
                     num_shards: Optional[int], source: str) -> None:
  """The TPU-only checks of the ops the model_fn created."""
  summaries = [op for op in new_ops if op.type in tpu_ops.V1_SUMMARY_OPS]
  if summaries:
    named = ', '.join(f'{op.name!r} ({op.type})' for op in summaries)
    raise AdapterError(
        f'{source} creates the v1 summar{"ies" if len(summaries) > 1 else "y"}'
        f' {named} in mode {mode!r}; TPU computations reject v1 summaries. '
        'Remove them from the model_fn, or compute them in a '
        'TPUEstimatorSpec host_call with tf.summary (v2); for a model_fn you '
        "do not edit (a canned Estimator's), drop them with a warning: "
        'to_tpu_model_fn(model_fn, drop_v1_summaries=True).')
  for op in new_ops:
    if op.type in tpu_ops.TPU_REJECTED_OPS:
      raise AdapterError(
          f'{source} creates the op {op.name!r} ({op.type}) in mode {mode!r}; '
          'TPU computations reject v1 summaries and tf.compat.v1.Print. '
          'Remove it from the model_fn, or compute it in a TPUEstimatorSpec '
          'host_call with tf.summary (v2).')
  if (mode == tf_estimator.ModeKeys.TRAIN and num_shards and num_shards > 1 and
      not any(op.type == tpu_ops.CROSS_REPLICA_SUM_OP for op in new_ops)):
    raise AdapterError(
        f'{source} trains without averaging gradients across the '
        f'{num_shards} TPU shards: its optimizer does not apply gradients '
        'through the apply_gradients of a tf.compat.v1.train or '
        'tf.keras.optimizers.legacy optimizer (a new-style Keras optimizer, '
        'an optimizer that overrides apply_gradients, or variables assigned '
        'by hand). Use one of those optimizers, or wrap yours in '
        "tf.compat.v1.tpu.CrossShardOptimizer when params['use_tpu'].")


def _combined(first, second):
  """One `(metric_fn, tensors)` from two (either may be None)."""
  if first is None or second is None:
    return first or second
  parts = (first, second)
  tensors = {}
  for index, (_, part_tensors) in enumerate(parts):
    tensors.update({f'{index}/{key}': value
                    for key, value in part_tensors.items()})

  def metric_fn(**host):
    metrics = {}
    for index, (fn, part_tensors) in enumerate(parts):
      metrics.update(fn(**{key: host[f'{index}/{key}']
                           for key in part_tensors}))
    return metrics

  return metric_fn, tensors


def call_model_fn(model_fn: Callable[..., Any], features: Any, labels: Any,
                  mode: str, params: Any, config: Any,
                  accepted: Optional[Sequence[str]] = None) -> Any:
  """Calls `model_fn` with the arguments it names, as the Estimator does.

  Args:
    model_fn: the model_fn.
    features, labels, mode, params, config: its possible arguments.
    accepted: `argument_names(model_fn)`, when the caller already has it.

  Returns:
    What model_fn returns.
  """
  if accepted is None:
    accepted = argument_names(model_fn)
  kwargs = {'features': features}
  for name, value in (('labels', labels), ('mode', mode), ('params', params),
                      ('config', config)):
    if name in accepted:
      kwargs[name] = value
  return model_fn(**kwargs)


def to_tpu_model_fn(model_fn: Callable[..., Any],
                    name: Optional[str] = None,
                    drop_v1_summaries: bool = False) -> Callable[..., Any]:
  """Adapts an Estimator model_fn (returning EstimatorSpec) for TPUEstimator.

  What is adapted and what is an error: the module docstring above.

  Args:
    model_fn: `model_fn(features[, labels][, mode][, params][, config])`
      returning `tf.estimator.EstimatorSpec` (or `TPUEstimatorSpec`).
    name: how messages name the model_fn (default `module.qualname`).
    drop_v1_summaries: on TPU, make `tf.compat.v1.summary.*` calls no-ops
      (logged as a warning) instead of an error: for model_fns one cannot
      edit (canned Estimators, whose summaries TensorBoard alone reads).

  Returns:
    `model_fn(features, labels, mode, params, config=None)` returning
    `TPUEstimatorSpec`.
  """
  source = name or function_name(model_fn)
  accepted = argument_names(model_fn)

  def tpu_model_fn(features, labels, mode, params, config=None):
    use_tpu = bool(params.get('use_tpu'))
    num_shards = _num_shards() if use_tpu else None
    graph = tf.compat.v1.get_default_graph()
    ops_before = set(graph.get_operations())
    recorder = _MetricRecorder(source)
    head_metrics = _HeadMetrics()
    dropped = []
    with contextlib.ExitStack() as stack:
      # In every mode: model_fns often build their metrics unconditionally.
      stack.enter_context(recorder.recording())
      stack.enter_context(head_metrics.recording())
      if use_tpu and drop_v1_summaries:
        stack.enter_context(_v1_summaries_dropped(dropped))
      if mode == tf_estimator.ModeKeys.TRAIN and num_shards and num_shards > 1:
        stack.enter_context(_cross_shard_gradients(num_shards))
      spec = call_model_fn(model_fn, features, labels, mode, params, config,
                           accepted)
    if dropped:
      logging.warning(
          'Dropped %d v1 summaries of %s in mode %r: a TPU computation '
          'cannot run them (TensorBoard will not show them): %s',
          len(dropped), source, mode, ', '.join(dropped))
    if isinstance(spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec):
      return spec
    if not isinstance(spec, tf_estimator.EstimatorSpec):
      raise AdapterError(
          f'{source} must return a tf.estimator.EstimatorSpec, got '
          f'{type(spec).__name__} in mode {mode!r}.')
    if use_tpu:
      new_ops = [op for op in graph.get_operations() if op not in ops_before]
      _check_tpu_graph(new_ops, mode, num_shards, source)
    if spec.training_chief_hooks:
      raise AdapterError(
          f'{source} returns training_chief_hooks, which TPUEstimator does '
          'not run. Pass them as training_hooks.')
    eval_metrics = None
    if mode == tf_estimator.ModeKeys.EVAL:
      eval_metrics = _combined(
          recorder.eval_metrics(spec.eval_metric_ops)
          if spec.eval_metric_ops else None,
          head_metrics.eval_metrics(source) if head_metrics.calls else None)
    scaffold = spec.scaffold
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode=spec.mode,
        predictions=(spec.predictions
                     if mode == tf_estimator.ModeKeys.PREDICT else None),
        loss=spec.loss,
        train_op=spec.train_op,
        eval_metrics=eval_metrics,
        export_outputs=spec.export_outputs,
        scaffold_fn=lambda: scaffold,
        training_hooks=spec.training_hooks,
        evaluation_hooks=spec.evaluation_hooks,
        prediction_hooks=spec.prediction_hooks)

  tpu_model_fn.__doc__ = f'TPU model_fn adapted from {source}.'
  return tpu_model_fn
