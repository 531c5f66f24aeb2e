"""Item 7 of issue 25: label values outside the model's classes fail first.

The graph tests build real model_fns (Keras through the adapter, canned
heads, a plain loss) and read what their loss accepts; the executor tests
train on the taxi slice with labels rewritten to values the model cannot
take, and fail before any training step, naming file, record and values.
"""

import os
import re
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.preflight import label_range

from tests import test_reliability as reliability
from tests.conftest import TEST_MODULES_DIR
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES

THREE_CLASS_KERAS = os.path.join(TEST_MODULES_DIR,
                                 'three_class_keras_module.py')
BINARY_HEAD = os.path.join(TEST_MODULES_DIR, 'binary_head_module.py')


def _keras(units, activation, loss):

  def build_keras_model(params):
    del params
    inputs = tf.keras.Input(shape=(1,), name='x')
    model = tf.keras.Model(
        inputs, tf.keras.layers.Dense(units, activation=activation)(inputs))
    model.compile(optimizer='sgd', loss=loss)
    return model

  return keras_adapter.make_keras_model_fn(
      user_module.ModuleFunction('build_keras_model', 'm.py',
                                 build_keras_model))


def _head(head):

  def model_fn(features, labels, mode):
    logits = tf.compat.v1.layers.dense(features['x'], head.logits_dimension)
    return head.create_estimator_spec(
        features=features, mode=mode, logits=logits, labels=labels,
        optimizer=tf.compat.v1.train.GradientDescentOptimizer(0.1),
        trainable_variables=tf.compat.v1.trainable_variables())

  return model_fn


def _plain_loss(loss):

  def model_fn(features, labels, mode):
    logits = tf.compat.v1.layers.dense(features['x'], 1)
    return tf.estimator.EstimatorSpec(mode, loss=loss(labels, logits),
                                      predictions=logits)

  return model_fn


@pytest.mark.parametrize('model_fn,expected', [
    (_keras(1, 'sigmoid', 'binary_crossentropy'),
     label_range.AcceptedLabels(1, False, 'sigmoid cross-entropy')),
    (_keras(1, None, tf.keras.losses.BinaryCrossentropy(from_logits=True)),
     label_range.AcceptedLabels(1, False, 'sigmoid cross-entropy')),
    (_keras(5, 'softmax', 'sparse_categorical_crossentropy'),
     label_range.AcceptedLabels(
         5, True, 'sparse softmax cross-entropy over 5 classes')),
    (_head(tf.estimator.BinaryClassHead()),
     label_range.AcceptedLabels(1, False, 'sigmoid cross-entropy')),
    (_head(tf.estimator.MultiClassHead(3)),
     label_range.AcceptedLabels(
         3, True, 'sparse softmax cross-entropy over 3 classes')),
    (_plain_loss(lambda labels, logits: tf.compat.v1.losses.sigmoid_cross_entropy(
        tf.reshape(labels, [-1, 1]), logits)),
     label_range.AcceptedLabels(1, False, 'sigmoid cross-entropy')),
    # Regression and labels that go through ops of the module's own: unknown.
    (_keras(1, None, 'mse'), None),
    (_plain_loss(lambda labels, logits: tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(
            labels=tf.cast(tf.reshape(labels, [-1, 1]), tf.float32) / 2.0,
            logits=logits))), None),
])
def test_accepted_labels_read_from_the_loss_in_the_graph(model_fn, expected):
  with tf.Graph().as_default():
    tf.compat.v1.train.create_global_step()
    features = {'x': tf.compat.v1.placeholder(tf.float32, [8, 1])}
    labels = tf.compat.v1.placeholder(tf.int64, [8, 1])
    estimator_spec_adapter.call_model_fn(
        model_fn, features, labels, tf.estimator.ModeKeys.EVAL,
        {'batch_size': 8, 'use_tpu': False},
        tf.estimator.RunConfig(model_dir=tempfile.mkdtemp()))
    assert label_range.accepted_labels_of_graph(labels) == expected


def test_bad_values_of_each_kind():
  binary = label_range.AcceptedLabels(1, False, 'sigmoid cross-entropy')
  classes = label_range.AcceptedLabels(3, True, 'softmax')
  values = np.array([0, 1, 0.5, 2, -1, 3, np.nan])
  assert binary.bad_mask(values).tolist() == [
      False, False, False, True, True, True, True]
  assert classes.bad_mask(values).tolist() == [
      False, False, True, False, True, True, True]
  assert binary.describe() == 'values in [0, 1]'
  assert classes.describe() == 'integers in [0, 3) (0 to 2)'


def _set_label(values_by_record):

  def edit(path):
    records = [r.numpy() for r in tf.data.TFRecordDataset(
        path, compression_type='GZIP')]
    with tf.io.TFRecordWriter(path, options='GZIP') as writer:
      for index, record in enumerate(records):
        if index in values_by_record:
          example = tf.train.Example.FromString(record)
          example.features.feature['big_tipper'].int64_list.value[:] = [
              values_by_record[index]]
          record = example.SerializeToString()
        writer.write(record)

  return edit


def _run_with_labels(taxi_artifacts, tmp_path, module_file, values_by_record,
                     split='train'):
  examples = reliability._copy_examples(  # pylint: disable=protected-access
      taxi_artifacts.transformed_examples, str(tmp_path / 'examples'))
  path = reliability._only_file(examples, split)  # pylint: disable=protected-access
  _set_label(values_by_record)(path)
  run = reliability._run_with_examples(  # pylint: disable=protected-access
      taxi_artifacts, tmp_path, examples, module_file=module_file,
      custom_config=SMALL_BATCHES, train_steps=5, eval_steps=2)
  return run, path


