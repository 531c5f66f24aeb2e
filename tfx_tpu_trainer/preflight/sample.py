"""The sample batch a preflight compiles the model on, and its origin."""

import dataclasses
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

__all__ = ['SampleBatch', 'from_dataset', 'from_input_fn', 'from_feature_spec',
           'from_keras_model', 'serving_features']


@dataclasses.dataclass(frozen=True)
class SampleBatch:
  """Concrete (features, labels) of one shard and the input's static spec.

  Attributes:
    features: a dict of numpy arrays (or one array).
    labels: a numpy array, a dict of them, or None.
    element_spec: the `tf.TypeSpec` structure of `(features, labels)` that
      the input declares (None dims where its shapes are dynamic).
    origin: where the sample came from, for the report.
  """
  features: Any
  labels: Any
  element_spec: Any
  origin: str

  @property
  def batch_size(self) -> int:
    """Examples per batch: the first axis of the labels, else the features'.

    The labels keep the batch first where an input lays the features out
    for the TPU (tensorflow/tpu's `transpose_input`: images infed
    [height, width, channels, batch], or flattened).
    """
    labels = [] if self.labels is None else tf.nest.flatten(self.labels)
    for value in labels + tf.nest.flatten(self.features):
      if np.ndim(value):
        return int(np.shape(value)[0])
    return 1


def _split_element(element):
  if isinstance(element, (tuple, list)) and len(element) == 2:
    return element[0], element[1]
  return element, None


def _numpy(structure):
  return tf.nest.map_structure(
      lambda t: t.numpy() if hasattr(t, 'numpy') else np.asarray(t),
      structure)


def from_dataset(dataset: tf.data.Dataset, origin: str) -> SampleBatch:
  """The first element of `dataset` (eager) as a sample batch.

  Sparse or ragged components are kept as they are (the preflight reports
  them and skips the model checks).
  """
  features_spec, labels_spec = _split_element(dataset.element_spec)
  element = next(iter(dataset.take(1)))
  features, labels = _split_element(element)
  dense = all(isinstance(spec, tf.TensorSpec)
              for spec in tf.nest.flatten((features_spec, labels_spec)))
  if dense:
    features, labels = _numpy(features), _numpy(labels)
  return SampleBatch(features=features, labels=labels,
                     element_spec=(features_spec, labels_spec), origin=origin)


def from_input_fn(input_fn: Callable[[Dict[str, Any]], tf.data.Dataset],
                  params: Mapping[str, Any], batch_size: int,
                  origin: str) -> SampleBatch:
  """The first batch of `input_fn(params)` with `params['batch_size']` set."""
  dataset = input_fn(dict(params, batch_size=batch_size))
  return from_dataset(dataset, origin)


def _zeros(shape, dtype: tf.DType) -> np.ndarray:
  if dtype == tf.string:
    return np.full(shape, b'', dtype=object)
  return np.zeros(shape, dtype=dtype.as_numpy_dtype)


def from_feature_spec(feature_spec: Mapping[str, Any],
                      label_key: Optional[str], batch_size: int,
                      origin: str) -> SampleBatch:
  """Zeros for each feature of a `tf.io` feature spec; the label split off.

  `FixedLenFeature`s become dense `[batch] + shape` tensors; other features
  (VarLen, Sparse, Ragged) are described by a SparseTensorSpec and have no
  sample values.
  """
  features, specs = {}, {}
  for name, feature in sorted(feature_spec.items()):
    if isinstance(feature, tf.io.FixedLenFeature):
      shape = [batch_size] + list(feature.shape)
      features[name] = _zeros(shape, feature.dtype)
      specs[name] = tf.TensorSpec(shape, feature.dtype, name=name)
    else:
      specs[name] = tf.SparseTensorSpec([batch_size, None], feature.dtype)
  labels = label_spec = None
  if label_key is not None and label_key in specs:
    labels, label_spec = features.pop(label_key, None), specs.pop(label_key)
  return SampleBatch(features=features, labels=labels,
                     element_spec=(specs, label_spec), origin=origin)


