"""What a compiled Keras model's `compile()` means for a TPU model_fn."""

import dataclasses
import numbers
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from tfx_tpu_trainer.user_code import user_module as user_module_lib

__all__ = ['read_optimizer']

MetricOps = Tuple[tf.Tensor, tf.Operation]

# Keras optimizer settings that have no tf.compat.v1.train counterpart, with
# the value meaning "off".
_UNSUPPORTED_OPTIMIZER_SETTINGS = (
    ('weight_decay', (None, 0, 0.0)),
    ('clipnorm', (None,)),
    ('clipvalue', (None,)),
    ('global_clipnorm', (None,)),
    ('use_ema', (False, None)),
    ('amsgrad', (False, None)),
    ('decay', (0, 0.0, None)),  # The legacy optimizers' time-based decay.
)


class KerasModelError(user_module_lib.UserModuleError):
  """A Keras model cannot be turned into a TPU model_fn as it is."""


def _sgd(config, learning_rate):
  momentum = config.get('momentum') or 0.0
  if momentum:
    return tf.compat.v1.train.MomentumOptimizer(
        learning_rate, momentum, use_nesterov=bool(config.get('nesterov')))
  return tf.compat.v1.train.GradientDescentOptimizer(learning_rate)


class ElementwiseAdamOptimizer(tf.compat.v1.train.AdamOptimizer):
  """v1 Adam whose resource-variable update is elementwise ops, not the kernel.

  The same update as `tf.compat.v1.train.AdamOptimizer` (same slots `m` and
  `v`, same beta power accumulators, so checkpoints are interchangeable, and
  non-lazy on sparse gradients as v1 Adam is), written as elementwise ops: on
  CPU the fused `ResourceApplyAdam` kernel of TF 2.15 costs about 12
  microseconds per variable even for 100 floats (under 1 for
  `ResourceApplyAdagrad`), over a quarter of a small model's step. Sparse
  gradients (embeddings) are summed into dense ones first: v1 Adam's sparse
  path decays every row of `m` and `v` and moves every row of the variable
  anyway. On TPU, XLA compiles either form into the same fused update.
  """

  def _prepare(self):
    super()._prepare()
    self._scalars_by_dtype = {}

  def _scalars(self, dtype: tf.DType) -> Tuple[tf.Tensor, ...]:
    """Step size, 1 - beta1, 1 - beta2 and epsilon: once per step and dtype."""
    if dtype not in self._scalars_by_dtype:
      beta1_power, beta2_power = self._get_beta_accumulators()
      step_size = (tf.cast(self._lr_t, dtype) *
                   tf.sqrt(1 - tf.cast(beta2_power, dtype)) /
                   (1 - tf.cast(beta1_power, dtype)))
      self._scalars_by_dtype[dtype] = (
          step_size, 1 - tf.cast(self._beta1_t, dtype),
          1 - tf.cast(self._beta2_t, dtype), tf.cast(self._epsilon_t, dtype))
    return self._scalars_by_dtype[dtype]

  def _resource_apply_dense(self, grad, var):
    step_size, one_minus_beta1, one_minus_beta2, epsilon = self._scalars(
        var.dtype.base_dtype)
    m = self.get_slot(var, 'm')
    v = self.get_slot(var, 'v')
    m_t = m.assign_add((grad - m) * one_minus_beta1,
                       use_locking=self._use_locking)
    v_t = v.assign_add((tf.square(grad) - v) * one_minus_beta2,
                       use_locking=self._use_locking)
    return var.assign_sub(step_size * m_t / (tf.sqrt(v_t) + epsilon),
                          use_locking=self._use_locking, read_value=False)

  def _resource_apply_sparse_duplicate_indices(self, grad, var, indices):
    dense_grad = tf.math.unsorted_segment_sum(
        grad, indices, tf.shape(var, out_type=indices.dtype)[0])
    return self._resource_apply_dense(dense_grad, var)


def _adam(config, learning_rate):
  adam_class = (tf.compat.v1.train.AdamOptimizer
                if tf.config.list_physical_devices('GPU') else
                ElementwiseAdamOptimizer)
  return adam_class(
      learning_rate, beta1=config['beta_1'], beta2=config['beta_2'],
      epsilon=config['epsilon'])


def _adagrad(config, learning_rate):
  return tf.compat.v1.train.AdagradOptimizer(
      learning_rate,
      initial_accumulator_value=config.get('initial_accumulator_value', 0.1))


