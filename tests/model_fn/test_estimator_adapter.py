"""An Estimator model_fn (EstimatorSpec, eval_metric_ops) adapted for TPU."""

import json
import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer import estimator_adapter
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib

from tests.fixtures import model_fn_graphs
from tests.fixtures import pipeline_outputs
from tests.conftest import TEST_MODULES_DIR

ModeKeys = tf.estimator.ModeKeys
NAME = 'my_model_fn'
X = np.linspace(-2.0, 2.0, 8).astype(np.float32)
LABELS = np.array([0, 0, 1, 0, 1, 1, 0, 1], dtype=np.int64)


def _model_fn(optimizer='sgd', summary=False, print_op=False,
              metric_ops=None, chief_hooks=False):
  """An Estimator model_fn, made one way or another."""

  def model_fn(features, labels, mode, params):
    del params
    weight = tf.compat.v1.get_variable(
        'w', [1, 1], initializer=tf.compat.v1.ones_initializer())
    bias = tf.compat.v1.get_variable(
        'b', [1], initializer=tf.compat.v1.zeros_initializer())
    logits = tf.matmul(tf.reshape(features['x'], [-1, 1]), weight) + bias
    if print_op:
      logits = tf.compat.v1.Print(logits, [logits], 'logits')
    probabilities = tf.sigmoid(logits)
    predictions = {'probabilities': probabilities}
    if mode == ModeKeys.PREDICT:
      return tf.estimator.EstimatorSpec(mode, predictions=predictions)
    float_labels = tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=float_labels, logits=logits))
    if summary:
      tf.compat.v1.summary.scalar('train_loss', loss)
    if metric_ops is not None:
      eval_metric_ops = metric_ops(float_labels, probabilities, loss)
    else:
      eval_metric_ops = {
          'accuracy': tf.compat.v1.metrics.accuracy(
              float_labels, tf.cast(probabilities > 0.5, tf.float32)),
          'auc': tf.compat.v1.metrics.auc(float_labels, probabilities),
          'mean_loss': tf.compat.v1.metrics.mean(loss),
      }
    if optimizer == 'keras':
      variables = [weight, bias]
      train_op = tf.keras.optimizers.legacy.SGD(0.1).apply_gradients(
          zip(tf.gradients(loss, variables), variables))
    elif optimizer == 'by_hand':
      gradient = tf.gradients(loss, [weight])[0]
      train_op = tf.compat.v1.assign_sub(weight, 0.1 * gradient)
    else:
      sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
      if optimizer == 'cross_shard':
        sgd = tf.compat.v1.tpu.CrossShardOptimizer(sgd)
      train_op = sgd.minimize(loss, tf.compat.v1.train.get_global_step())
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=5)]
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, train_op=train_op, eval_metric_ops=eval_metric_ops,
        predictions=predictions,
        training_chief_hooks=hooks if chief_hooks else None)

  return model_fn


def _call(model_fn, mode, use_tpu=False, num_shards=None):
  """Calls model_fn in a new graph; returns the graph and the spec."""
  return model_fn_graphs.call_in_graph(model_fn, mode, {'x': X}, LABELS,
                                       use_tpu, num_shards)


def _run_metrics(graph, metric_ops):
  with graph.as_default(), tf.compat.v1.Session() as session:
    session.run([tf.compat.v1.global_variables_initializer(),
                 tf.compat.v1.local_variables_initializer()])
    session.run([update for _, update in metric_ops.values()])
    return session.run({name: value for name, (value, _) in
                        metric_ops.items()})


def test_metrics_move_to_a_metric_fn_with_the_same_values():
  original = _model_fn()
  graph, spec = _call(original, ModeKeys.EVAL)
  expected = _run_metrics(graph, spec.eval_metric_ops)

  adapted = estimator_adapter.to_tpu_model_fn(original, name=NAME)
  graph, tpu_spec = _call(adapted, ModeKeys.EVAL)
  assert isinstance(tpu_spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec)
  metric_fn, tensors = tpu_spec.eval_metrics
  # Each tensor argument travels through the outfeed; a scalar mean value
  # becomes one value per shard.
  assert {name: tuple(t.shape) for name, t in tensors.items()} == {
      '0_accuracy_labels': (8, 1), '1_accuracy_predictions': (8, 1),
      '2_auc_labels': (8, 1), '3_auc_predictions': (8, 1),
      '4_mean_values': (1,)}
  with graph.as_default():
    metric_ops = metric_fn(**tensors)
  assert sorted(metric_ops) == ['accuracy', 'auc', 'mean_loss']
  assert _run_metrics(graph, metric_ops) == pytest.approx(expected)