def _assert_fails_before_training(run, pattern):
  message = reliability._assert_fails_and_leaves_no_model(  # pylint: disable=protected-access
      run, label_range.LabelValueError, pattern)
  # No step ran: no checkpoint anywhere under the run's outputs.
  assert not tf.io.gfile.glob(os.path.join(run.model_run.uri, '*.index'))
  return message


@pytest.mark.slow
def test_model_fn_with_sigmoid_loss_rejects_labels_2_and_minus_1(
    taxi_artifacts, tmp_path):
  run, path = _run_with_labels(taxi_artifacts, tmp_path, LINEAR_MODULE,
                               {3: 2, 9: -1})
  message = _assert_fails_before_training(
      run,
      rf"The label 'big_tipper' of the 'train' split has values the model "
      rf'cannot take: 2 \(record 3 of {re.escape(path)}\), -1 \(record 9 of '
      rf'{re.escape(path)}\)\. The loss of the model in .*linear_module\.py '
      r'\(sigmoid cross-entropy\) accepts values in \[0, 1\]')
  assert 'Nothing was trained' in message


@pytest.mark.slow
def test_canned_binary_head_rejects_a_bad_eval_label(taxi_artifacts,
                                                     tmp_path):
  run, path = _run_with_labels(taxi_artifacts, tmp_path, BINARY_HEAD, {0: 7},
                               split='eval')
  _assert_fails_before_training(
      run,
      rf"The label 'big_tipper' of the 'eval' split has values the model "
      rf'cannot take: 7 \(record 0 of {re.escape(path)}\)\. The loss of the '
      r'model in .*binary_head_module\.py \(sigmoid cross-entropy\) accepts '
      r'values in \[0, 1\]')


@pytest.mark.slow
def test_keras_three_classes_reject_label_3(taxi_artifacts, tmp_path):
  run, path = _run_with_labels(taxi_artifacts, tmp_path, THREE_CLASS_KERAS,
                               {20: 3})
  _assert_fails_before_training(
      run,
      rf"The label 'big_tipper' of the 'train' split has values the model "
      rf'cannot take: 3 \(record 20 of {re.escape(path)}\)\. The loss of the '
      r'model in .*three_class_keras_module\.py \(sparse softmax '
      r'cross-entropy over 3 classes\) accepts integers in \[0, 3\) '
      r'\(0 to 2\)')


@pytest.mark.slow
def test_keras_three_classes_train_on_labels_that_fit(taxi_artifacts,
                                                      tmp_path):
  run, _ = _run_with_labels(taxi_artifacts, tmp_path, THREE_CLASS_KERAS,
                            {20: 2})
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))


_INPUT_FN_MODULE = '''
import tensorflow as tf

def input_fn(file_pattern, data_accessor, schema, params):
  labels = [0, 1, 1, 0] * 2 + [0, 5, 1, 1] + [0, 1, 1, 0]
  features = {'x': [[float(i)] for i in range(len(labels))]}
  return tf.data.Dataset.from_tensor_slices(
      (features, [[label] for label in labels])).batch(
          params['batch_size'], drop_remainder=True)

def model_fn(features, labels, mode, params):
  logits = tf.compat.v1.layers.dense(features['x'], 1)
  loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.cast(labels, tf.float32), logits=logits))
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
      mode, loss=loss, train_op=tf.compat.v1.train.GradientDescentOptimizer(
          0.1).minimize(loss, tf.compat.v1.train.get_global_step()),
      predictions={'logits': logits})
'''


def test_module_input_fn_labels_name_the_split_and_batch(tmp_path,
                                                         monkeypatch):
  module_file = tmp_path / 'input_fn_module.py'
  module_file.write_text(_INPUT_FN_MODULE)
  module = user_module.load_user_module({'module_file': str(module_file)})
  config = config_lib.TrainerConfig.from_custom_config(
      {'train_batch_size': 4, 'eval_batch_size': 4}, environ={})
  run = prepare.prepare_run(config, module, None)

  def split_input_fn(params):
    return module.input_fn(file_pattern=[], data_accessor=None, schema=None,
                           params=params)

  splits = [label_range.SplitSample(name, [], split_input_fn, 4)
            for name in ('train', 'eval')]
  with pytest.raises(label_range.LabelValueError) as error:
    label_range.check_first_labels(run, config, splits)
  assert re.match(
      r"The label \(from input_fn in .*input_fn_module\.py\) of the 'train' "
      r'split has values the model cannot take: 5 \(batch 2\)\. The loss of '
      r'the model in .*input_fn_module\.py \(sigmoid cross-entropy\) accepts '
      r'values in \[0, 1\]', str(error.value)), str(error.value)
  # Only the first CHECKED_BATCHES batches are read: past them, not seen.
  monkeypatch.setattr(label_range, 'CHECKED_BATCHES', 2)
  assert label_range.check_first_labels(run, config, splits) >= 0


@pytest.mark.slow
def test_canned_binary_head_trains_on_labels_that_fit(taxi_artifacts,
                                                      tmp_path):
  run, _ = _run_with_labels(taxi_artifacts, tmp_path, BINARY_HEAD, {0: 1})
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  assert os.path.isdir(path_utils.serving_model_dir(run.model.uri))
