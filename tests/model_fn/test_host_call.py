"""scalar_summaries_host_call: scalars to tf2 summaries on the host."""

import glob
import os

import pytest
import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2  # pylint: disable=g-direct-tensorflow-import

import tfx_tpu_trainer
from tfx_tpu_trainer.model_fn import host_call


def _written(model_dir):
  values = {}
  for path in glob.glob(os.path.join(model_dir, 'events.out.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        # Marked as a scalar, as tf.summary.scalar marks it (TensorBoard).
        assert value.metadata.plugin_data.plugin_name == 'scalars'
        values[(value.tag, event.step)] = tf.make_ndarray(value.tensor)
  return values


def test_host_call_writes_the_mean_over_cores_at_the_global_step(tmp_path):
  with tf.Graph().as_default():
    global_step = tf.compat.v1.train.create_global_step()
    fn, tensors = tfx_tpu_trainer.scalar_summaries_host_call(
        {'loss': tf.constant(2.0), 'rate': tf.constant(3, tf.int64)},
        str(tmp_path), max_queue=5)
    assert [t.shape.as_list() for t in tensors] == [[1], [1], [1]]
    # TPUEstimator hands host_call_fn each tensor concatenated over cores.
    on_host = [tf.concat([t, t], 0) for t in tensors]
    on_host[1] = tf.constant([1.0, 3.0])
    ops = fn(*on_host)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(tf.compat.v1.assign(global_step, 4))
      # What the estimator's scaffold runs first.
      session.run(summary_ops_v2.summary_writer_initializer_op())
      session.run(ops)
  assert _written(str(tmp_path)) == {('loss', 4): 2.0, ('rate', 4): 3.0}


@pytest.mark.parametrize('scalars,message', [
    ({}, 'needs a non-empty dict of summary name -> scalar tensor'),
    ({'loss': [1.0, 2.0]},
     "'loss' has shape (2,), not a scalar: reduce it first"),
    ({'name': 'text'}, "'name' is a string tensor; a scalar summary takes "
     'numbers'),
    ({3: 1.0}, 'summary names must be non-empty strings, got 3'),
])
def test_what_cannot_be_a_scalar_summary_is_named(scalars, message):
  with tf.Graph().as_default():
    with pytest.raises(host_call.HostCallError) as error:
      host_call.scalar_summaries_host_call(scalars, '/tmp/unused')
  assert message in str(error.value)