def _is_sparse_categorical(loss: Any) -> bool:
  name = (getattr(loss, 'name', None) or getattr(loss, '__name__', None) or
          str(loss))
  return 'sparsecategorical' in name.lower().replace('_', '')


def from_keras_model(model: tf.keras.Model, batch_size: int,
                     origin: str) -> SampleBatch:
  """Zeros shaped like a Keras model's inputs (features) and outputs (labels).

  Unknown non-batch dimensions stay unknown in the spec (the input check
  reports them) and are 1 in the sample. A sparse categorical loss takes
  integer class ids, one per example.
  """
  features, specs = {}, {}
  for name, keras_input in zip(model.input_names, model.inputs):
    dims = list(keras_input.shape[1:])
    features[name] = _zeros([batch_size] + [d or 1 for d in dims],
                            keras_input.dtype)
    specs[name] = tf.TensorSpec([batch_size] + dims, keras_input.dtype,
                                name=name)
  loss = model.loss
  losses = ({key: loss[key] for key in loss.keys()} if hasattr(loss, 'keys')
            else {name: loss for name in model.output_names})
  labels, label_specs = {}, {}
  for name, output in zip(model.output_names, model.outputs):
    if _is_sparse_categorical(losses.get(name)):
      shape, dtype = [batch_size], tf.int64
    else:
      shape = [batch_size] + [dim or 1 for dim in output.shape[1:]]
      dtype = tf.float32
    labels[name] = _zeros(shape, dtype)
    label_specs[name] = tf.TensorSpec(shape, dtype, name=name)
  if len(labels) == 1:
    (labels,), (label_specs,) = labels.values(), label_specs.values()
  return SampleBatch(features=features, labels=labels,
                     element_spec=(specs, label_specs), origin=origin)


def _fits(value: Any, spec: tf.TensorSpec) -> bool:
  """Whether a sample value can stand for a tensor of `spec`."""
  return (tf.as_dtype(np.asarray(value).dtype) == spec.dtype or
          np.asarray(value).dtype.kind in 'OSU' and spec.dtype == tf.string
          ) and spec.shape.is_compatible_with(np.shape(value))


def serving_features(serving_input_receiver_fn: Callable[[], Any],
                     features: Any, batch_size: int) -> Any:
  """The features the export's PREDICT step gets, as the serving input has them.

  The training sample's features when they have the serving features'
  structure, dtypes and shapes; else zeros in the serving features'
  structure, dtypes and shapes (unknown dimensions: `batch_size` first, 1
  after). They differ when the input lays out features for the TPU (the
  double-transpose trick of tensorflow/tpu's ResNet and MnasNet: images
  infed HWCN) or a receiver wraps one tensor in a dict (`{'feature': x}`).
  Sparse serving features keep the training sample.

  Args:
    serving_input_receiver_fn: the export's serving input.
    features: the training sample's features.
    batch_size: the sample's batch size.

  Returns:
    The features (numpy values).
  """
  with tf.Graph().as_default():
    served = serving_input_receiver_fn().features
    specs = tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype) if isinstance(
            t, tf.Tensor) else None, served)
  flat_specs = tf.nest.flatten(specs)
  if any(spec is None for spec in flat_specs):
    return features
  try:
    tf.nest.assert_same_structure(specs, features)
    if all(_fits(value, spec) for value, spec in
           zip(tf.nest.flatten(features), flat_specs)):
      return features
  except (ValueError, TypeError):
    pass

  def zeros(spec):
    dims = spec.shape.as_list() if spec.shape.rank is not None else [None]
    shape = [(d if d is not None else (batch_size if i == 0 else 1))
             for i, d in enumerate(dims)]
    return _zeros(shape, spec.dtype)

  return tf.nest.map_structure(zeros, specs)