def test_train_on_tpu_sums_gradients_across_shards():
  adapted = estimator_adapter.to_tpu_model_fn(_model_fn(), name=NAME)
  graph, spec = _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  sums = [op for op in graph.get_operations() if op.type == 'CrossReplicaSum']
  assert [op.name.split('/')[0] for op in sums] == ['cross_shard_gradients'] * 2
  assert spec.train_op is not None
  # Metrics built in TRAIN mode are stand-ins: no metric variables.
  with graph.as_default():
    assert not tf.compat.v1.local_variables()


def test_legacy_keras_optimizer_is_summed_across_shards():
  adapted = estimator_adapter.to_tpu_model_fn(_model_fn(optimizer='keras'),
                                              name=NAME)
  graph, _ = _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  assert [op.type for op in graph.get_operations()].count(
      'CrossReplicaSum') == 2  # weight and bias


def _canned_model_fn():
  columns = [tf.feature_column.numeric_column('x')]
  return tf.estimator.DNNLinearCombinedClassifier(
      linear_feature_columns=columns, dnn_feature_columns=columns,
      dnn_hidden_units=[2])._model_fn


def test_canned_head_metrics_move_to_the_metric_fn():
  # Finding 5: the head's Keras metrics (average_loss, ...) were an error.
  adapted = estimator_adapter.to_tpu_model_fn(_canned_model_fn(), name=NAME)
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.train.create_global_step()
    spec = adapted({'x': tf.constant(X)}, tf.constant(LABELS[:, None]),
                   ModeKeys.EVAL, {'batch_size': 8, 'use_tpu': False})
    metric_fn, tensors = spec.eval_metrics
    metric_ops = metric_fn(**tensors)
  assert sorted(tensors) == ['label_0', 'logits']
  assert {'accuracy', 'auc', 'average_loss', 'precision',
          'recall'} <= set(metric_ops)
  values = _run_metrics(graph, metric_ops)
  assert 0.0 <= values['accuracy'] <= 1.0 and values['average_loss'] > 0


def test_canned_v1_summaries_are_dropped_on_tpu_with_a_warning(
    absl_warnings):
  adapted = estimator_adapter.to_tpu_model_fn(_canned_model_fn(), name=NAME,
                                              drop_v1_summaries=True)
  graph, _ = _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  assert not [op for op in graph.get_operations()
              if op.type in ('ScalarSummary', 'HistogramSummary')]
  assert 'Dropped' in absl_warnings.text
  assert 'a TPU computation cannot run them' in absl_warnings.text


def test_canned_v1_summaries_are_listed_with_the_drop_option():
  adapted = estimator_adapter.to_tpu_model_fn(_canned_model_fn(), name=NAME)
  with pytest.raises(estimator_adapter.AdapterError) as error:
    _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  message = str(error.value)
  assert message.startswith(f'{NAME} creates the v1 summaries ')
  assert message.count('Summary)') >= 2
  assert message.endswith(
      "for a model_fn you do not edit (a canned Estimator's), drop them with "
      'a warning: to_tpu_model_fn(model_fn, drop_v1_summaries=True).')


def test_own_cross_shard_optimizer_is_not_summed_twice():
  adapted = estimator_adapter.to_tpu_model_fn(
      _model_fn(optimizer='cross_shard'), name=NAME)
  graph, _ = _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  sums = [op for op in graph.get_operations() if op.type == 'CrossReplicaSum']
  assert len(sums) == 2
  assert not any(op.name.startswith('cross_shard_gradients') for op in sums)


def test_cpu_train_is_unchanged():
  adapted = estimator_adapter.to_tpu_model_fn(_model_fn(summary=True),
                                              name=NAME)
  graph, spec = _call(adapted, ModeKeys.TRAIN)
  assert not [op for op in graph.get_operations()
              if op.type == 'CrossReplicaSum']
  with graph.as_default(), tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    session.run(spec.train_op)
    assert session.run(tf.compat.v1.train.get_global_step()) == 1


def test_tensorflow_is_restored_after_the_call():
  metric_functions = {name: getattr(tf.compat.v1.metrics, name)
                      for name in ('accuracy', 'auc', 'mean')}
  apply_gradients = tf.compat.v1.train.Optimizer.apply_gradients

  def failing(features, labels, mode, params):
    del features, labels, mode, params
    raise RuntimeError('model_fn failed')

  for model_fn in (_model_fn(), failing):
    adapted = estimator_adapter.to_tpu_model_fn(model_fn, name=NAME)
    try:
      _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
    except RuntimeError:
      pass
    assert tf.compat.v1.train.Optimizer.apply_gradients is apply_gradients
    for name, function in metric_functions.items():
      assert getattr(tf.compat.v1.metrics, name) is function


