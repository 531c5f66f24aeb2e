"""Reliability, round three: NaN weights, damaged checkpoints, attempt locks.

Each test runs real TensorFlow, real files and real processes: a fault the
earlier rounds never saw, and what the user sees about it.
"""

import glob
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.training import finite_variables

from tests.conftest import TEST_MODULES_DIR
from tests import test_reliability as reliability

SMALL_BATCHES = reliability.SMALL_BATCHES


def _save_v1_checkpoint(model_dir, values, step=7):
  """Writes a TF1 checkpoint of `values` (name -> array) at `step`."""
  with tf.Graph().as_default():
    for name, value in values.items():
      tf.compat.v1.get_variable(name, initializer=tf.constant(value))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      session.run(global_step.assign(step))
      return saver.save(session, os.path.join(model_dir, 'model.ckpt'),
                        global_step=step)


# Item 1: NaN or infinite final variables are not exported.
def test_non_finite_variable_is_named_with_the_likely_cause(tmp_path):
  _save_v1_checkpoint(str(tmp_path), {
      'bias': np.zeros([1], np.float32),
      'dense/kernel': np.array([[1.0], [np.nan], [np.inf]], np.float32),
      'dense/kernel/Momentum': np.array([[np.nan]] * 3, np.float32)})
  with pytest.raises(finite_variables.NonFiniteVariablesError) as error:
    finite_variables.check_final_variables(str(tmp_path), 'my_module.py')
  message = str(error.value)
  assert re.search(r"The final checkpoint .*model\.ckpt-7 has non-finite "
                   r"values in variable 'dense/kernel' \(2 of 3 values are "
                   r'NaN or infinite\) and in 1 more \(dense/kernel/Momentum'
                   r'\), so no model was exported', message), message
  assert 'model_fn in my_module.py' in message
  assert 'NaN or infinite feature values in the training examples' in message
  assert "custom_config['allow_nonfinite_variables']=true" in message


def test_finite_variables_pass_and_the_opt_out_is_a_config_key(tmp_path):
  _save_v1_checkpoint(str(tmp_path), {'w': np.ones([2], np.float32)})
  finite_variables.check_final_variables(str(tmp_path), 'm.py')
  finite_variables.check_final_variables(str(tmp_path / 'empty'), 'm.py')
  assert config_lib.TrainerConfig.from_custom_config(
      {'allow_nonfinite_variables': True}, environ={}).allow_nonfinite_variables
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['allow_nonfinite_variables'\] "
                     'must be true or false'):
    config_lib.TrainerConfig.from_custom_config(
        {'allow_nonfinite_variables': 1}, environ={})


def _nan_fare_in_some_records(path, every=7):
  """Rewrites a gzip TFRecord file: fare_xf NaN in every `every`-th record."""
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      path, compression_type='GZIP')]
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for index, record in enumerate(records):
      if index % every == every - 1:
        example = tf.train.Example.FromString(record)
        feature = example.features.feature['fare_xf'].float_list
        feature.value[:] = [float('nan')] * len(feature.value)
        record = example.SerializeToString()
      writer.write(record)


@pytest.mark.slow
def test_nan_inputs_that_leave_the_loss_finite_publish_no_nan_weights(
    taxi_artifacts, tmp_path):
  examples = reliability._copy_examples(  # pylint: disable=protected-access
      taxi_artifacts.transformed_examples, str(tmp_path / 'examples'))
  _nan_fare_in_some_records(
      reliability._only_file(examples, 'train'))  # pylint: disable=protected-access
  module = os.path.join(TEST_MODULES_DIR, 'nan_skipping_loss_module.py')
  run = reliability._run_with_examples(  # pylint: disable=protected-access
      taxi_artifacts, tmp_path, examples, module_file=module, train_steps=20,
      eval_steps=2)
  message = reliability._assert_fails_and_leaves_no_model(  # pylint: disable=protected-access
      run, finite_variables.NonFiniteVariablesError,
      r"has non-finite values in variable 'weights' \(\d+ of 3 values")
  assert 'nan_skipping_loss_module.py' in message
  # The opt-out publishes it, as allow_nonfinite_metrics does for metrics.
  allowed = reliability._run_with_examples(  # pylint: disable=protected-access
      taxi_artifacts, tmp_path / 'allowed', examples, module_file=module,
      train_steps=20, eval_steps=2,
      custom_config=dict(SMALL_BATCHES, allow_nonfinite_variables=True))
  executor.Executor().Do(allowed.input_dict, allowed.output_dict,
                         allowed.exec_properties)
  assert os.path.isdir(path_utils.serving_model_dir(allowed.model.uri))