class _ZeroStartRMSPropOptimizer(tf.compat.v1.train.RMSPropOptimizer):
  """v1 RMSProp with its mean square starting at zero, as Keras's does.

  tf.compat.v1.train.RMSPropOptimizer starts the mean square at one, which
  makes its first steps much smaller than Keras's; the update rule is the
  same.
  """

  def _create_slots(self, var_list):
    for var in var_list:
      self._zeros_slot(var, 'rms', self._name)
      if self._centered:
        self._zeros_slot(var, 'mg', self._name)
      self._zeros_slot(var, 'momentum', self._name)


def _rmsprop(config, learning_rate):
  return _ZeroStartRMSPropOptimizer(
      learning_rate, decay=config['rho'], momentum=config['momentum'],
      epsilon=config['epsilon'], centered=config['centered'])


def _adadelta(config, learning_rate):
  return tf.compat.v1.train.AdadeltaOptimizer(
      learning_rate, rho=config['rho'], epsilon=config['epsilon'])


def _ftrl(config, learning_rate):
  return tf.compat.v1.train.FtrlOptimizer(
      learning_rate,
      learning_rate_power=config['learning_rate_power'],
      initial_accumulator_value=config['initial_accumulator_value'],
      l1_regularization_strength=config['l1_regularization_strength'],
      l2_regularization_strength=config['l2_regularization_strength'],
      l2_shrinkage_regularization_strength=config[
          'l2_shrinkage_regularization_strength'],
      beta=config.get('beta') or None)


_OPTIMIZERS = {
    'SGD': _sgd,
    'Adam': _adam,
    'Adagrad': _adagrad,
    'RMSprop': _rmsprop,
    'Adadelta': _adadelta,
    'Ftrl': _ftrl,
}
SUPPORTED_OPTIMIZERS = tuple(sorted(_OPTIMIZERS))


@dataclasses.dataclass(frozen=True)
class OptimizerSpec:
  """A Keras optimizer as the tf.compat.v1.train optimizer to build."""
  class_name: str
  config: Mapping[str, Any]

  def build(self, global_step: tf.Tensor) -> tf.compat.v1.train.Optimizer:
    """The v1 optimizer, its learning rate schedule evaluated at the step."""
    learning_rate = self.config['learning_rate']
    if isinstance(learning_rate, Mapping):
      schedule = tf.keras.optimizers.schedules.deserialize(learning_rate)
      learning_rate = schedule(global_step)
    return _OPTIMIZERS[self.class_name](self.config, learning_rate)


def read_optimizer(optimizer: Any) -> OptimizerSpec:
  """Reads a Keras optimizer (eagerly) into an OptimizerSpec.

  Args:
    optimizer: `model.optimizer` of a model compiled in eager mode.

  Returns:
    The spec.

  Raises:
    KerasModelError: for an optimizer or a setting without a v1 counterpart.
  """
  class_name = type(optimizer).__name__
  if class_name not in _OPTIMIZERS:
    raise KerasModelError(
        f'the model is compiled with the '
        f'{class_name} optimizer, which has no tf.compat.v1.train counterpart '
        f'that TPU training can use. Use one of {list(SUPPORTED_OPTIMIZERS)}, '
        'or write a model_fn.')
  try:
    config = dict(optimizer.get_config())
  except Exception as e:  # pylint: disable=broad-except
    raise KerasModelError(
        f'cannot read the {class_name} optimizer of the model: '
        f'{type(e).__name__}: {e}') from e
  for key, off_values in _UNSUPPORTED_OPTIMIZER_SETTINGS:
    if key in config and config[key] not in off_values:
      raise KerasModelError(
          f'the model is compiled with '
          f'{class_name}({key}={config[key]!r}); the tf.compat.v1.train '
          f'optimizer used for TPU training has no {key}. Remove {key} from '
          'the optimizer, or write a model_fn.')
  learning_rate = config.get('learning_rate')
  if isinstance(learning_rate, Mapping):
    try:
      tf.keras.optimizers.schedules.deserialize(learning_rate)
    except Exception as e:  # pylint: disable=broad-except
      raise KerasModelError(
          f'the learning rate schedule {learning_rate.get("class_name")} of '
          f'the optimizer cannot be rebuilt '
          f'from its config ({type(e).__name__}: {e}). Use a built-in '
          'tf.keras.optimizers.schedules schedule or a float.') from e
  elif isinstance(learning_rate, numbers.Real):
    config['learning_rate'] = float(learning_rate)
  else:
    raise KerasModelError(
        f'the learning rate of the {class_name} optimizer '
        f'must be a float or a '
        f'tf.keras.optimizers.schedules schedule, got {learning_rate!r}.')
  return OptimizerSpec(class_name=class_name, config=config)


