"""A TPUEstimatorSpec `host_call` that writes scalars as tf2 summaries."""

from typing import Any, Callable, List, Mapping, Optional, Tuple

import tensorflow as tf
from tensorboard.plugins.scalar import metadata as scalar_metadata

from tfx_tpu_trainer import errors

__all__ = ['HostCallError', 'HostCall', 'scalar_summaries_host_call']

# What `TPUEstimatorSpec(host_call=...)` takes: a function and its tensors.
HostCall = Tuple[Callable[..., List[tf.Operation]], List[tf.Tensor]]


# What marks a summary as a scalar for TensorBoard (`tf.summary.scalar`'s).
_SCALAR_METADATA = scalar_metadata.create_summary_metadata(
    display_name=None, description=None)
_SCOPE = 'scalar_summaries_host_call'


class HostCallError(errors.TPUTrainerError, ValueError):
  """The scalars handed to `scalar_summaries_host_call` cannot be written."""


def _scalar(name: Any, value: Any) -> tf.Tensor:
  """`value` as a float32 tensor of shape [1], the host_call's batch axis."""
  if not isinstance(name, str) or not name:
    raise HostCallError(
        f'scalar_summaries_host_call: summary names must be non-empty '
        f'strings, got {name!r}.')
  tensor = tf.convert_to_tensor(value)
  if tensor.shape.rank is None or tensor.shape.rank != 0:
    raise HostCallError(
        f'scalar_summaries_host_call: {name!r} has shape {tensor.shape}, not '
        'a scalar: reduce it first (e.g. tf.reduce_mean).')
  if not (tensor.dtype.is_floating or tensor.dtype.is_integer or
          tensor.dtype.is_bool):
    raise HostCallError(
        f'scalar_summaries_host_call: {name!r} is a {tensor.dtype.name} '
        'tensor; a scalar summary takes numbers.')
  return tf.reshape(tf.cast(tensor, tf.float32), [1])


def scalar_summaries_host_call(scalars: Mapping[str, Any], model_dir: str,
                               max_queue: Optional[int] = None) -> HostCall:
  """A `host_call` that writes `scalars` as tf2 summaries on the host.

  TPU computations cannot write summaries; TPUEstimator runs a
  `TPUEstimatorSpec(host_call=(fn, tensors))` on the host CPU after the
  steps, with each tensor concatenated over the TPU cores on its first axis
  (tensorflow/tpu's ResNet writes its loss and learning rate this way). Use
  it in TRAIN mode:

      host_call = tfx_tpu_trainer.scalar_summaries_host_call(
          {'loss': loss, 'learning_rate': learning_rate},
          params['model_dir'], max_queue=params['iterations_per_loop'])
      return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
          mode, loss=loss, train_op=train_op, host_call=host_call)

  Each summary is the mean of the cores' values at the global step; off
  TPU (one core) the value itself. On a TPU the host call runs after each
  step of a loop (or every `experimental_host_call_every_n_steps`).

  Args:
    scalars: summary name -> scalar tensor (any real dtype; written as
      float32).
    model_dir: where the event files go (`params['model_dir']`, where
      TensorBoard reads the estimator's own).
    max_queue: summaries the writer holds before it writes
      (`tf.summary.create_file_writer`'s; default 10). ResNet passes
      `iterations_per_loop` so it writes once per loop.

  Returns:
    `(host_call_fn, tensors)` for `TPUEstimatorSpec(host_call=...)`.

  Raises:
    HostCallError: `scalars` is empty, or an entry is no scalar number.
  """
  if not isinstance(scalars, Mapping) or not scalars:
    raise HostCallError(
        'scalar_summaries_host_call needs a non-empty dict of summary name '
        f'-> scalar tensor, got {scalars!r}.')
  names = sorted(scalars, key=str)
  tensors = [_scalar(name, scalars[name]) for name in names]
  step = tf.reshape(tf.compat.v1.train.get_or_create_global_step(), [1])
  writer_args = {} if max_queue is None else {'max_queue': max_queue}

  def host_call_fn(global_step, *values):
    # Tags are the names as given; the ops get a scope of their own, so the
    # estimator's v1 summaries keep their names (its `loss` stays `loss`).
    with tf.name_scope(_SCOPE), tf.summary.create_file_writer(
        model_dir, **writer_args).as_default(), tf.summary.record_if(True):
      for name, value in zip(names, values):
        tf.summary.write(tag=name, tensor=tf.reduce_mean(value),
                         step=global_step[0], metadata=_SCALAR_METADATA)
      return tf.compat.v1.summary.all_v2_summary_ops()

  return host_call_fn, [step] + tensors