def test_patches_are_gone_after_the_call_and_left_as_found():
  from tensorflow_estimator.python.estimator.head import base_head  # pylint: disable=g-import-not-at-top
  found = {
      (tf.compat.v1.metrics, 'mean'): vars(tf.compat.v1.metrics)['mean'],
      (tf.compat.v1.summary, 'scalar'): vars(tf.compat.v1.summary)['scalar'],
      (base_head, 'create_eval_metrics_tuple'):
          vars(base_head)['create_eval_metrics_tuple'],
      (tf.keras.optimizers.legacy.Optimizer, 'apply_gradients'):
          vars(tf.keras.optimizers.legacy.Optimizer)['apply_gradients'],
  }
  adapted = estimator_adapter.to_tpu_model_fn(
      _model_fn(summary=True), name=NAME, drop_v1_summaries=True)
  _call(adapted, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  _call(adapted, ModeKeys.EVAL)
  for (owner, name), original in found.items():
    assert vars(owner)[name] is original, name
    assert not model_fn_graphs.is_patched(owner, name), name


def test_a_second_thread_building_graphs_is_not_affected():
  """While one adapter's model_fn runs, another thread sees plain TF."""
  entered, release = threading.Event(), threading.Event()
  building = {}

  def blocking_model_fn(features, labels, mode, params):
    spec = _model_fn()(features, labels, mode, params)
    entered.set()
    release.wait()
    return spec

  def first():
    adapted = estimator_adapter.to_tpu_model_fn(blocking_model_fn, name=NAME)
    building['first'] = _call(adapted, ModeKeys.TRAIN, use_tpu=True,
                              num_shards=8)

  thread = threading.Thread(target=first)
  thread.start()
  try:
    entered.wait()
    # The first adapter's patches are installed now, for its thread only.
    assert model_fn_graphs.is_patched(tf.compat.v1.metrics, 'mean')
    assert model_fn_graphs.is_patched(tf.compat.v1.train.Optimizer, 'apply_gradients')
    plain_graph, plain_spec = _call(_model_fn(), ModeKeys.TRAIN)
    second = estimator_adapter.to_tpu_model_fn(_model_fn(), name='second')
    second_graph, second_spec = _call(second, ModeKeys.EVAL)
  finally:
    release.set()
    thread.join()
  # Plain TF in this thread: real metrics, no cross-shard sums.
  assert not any(op.type == 'CrossReplicaSum'
                 for op in plain_graph.get_operations())
  assert sorted(plain_spec.eval_metric_ops) == ['accuracy', 'auc', 'mean_loss']
  with plain_graph.as_default():
    assert tf.compat.v1.local_variables()
  # The second adapter recorded its own metric calls, and only those.
  _, tensors = second_spec.eval_metrics
  assert sorted(tensors) == ['0_accuracy_labels', '1_accuracy_predictions',
                             '2_auc_labels', '3_auc_predictions',
                             '4_mean_values']
  del second_graph
  # The first adapter summed its gradients across its 8 shards.
  first_graph, _ = building['first']
  assert sum(op.type == 'CrossReplicaSum'
             for op in first_graph.get_operations()) == 2
  assert not model_fn_graphs.is_patched(tf.compat.v1.metrics, 'mean')


def test_model_fn_without_params_is_called_with_what_it_takes():

  def model_fn(features, mode):
    predictions = {'x': features['x'] * 2}
    return tf.estimator.EstimatorSpec(mode, predictions=predictions)

  adapted = estimator_adapter.to_tpu_model_fn(model_fn, name=NAME)
  _, spec = _call(adapted, ModeKeys.PREDICT)
  assert list(spec.predictions) == ['x']
  assert list(spec.export_outputs) == ['serving_default']


def test_tpu_estimator_spec_passes_through():
  spec = tf.compat.v1.estimator.tpu.TPUEstimatorSpec(ModeKeys.PREDICT,
                                                     predictions={})
  adapted = estimator_adapter.to_tpu_model_fn(
      lambda features, labels, mode, params: spec, name=NAME)
  assert _call(adapted, ModeKeys.PREDICT)[1] is spec


def _keras_mean(labels, probabilities, loss):
  del labels, probabilities
  mean = tf.keras.metrics.Mean()
  mean.update_state(loss)
  return {'keras_mean': mean}


@pytest.mark.parametrize('model_fn,mode,use_tpu,message', [
    (_model_fn(optimizer='by_hand'), ModeKeys.TRAIN, True,
     'my_model_fn trains without averaging gradients across the 8 TPU '
     'shards: its optimizer does not apply gradients through the '
     'apply_gradients of a tf.compat.v1.train or tf.keras.optimizers.legacy '
     'optimizer (a new-style Keras optimizer, an optimizer that overrides '
     'apply_gradients, or variables assigned by hand). Use one of those '
     'optimizers, or wrap yours in tf.compat.v1.tpu.CrossShardOptimizer when '
     "params['use_tpu']."),
    (_model_fn(summary=True), ModeKeys.TRAIN, True,
     "my_model_fn creates the v1 summary 'train_loss' (ScalarSummary) in mode "
     "'train'; TPU computations reject v1 summaries. Remove them from the "
     'model_fn, or compute them in a TPUEstimatorSpec host_call with '
     "tf.summary (v2); for a model_fn you do not edit (a canned Estimator's), "
     'drop them with a warning: to_tpu_model_fn(model_fn, '
     'drop_v1_summaries=True).'),
    (_model_fn(print_op=True), ModeKeys.EVAL, True,
     "my_model_fn creates the op 'Print' (Print) in mode 'eval'; TPU "
     'computations reject v1 summaries and tf.compat.v1.Print. Remove it '
     'from the model_fn, or compute it in a TPUEstimatorSpec host_call with '
     'tf.summary (v2).'),
    (_model_fn(metric_ops=lambda labels, probabilities, loss: {
        'accuracy_percent': tuple(
            (value * 100.0, update) for value, update in
            [tf.compat.v1.metrics.accuracy(labels, probabilities)])[0]}),
     ModeKeys.EVAL, False,
     "eval_metric_ops['accuracy_percent'] returned by my_model_fn is not the "
     'unchanged result of a tf.compat.v1.metrics.* call; the adapter can '
     'move into a TPU metric_fn only results of tf.compat.v1.metrics '
     "functions, returned as they are. Return the metric call's (value, "
     'update_op), or write a TPUEstimatorSpec with eval_metrics=(metric_fn, '
     'tensors).'),
    (_model_fn(metric_ops=_keras_mean), ModeKeys.EVAL, False,
     # EstimatorSpec turns a Keras Metric into (result, update) itself.
     "eval_metric_ops['keras_mean'] returned by my_model_fn is not the "
     'unchanged result of a tf.compat.v1.metrics.* call; the adapter can '
     'move into a TPU metric_fn only results of tf.compat.v1.metrics '
     "functions, returned as they are. Return the metric call's (value, "
     'update_op), or write a TPUEstimatorSpec with eval_metrics=(metric_fn, '
     'tensors).'),
    (_model_fn(metric_ops=lambda labels, probabilities, loss: {
        'accuracy': tf.compat.v1.metrics.accuracy(
            labels, probabilities, weights=tf.constant(2.0))}),
     ModeKeys.EVAL, False,
     "eval_metric_ops['accuracy'] in my_model_fn: argument 'weights' of "
     'tf.compat.v1.metrics.accuracy is a scalar. TPU metric tensors go to '
     'the host through the outfeed, which concatenates shards on the first '
     '(batch) axis: pass a tensor with a batch axis.'),
    (_model_fn(chief_hooks=True), ModeKeys.TRAIN, False,
     'my_model_fn returns training_chief_hooks, which TPUEstimator does not '
     'run. Pass them as training_hooks.'),
    (lambda features, labels, mode, params: {'loss': 1.0}, ModeKeys.TRAIN,
     False, "my_model_fn must return a tf.estimator.EstimatorSpec, got dict "
     "in mode 'train'."),
])
def test_what_cannot_be_adapted_is_named(model_fn, mode, use_tpu, message):
  adapted = estimator_adapter.to_tpu_model_fn(model_fn, name=NAME)
  with pytest.raises(estimator_adapter.AdapterError) as error:
    _call(adapted, mode, use_tpu=use_tpu, num_shards=8 if use_tpu else None)
  assert str(error.value) == message


def test_summary_is_kept_on_cpu():
  adapted = estimator_adapter.to_tpu_model_fn(_model_fn(summary=True),
                                              name=NAME)
  graph, _ = _call(adapted, ModeKeys.TRAIN)
  assert [op.type for op in graph.get_operations()
          if op.name == 'train_loss'] == ['ScalarSummary']


def test_default_name_is_module_and_function():
  adapted = estimator_adapter.to_tpu_model_fn(_keras_mean)
  assert adapted.__doc__ == (
      'TPU model_fn adapted from '
      'tests.model_fn.test_estimator_adapter._keras_mean.')


@pytest.mark.slow
def test_adapted_module_trains_through_the_executor(taxi_artifacts,
                                                    tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path),
      os.path.join(TEST_MODULES_DIR, 'estimator_adapted_module.py'),
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16},
      train_steps=20, eval_steps=3)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    metrics = json.load(f)
  assert sorted(metrics) == ['accuracy', 'auc', 'global_step', 'loss',
                             'mean_loss']
  assert metrics['global_step'] == 20
  assert metrics['mean_loss'] == pytest.approx(metrics['loss'], rel=1e-5)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 4)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  assert outputs['probabilities'].shape == (4, 1)