def _output_map(value: Any, output_names: Sequence[str],
                what: str) -> Dict[str, Any]:
  """Keras's per-output forms (one for all, list, dict) as name -> value."""
  if hasattr(value, 'keys') and not isinstance(value, str):  # DictWrapper too.
    value = {key: value[key] for key in value.keys()}
    unknown = sorted(set(value) - set(output_names))
    if unknown:
      raise KerasModelError(
          f'the compiled {what} names '
          f'output(s) {unknown}; the model outputs are {list(output_names)}.')
    return {name: value[name] for name in output_names if name in value}
  if isinstance(value, (list, tuple)) and (len(output_names) > 1 or
                                           what == 'loss') and (
      what == 'loss' or all(isinstance(v, (list, tuple)) for v in value)):
    if len(value) != len(output_names):
      raise KerasModelError(
          f'the compiled {what} is a list '
          f'of {len(value)} entries for {len(output_names)} outputs '
          f'{list(output_names)}.')
    return dict(zip(output_names, value))
  return {name: value for name in output_names}


@dataclasses.dataclass(frozen=True)
class LossSpec:
  """The compiled loss: a function or Loss object per output, and weights."""
  losses: Mapping[str, Callable[..., Any]]
  weights: Mapping[str, float]

  def build(self, labels: Mapping[str, tf.Tensor],
            outputs: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """The weighted sum of the per-output losses (a scalar)."""
    terms = []
    for name, loss_fn in self.losses.items():
      value = loss_fn(labels[name], outputs[name])
      if value.shape.rank:  # A function: per-example values.
        value = tf.reduce_mean(value)
      terms.append(tf.cast(value, tf.float32) * self.weights.get(name, 1.0))
    return tf.add_n(terms)


def read_loss(model: tf.keras.Model) -> LossSpec:
  """Reads the compiled loss and loss weights of an eagerly built model."""
  if not model.loss:
    raise KerasModelError(
        'the model is compiled without a loss. Pass loss=... to model.compile().')
  losses = {}
  for name, identifier in _output_map(model.loss, model.output_names,
                                      'loss').items():
    if identifier is None:
      continue
    try:
      losses[name] = tf.keras.losses.get(identifier)
    except Exception as e:  # pylint: disable=broad-except
      raise KerasModelError(
          f'unknown loss {identifier!r} for output {name!r}: {e}') from e
  weights = (model.get_compile_config() or {}).get('loss_weights') or {}
  weights = _output_map(weights, model.output_names,
                        'loss_weights') if weights else {}
  return LossSpec(losses=losses, weights={k: float(v) for k, v in
                                          weights.items()})


def _threshold(config: Mapping[str, Any], name: str) -> float:
  thresholds = config.get('thresholds')
  if isinstance(thresholds, (list, tuple)):
    if len(thresholds) != 1:
      raise KerasModelError(
          f'metric {name!r} has several '
          f'thresholds {list(thresholds)}; the TPU metric takes one. Use one '
          'metric per threshold.')
    thresholds = thresholds[0]
  return 0.5 if thresholds is None else float(thresholds)


def _as_float(tensor):
  return tf.cast(tensor, tf.float32)


def _accuracy(kind, options, labels, predictions):
  if kind == 'binary_accuracy':
    return tf.compat.v1.metrics.accuracy(
        labels=_as_float(labels),
        predictions=_as_float(predictions > options.get('threshold', 0.5)))
  if kind == 'categorical_accuracy':
    return tf.compat.v1.metrics.accuracy(
        labels=tf.argmax(labels, axis=-1),
        predictions=tf.argmax(predictions, axis=-1))
  return tf.compat.v1.metrics.accuracy(  # sparse_categorical_accuracy
      labels=tf.cast(tf.reshape(labels, [-1]), tf.int64),
      predictions=tf.reshape(tf.argmax(predictions, axis=-1), [-1]))


def _probabilities(options, predictions):
  return tf.sigmoid(predictions) if options.get('from_logits') else predictions


def _build_metric(kind: str, options: Mapping[str, Any], labels: tf.Tensor,
                  predictions: tf.Tensor) -> MetricOps:
  """The tf.compat.v1.metrics (value, update_op) of one metric kind."""
  if kind in ('binary_accuracy', 'categorical_accuracy',
              'sparse_categorical_accuracy'):
    return _accuracy(kind, options, labels, predictions)
  if kind == 'auc':
    return tf.compat.v1.metrics.auc(
        labels=labels, predictions=_probabilities(options, predictions),
        num_thresholds=options['num_thresholds'], curve=options['curve'],
        summation_method=options['summation_method'])
  if kind in ('precision', 'recall'):
    fn = getattr(tf.compat.v1.metrics, kind)
    return fn(labels=tf.cast(labels, tf.bool),
              predictions=predictions > options['threshold'])
  if kind in ('mean_squared_error', 'mean_absolute_error',
              'root_mean_squared_error'):
    fn = getattr(tf.compat.v1.metrics, kind)
    return fn(labels=_as_float(labels), predictions=_as_float(predictions))
  # Cross-entropies: the mean of the per-example Keras loss, as Keras does.
  fn = getattr(tf.keras.losses, kind)
  return tf.compat.v1.metrics.mean(fn(labels, predictions, **options))


# Keras metric names (strings, function names, class names) -> metric kind.
_METRIC_KINDS = {
    'binary_accuracy': 'binary_accuracy',
    'BinaryAccuracy': 'binary_accuracy',
    'categorical_accuracy': 'categorical_accuracy',
    'CategoricalAccuracy': 'categorical_accuracy',
    'sparse_categorical_accuracy': 'sparse_categorical_accuracy',
    'SparseCategoricalAccuracy': 'sparse_categorical_accuracy',
    'auc': 'auc',
    'AUC': 'auc',
    'precision': 'precision',
    'Precision': 'precision',
    'recall': 'recall',
    'Recall': 'recall',
    'mse': 'mean_squared_error',
    'mean_squared_error': 'mean_squared_error',
    'MeanSquaredError': 'mean_squared_error',
    'mae': 'mean_absolute_error',
    'mean_absolute_error': 'mean_absolute_error',
    'MeanAbsoluteError': 'mean_absolute_error',
    'RootMeanSquaredError': 'root_mean_squared_error',
    'binary_crossentropy': 'binary_crossentropy',
    'BinaryCrossentropy': 'binary_crossentropy',
    'categorical_crossentropy': 'categorical_crossentropy',
    'CategoricalCrossentropy': 'categorical_crossentropy',
    'sparse_categorical_crossentropy': 'sparse_categorical_crossentropy',
    'SparseCategoricalCrossentropy': 'sparse_categorical_crossentropy',
}
SUPPORTED_METRICS = tuple(sorted(set(_METRIC_KINDS) | {'accuracy', 'acc'}))
# Keras's default names of metrics given by class.
_DEFAULT_NAMES = {
    'auc': 'auc', 'precision': 'precision', 'recall': 'recall',
    'root_mean_squared_error': 'root_mean_squared_error',
}


@dataclasses.dataclass(frozen=True)
class MetricSpec:
  """One compiled Keras metric as a tf.compat.v1.metrics metric."""
  name: str
  output_name: str
  kind: str
  options: Mapping[str, Any]

  def build(self, labels: tf.Tensor, predictions: tf.Tensor) -> MetricOps:
    """Builds the metric's (value, update_op) on the host."""
    return _build_metric(self.kind, self.options, labels, predictions)


def _accuracy_kind(model: tf.keras.Model, output_name: str,
                   loss_spec: LossSpec) -> str:
  """What Keras's 'accuracy' means for an output: by its size and loss."""
  output = model.outputs[model.output_names.index(output_name)]
  if output.shape[-1] == 1 or output.shape.rank == 1:
    return 'binary_accuracy'
  loss_fn = loss_spec.losses.get(output_name)
  loss_name = getattr(loss_fn, 'name', None) or getattr(loss_fn, '__name__',
                                                        '')
  if 'sparse_categorical' in loss_name:
    return 'sparse_categorical_accuracy'
  return 'categorical_accuracy'


def _metric_spec(identifier: Any, output_name: str, prefix: str,
                 model: tf.keras.Model, loss_spec: LossSpec) -> MetricSpec:
  """One serialized compile metric (a string or a config dict) as a spec."""
  config = {}
  if isinstance(identifier, str):
    key, name = identifier, identifier
  elif isinstance(identifier, Mapping) and 'class_name' in identifier:
    key = identifier['class_name']
    if key == 'function':
      key = name = identifier.get('config')
    else:
      config = dict(identifier.get('config') or {})
      name = config.get('name') or key
  else:
    key = name = repr(identifier)
  if key in ('accuracy', 'acc'):
    kind = _accuracy_kind(model, output_name, loss_spec)
  elif key in _METRIC_KINDS:
    kind = _METRIC_KINDS[key]
    if isinstance(identifier, str) and key[0].isupper():
      name = _DEFAULT_NAMES.get(kind, name)
  else:
    raise KerasModelError(
        f'metric {name!r} has no '
        'tf.compat.v1.metrics equivalent that TPU evaluation can compute on '
        f'the host. Use metrics from {list(SUPPORTED_METRICS)}, or write a '
        'model_fn with eval_metrics=(metric_fn, tensors).')
  options = {}
  if kind == 'binary_accuracy':
    options['threshold'] = float(config.get('threshold', 0.5))
  elif kind == 'auc':
    if config.get('multi_label') or config.get('label_weights') is not None:
      raise KerasModelError(
          f'metric {name!r} is a multi-label '
          'or label-weighted AUC; the TPU metric computes a single AUC. '
          'Remove multi_label/label_weights.')
    summation = config.get('summation_method', 'interpolation')
    options = dict(
        num_thresholds=int(config.get('num_thresholds', 200)),
        curve=config.get('curve', 'ROC'),
        summation_method=('careful_interpolation'
                          if summation == 'interpolation' else summation),
        from_logits=bool(config.get('from_logits')))
  elif kind in ('precision', 'recall'):
    if config.get('top_k') is not None or config.get('class_id') is not None:
      raise KerasModelError(
          f'metric {name!r} uses top_k or '
          'class_id, which the TPU metric does not support. Remove them.')
    options['threshold'] = _threshold(config, name)
  elif kind.endswith('crossentropy'):
    options = {k: config[k] for k in ('from_logits', 'label_smoothing')
               if k in config and not (kind.startswith('sparse') and
                                       k == 'label_smoothing')}
  full_name = f'{prefix}{name}'
  return MetricSpec(name=full_name, output_name=output_name, kind=kind,
                    options=options)


def read_metrics(model: tf.keras.Model,
                 loss_spec: LossSpec) -> List[MetricSpec]:
  """Reads the compiled metrics of an eagerly built model into specs."""
  compile_config = model.get_compile_config() or {}
  if compile_config.get('weighted_metrics'):
    raise KerasModelError(
        'the model compiles weighted_metrics; TPU '
        'training here has no sample weights. Pass them as metrics.')
  metrics = compile_config.get('metrics') or []
  per_output = _output_map(metrics, model.output_names, 'metrics')
  multi_output = len(model.output_names) > 1
  specs = []
  for output_name, identifiers in per_output.items():
    if not isinstance(identifiers, (list, tuple)):
      identifiers = [identifiers]
    prefix = f'{output_name}_' if multi_output else ''
    for identifier in identifiers:
      specs.append(_metric_spec(identifier, output_name, prefix, model,
                                loss_spec))
  names = [spec.name for spec in specs]
  duplicates = sorted({name for name in names if names.count(name) > 1})
  if duplicates or 'loss' in names:
    raise KerasModelError(
        f'the model compiles metrics whose names clash: '
        f'{duplicates or ["loss"]} (the estimator reports the loss as '
        "'loss'). Give the metrics distinct names with name=...")
  return specs


@dataclasses.dataclass(frozen=True)
class CompileSpec:
  """The compile settings of a Keras model, ready to build in a graph."""
  optimizer: Optional[OptimizerSpec]
  loss: Optional[LossSpec]
  metrics: Sequence[MetricSpec]


def read_compile_spec(model: tf.keras.Model) -> CompileSpec:
  """Reads optimizer, loss and metrics of a model built and compiled eagerly.

  Args:
    model: the model `build_keras_model` returned (eager).

  Returns:
    The compile spec; all None/empty when the model is not compiled.

  Raises:
    KerasModelError: for settings without a TPU counterpart.
  """
  if model.get_compile_config() is None:  # Not compiled.
    return CompileSpec(optimizer=None, loss=None, metrics=())
  loss_spec = read_loss(model)
  return CompileSpec(
      optimizer=read_optimizer(model.optimizer),
      loss=loss_spec,
      metrics=tuple(read_metrics(model, loss_spec)))
