"""The Keras path: a compiled tf.keras model trained as a TPU model_fn."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.model_fn import keras_adapter as keras_model_fn
from tfx_tpu_trainer.model_fn import keras_compile
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.publishing import serving
from tfx_tpu_trainer.training import estimator_builder
from tfx_tpu_trainer.training import schedule

from tests import conftest
from tests.fixtures import model_fn_graphs
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models

SOURCE = 'test_module.py'


def _keras_model_fn(build):
  return keras_model_fn.make_keras_model_fn(
      user_module.ModuleFunction('build_keras_model', SOURCE, build))

TAXI_KERAS_MODULE = os.path.join(conftest.REPO_ROOT, 'components',
                                 'taxi_keras_module.py')
FEATURES = {
    'fare_xf': np.linspace(-1.0, 1.0, 8).astype(np.float32),
    'hour_xf': np.arange(8, dtype=np.int64),
}
LABELS = np.array([0, 1, 0, 1, 1, 0, 0, 1], dtype=np.int64)
ModeKeys = tf.estimator.ModeKeys


def _default_compile():
  return dict(optimizer=tf.keras.optimizers.Adam(0.01),
              loss='binary_crossentropy',
              metrics=['accuracy', tf.keras.metrics.AUC(name='auc')])


def _tiny_model(compile_kwargs=None):
  """Two inputs named like features; embedding, dense, batch norm, sigmoid."""
  fare = tf.keras.Input(shape=(1,), name='fare_xf')
  hour = tf.keras.Input(shape=(), dtype=tf.int64, name='hour_xf')
  embedded = tf.keras.layers.Embedding(24, 2, name='hour_embedding')(hour)
  net = tf.keras.layers.Concatenate(name='inputs')([fare, embedded])
  net = tf.keras.layers.Dense(4, activation='relu', name='hidden',
                              kernel_regularizer='l2')(net)
  net = tf.keras.layers.BatchNormalization(name='norm')(net)
  output = tf.keras.layers.Dense(1, activation='sigmoid',
                                 name='probabilities')(net)
  model = tf.keras.Model([fare, hour], output)
  if compile_kwargs is not False:
    model.compile(**(compile_kwargs or _default_compile()))
  return model


def _build(params):
  del params
  return _tiny_model()


def _call(model_fn, mode, use_tpu=False, num_shards=None, features=None,
          labels=LABELS):
  """Calls model_fn in a new graph; returns the graph and the spec."""
  return model_fn_graphs.call_in_graph(model_fn, mode, features or FEATURES,
                                       labels, use_tpu, num_shards)


def _variable_names(graph):
  with graph.as_default():
    return sorted(v.op.name for v in tf.compat.v1.global_variables())


def test_conform_features_fits_each_model_input():
  # What the benchmark's Keras input loop uses too (benchmarks/measure.py).
  model = _tiny_model()
  features = dict(FEATURES, fare_xf=FEATURES['fare_xf'].astype(np.float64))
  conformed = keras_model_fn.conform_features(model, features)
  assert {name: (tuple(t.shape), t.dtype) for name, t in conformed.items()} == {
      'fare_xf': ((8, 1), tf.float32), 'hour_xf': ((8,), tf.int64)}
  np.testing.assert_allclose(conformed['fare_xf'].numpy()[:, 0],
                             FEATURES['fare_xf'])
  with pytest.raises(keras_model_fn.KerasModelError,
                     match=r"Feature 'fare_xf' has shape \(8, 2\), which "
                     r'does not fit the model input shape \(None, 1\)'):
    keras_model_fn.conform_features(
        model, dict(FEATURES, fare_xf=np.zeros([8, 2], np.float32)))


def test_train_on_tpu_sums_gradients_across_shards():
  model_fn = _keras_model_fn(_build)
  graph, spec = _call(model_fn, ModeKeys.TRAIN, use_tpu=True, num_shards=8)
  assert isinstance(spec, tf.compat.v1.estimator.tpu.TPUEstimatorSpec)
  cross_replica_sums = [op for op in graph.get_operations()
                        if op.type == 'CrossReplicaSum']
  # One sum per trainable variable: embedding, hidden, norm, probabilities.
  assert len(cross_replica_sums) == 7
  model_variables = [name for name in _variable_names(graph)
                     if '/Adam' not in name]
  assert model_variables == [
      'beta1_power', 'beta2_power', 'global_step', 'hidden/bias',
      'hidden/kernel', 'hour_embedding/embeddings', 'norm/beta', 'norm/gamma',
      'norm/moving_mean', 'norm/moving_variance', 'probabilities/bias',
      'probabilities/kernel'
  ]


def test_cpu_train_step_updates_weights_and_batch_norm_statistics():
  model_fn = _keras_model_fn(_build)
  graph, spec = _call(model_fn, ModeKeys.TRAIN)
  assert not [op for op in graph.get_operations()
              if op.type == 'CrossReplicaSum']
  with graph.as_default(), tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
    kernel_before = session.run(variables['probabilities/kernel'])
    session.run(spec.train_op)
    assert session.run(variables['global_step']) == 1
    assert np.any(session.run(variables['norm/moving_mean']) != 0)
    assert np.any(
        session.run(variables['probabilities/kernel']) != kernel_before)


def test_bfloat16_builds_the_keras_model_under_mixed_bfloat16():
  model_fn = _keras_model_fn(_build)
  graph, spec = model_fn_graphs.call_in_graph(
      model_fn, ModeKeys.TRAIN, FEATURES, LABELS,
      params={'use_bfloat16': True})
  # The math in bfloat16, the variables and the loss in float32; the
  # global Keras policy as it was.
  assert any(op.type == 'MatMul' and op.outputs[0].dtype == tf.bfloat16
             for op in graph.get_operations())
  with graph.as_default():
    assert {v.dtype.base_dtype for v in tf.compat.v1.global_variables()
            if 'global_step' not in v.op.name} == {tf.float32}
  assert spec.loss.dtype == tf.float32
  assert tf.keras.mixed_precision.global_policy().name == 'float32'
  with graph.as_default(), tf.compat.v1.Session() as session:
    session.run(tf.compat.v1.global_variables_initializer())
    losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(3)]
  assert np.isfinite(losses).all()
  _, predict = model_fn_graphs.call_in_graph(
      model_fn, ModeKeys.PREDICT, FEATURES, None,
      params={'use_bfloat16': True})
  assert predict.predictions['probabilities'].dtype == tf.float32
  float_graph, _ = _call(model_fn, ModeKeys.TRAIN)
  assert not any(t.dtype == tf.bfloat16 for op in float_graph.get_operations()
                 for t in op.outputs)


def test_graphs_with_the_same_params_share_one_built_model():
  calls = []

  def build(params):
    calls.append(dict(params))
    return _tiny_model()

  model_fn = _keras_model_fn(build)
  graphs = [_call(model_fn, mode)[0]
            for mode in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.EVAL)]
  assert calls == [{'batch_size': 8, 'use_tpu': False}]
  # Each graph still has its own variables, named as in the first.
  assert _variable_names(graphs[1]) == _variable_names(graphs[2])
  assert 'hidden/kernel' in _variable_names(graphs[0])
  _call(model_fn, ModeKeys.EVAL, use_tpu=True)
  assert calls[1:] == [{'batch_size': 8, 'use_tpu': True}]


def test_predictions_are_keyed_by_output_names():
  model_fn = _keras_model_fn(_build)
  _, spec = _call(model_fn, ModeKeys.PREDICT, labels=None)
  assert list(spec.predictions) == ['probabilities']
  assert spec.predictions['probabilities'].shape == (8, 1)
  serving_output = spec.export_outputs['serving_default']
  assert isinstance(serving_output, tf.estimator.export.PredictOutput)
  assert list(serving_output.outputs) == ['probabilities']


def test_eval_loss_and_metrics_equal_keras_on_the_same_predictions():
  model_fn = _keras_model_fn(_build)
  graph, spec = _call(model_fn, ModeKeys.EVAL)
  metric_fn, tensors = spec.eval_metrics
  assert sorted(tensors) == ['label_0', 'prediction_0']
  with graph.as_default():
    metrics = metric_fn(**tensors)
    assert sorted(metrics) == ['accuracy', 'auc']
    with tf.compat.v1.Session() as session:
      session.run([tf.compat.v1.global_variables_initializer(),
                   tf.compat.v1.local_variables_initializer()])
      session.run([update for _, update in metrics.values()])
      values = session.run({name: value for name, (value, _) in
                            metrics.items()})
      kernel = [v for v in tf.compat.v1.global_variables()
                if v.op.name == 'hidden/kernel'][0]
      loss, predictions, kernel = session.run(
          [spec.loss, tensors['prediction_0'], kernel])
  labels = LABELS.reshape(-1, 1).astype(np.float32)
  keras_loss = (tf.keras.losses.binary_crossentropy(labels, predictions)
                .numpy().mean() + 0.01 * np.square(kernel).sum())
  assert loss == pytest.approx(keras_loss, rel=1e-5)
  accuracy = tf.keras.metrics.BinaryAccuracy()
  accuracy.update_state(labels, predictions)
  auc = tf.keras.metrics.AUC()
  auc.update_state(labels, predictions)
  assert values['accuracy'] == pytest.approx(accuracy.result().numpy())
  assert values['auc'] == pytest.approx(auc.result().numpy(), abs=1e-3)


def test_rank_one_feature_feeds_a_rank_two_input_and_casts_dtypes():
  features = dict(FEATURES, hour_xf=FEATURES['hour_xf'].astype(np.int32))
  model_fn = _keras_model_fn(_build)
  _, spec = _call(model_fn, ModeKeys.PREDICT, features=features, labels=None)
  assert spec.predictions['probabilities'].shape == (8, 1)


def test_sequential_model_works():

  def build(params):
    del params
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(1,), name='fare_xf'),
        tf.keras.layers.Dense(1, activation='sigmoid', name='probability'),
    ])
    model.compile(optimizer='sgd', loss='binary_crossentropy')
    return model

  model_fn = _keras_model_fn(build)
  _, spec = _call(model_fn, ModeKeys.TRAIN, use_tpu=True, num_shards=2)
  assert spec.train_op is not None


class _Subclassed(tf.keras.Model):

  def __init__(self):
    super().__init__()
    self.dense = tf.keras.layers.Dense(1)

  def call(self, inputs):
    return self.dense(inputs)


def _subclassed(params):
  del params
  model = _Subclassed()
  model.compile(optimizer='sgd', loss='mse')
  return model


def _raises(params):
  del params
  raise RuntimeError('no model today')


@pytest.mark.parametrize('build,mode,features,message', [
    (_build, ModeKeys.TRAIN, {'fare_xf': FEATURES['fare_xf']},
     "build_keras_model in test_module.py: the Keras model has input "
     "'hour_xf', which is not a feature (features: ['fare_xf']). Name each "
     'tf.keras.Input after the feature it reads.'),
    (lambda params: _tiny_model(compile_kwargs=False), ModeKeys.TRAIN, None,
     'build_keras_model in test_module.py: returned a model that is not '
     'compiled; call model.compile(optimizer=..., loss=..., metrics=...) '
     'before returning it.'),
    (_raises, ModeKeys.TRAIN, None,
     'build_keras_model in test_module.py raised RuntimeError: no model '
     'today'),
    (lambda params: {'model': None}, ModeKeys.PREDICT, None,
     'build_keras_model in test_module.py: must return a compiled tf.keras '
     'Model, got dict.'),
    (_build, ModeKeys.TRAIN,
     dict(FEATURES, fare_xf=np.zeros([8, 3], np.float32)),
     "build_keras_model in test_module.py: Feature 'fare_xf' has shape "
     '(8, 3), which does not fit the model input shape (None, 1).'),
])
def test_model_errors_name_what_to_change(build, mode, features, message):
  model_fn = _keras_model_fn(build)
  with pytest.raises(user_module.UserModuleError) as error:
    _call(model_fn, mode, features=features)
  assert str(error.value) == message
  assert isinstance(error.value, user_module.UserModuleError)


def test_subclassed_model_is_refused():
  model_fn = _keras_model_fn(_subclassed)
  with pytest.raises(keras_model_fn.KerasModelError) as error:
    _call(model_fn, ModeKeys.PREDICT)
  assert str(error.value) == (
      'build_keras_model in test_module.py: the model (_Subclassed) has no '
      'symbolic inputs and outputs (a subclassed model?). The TPU model_fn '
      'rebuilds the model inside the estimator graph with '
      'tf.keras.models.clone_model, which needs a functional or Sequential '
      'model with tf.keras.Input layers.')


def test_uncompiled_model_can_still_predict():
  model_fn = _keras_model_fn(lambda params: _tiny_model(compile_kwargs=False))
  _, spec = _call(model_fn, ModeKeys.PREDICT, labels=None)
  assert list(spec.predictions) == ['probabilities']


def _v1_updates(optimizer_spec, gradients, steps, global_step=0):
  """Variable values after `steps` v1 updates with the given gradients."""
  graph = tf.Graph()
  with graph.as_default():
    step = tf.compat.v1.train.create_global_step()
    variable = tf.compat.v1.get_variable(
        'v', initializer=tf.constant([1.0, -2.0]))
    optimizer = optimizer_spec.build(step)
    apply = optimizer.apply_gradients([(tf.constant(gradients), variable)])
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      step.load(global_step, session)
      for _ in range(steps):
        session.run(apply)
      return session.run(variable)


def _keras_updates(optimizer, gradients, steps):
  variable = tf.Variable([1.0, -2.0])
  for _ in range(steps):
    optimizer.apply_gradients([(tf.constant(gradients), variable)])
  return variable.numpy()


@pytest.mark.parametrize('make_optimizer,v1_class', [
    (lambda: tf.keras.optimizers.SGD(0.1), 'GradientDescentOptimizer'),
    (lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
     'MomentumOptimizer'),
    (lambda: tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9),
     'MomentumOptimizer'),
    (lambda: tf.keras.optimizers.Adam(0.01, beta_1=0.8),
     'ElementwiseAdamOptimizer'),
    (lambda: tf.keras.optimizers.legacy.Adam(0.01),
     'ElementwiseAdamOptimizer'),
    (lambda: tf.keras.optimizers.Adagrad(0.1), 'AdagradOptimizer'),
    (lambda: tf.keras.optimizers.RMSprop(0.01, momentum=0.5),
     '_ZeroStartRMSPropOptimizer'),
    (lambda: tf.keras.optimizers.RMSprop(0.01, centered=True),
     '_ZeroStartRMSPropOptimizer'),
    (lambda: tf.keras.optimizers.Adadelta(1.0), 'AdadeltaOptimizer'),
    (lambda: tf.keras.optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
     'FtrlOptimizer'),
])
def test_keras_optimizer_becomes_the_same_v1_algorithm(make_optimizer,
                                                       v1_class):
  gradients = [0.5, -1.5]
  spec = keras_compile.read_optimizer(make_optimizer())
  with tf.Graph().as_default():
    assert type(spec.build(tf.constant(0, tf.int64))).__name__ == v1_class
  expected = _keras_updates(make_optimizer(), gradients, steps=3)
  assert _v1_updates(spec, gradients, steps=3) == pytest.approx(
      expected, rel=1e-3, abs=1e-4)


def _adam_run(optimizer_class, sparse):
  """Weights, slots and variable names after 7 steps of one v1 Adam class."""
  graph = tf.Graph()
  with graph.as_default():
    table = tf.compat.v1.get_variable(
        'table', [5, 3],
        initializer=tf.compat.v1.random_normal_initializer(seed=1))
    scale = tf.compat.v1.get_variable('scale', [3],
                                      initializer=tf.ones_initializer())
    # Row 2 twice: duplicate indices in the sparse gradient.
    rows = (tf.nn.embedding_lookup(table, tf.constant([0, 2, 2, 4]))
            if sparse else table)
    loss = tf.reduce_sum(tf.square(rows * scale - 1.0))
    optimizer = optimizer_class(0.05, beta1=0.8, beta2=0.99, epsilon=1e-6)
    train_op = optimizer.minimize(
        loss, global_step=tf.compat.v1.train.create_global_step())
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      for _ in range(7):
        session.run(train_op)
      values = session.run({variable.op.name: variable
                            for variable in tf.compat.v1.global_variables()})
    op_types = {op.type for op in graph.get_operations()}
  return values, op_types


@pytest.mark.parametrize('sparse', [False, True])
def test_elementwise_adam_is_v1_adam_without_its_kernel(sparse):
  expected, v1_ops = _adam_run(tf.compat.v1.train.AdamOptimizer, sparse)
  values, ops = _adam_run(keras_compile.ElementwiseAdamOptimizer, sparse)
  # Same variables (slots m and v, beta powers): checkpoints interchange.
  assert sorted(values) == sorted(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(values[name], value, rtol=1e-5, atol=1e-6,
                               err_msg=name)
  assert 'ResourceApplyAdam' in v1_ops
  assert 'ResourceApplyAdam' not in ops
  assert 'ResourceScatterAdd' not in ops


def test_learning_rate_schedule_follows_the_global_step():
  schedule = tf.keras.optimizers.schedules.ExponentialDecay(
      0.1, decay_steps=10, decay_rate=0.5)
  spec = keras_compile.read_optimizer(tf.keras.optimizers.SGD(schedule))
  # At step 10 the rate is 0.05: one step with gradient 1 moves by 0.05.
  assert _v1_updates(spec, [1.0, 1.0], steps=1, global_step=10) == (
      pytest.approx([0.95, -2.05]))


@pytest.mark.parametrize('optimizer,message', [
    (tf.keras.optimizers.Nadam(),
     'the model is compiled with the Nadam optimizer, which has no '
     'tf.compat.v1.train counterpart that TPU training can use. Use one of '
     "['Adadelta', 'Adagrad', 'Adam', 'Ftrl', 'RMSprop', 'SGD'], or write a "
     'model_fn.'),
    (tf.keras.optimizers.Adam(clipnorm=1.0),
     'the model is compiled with '
     'Adam(clipnorm=1.0); the tf.compat.v1.train optimizer used for TPU '
     'training has no clipnorm. Remove clipnorm from the optimizer, or write '
     'a model_fn.'),
    (tf.keras.optimizers.Adam(amsgrad=True),
     'the model is compiled with '
     'Adam(amsgrad=True); the tf.compat.v1.train optimizer used for TPU '
     'training has no amsgrad. Remove amsgrad from the optimizer, or write a '
     'model_fn.'),
    (tf.keras.optimizers.legacy.SGD(0.1, decay=0.01),
     'the model is compiled with '
     'SGD(decay=0.01); the tf.compat.v1.train optimizer used for TPU '
     'training has no decay. Remove decay from the optimizer, or write a '
     'model_fn.'),
])
def test_unsupported_optimizer_settings(optimizer, message):
  with pytest.raises(keras_compile.KerasModelError) as error:
    keras_compile.read_optimizer(optimizer)
  assert str(error.value) == message


def _two_output_model(metrics, loss=None, weighted_metrics=None):
  features = tf.keras.Input(shape=(3,), name='x')
  binary = tf.keras.layers.Dense(1, activation='sigmoid', name='p')(features)
  classes = tf.keras.layers.Dense(4, activation='softmax', name='c')(features)
  model = tf.keras.Model(features, [binary, classes])
  model.compile(
      optimizer='sgd',
      loss=loss or {'p': 'binary_crossentropy',
                    'c': 'sparse_categorical_crossentropy'},
      loss_weights={'p': 1.0, 'c': 0.5},
      metrics=metrics, weighted_metrics=weighted_metrics)
  return model


def test_metrics_map_per_output_with_keras_names():
  model = _two_output_model({
      'p': ['accuracy', 'AUC', tf.keras.metrics.Precision(thresholds=0.3)],
      'c': ['accuracy', 'sparse_categorical_crossentropy'],
  })
  spec = keras_compile.read_compile_spec(model)
  assert [(m.name, m.output_name, m.kind) for m in spec.metrics] == [
      ('p_accuracy', 'p', 'binary_accuracy'),
      ('p_auc', 'p', 'auc'),
      ('p_precision', 'p', 'precision'),
      ('c_accuracy', 'c', 'sparse_categorical_accuracy'),
      ('c_sparse_categorical_crossentropy', 'c',
       'sparse_categorical_crossentropy'),
  ]
  assert spec.metrics[2].options == {'threshold': 0.3}
  assert spec.loss.weights == {'p': 1.0, 'c': 0.5}


@pytest.mark.parametrize('metrics,weighted_metrics,message', [
    (['top_k_categorical_accuracy'], None,
     "metric 'top_k_categorical_accuracy' has no tf.compat.v1.metrics "
     'equivalent that TPU evaluation can compute on the host. Use metrics '
     'from '),
    ([tf.keras.metrics.AUC(multi_label=True)], None,
     "metric 'auc' is a multi-label "
     'or label-weighted AUC; the TPU metric computes a single AUC. Remove '
     'multi_label/label_weights.'),
    (None, ['accuracy'],
     'the model compiles weighted_metrics; TPU '
     'training here has no sample weights. Pass them as metrics.'),
])
def test_unsupported_metrics(metrics, weighted_metrics, message):
  model = _two_output_model(metrics, weighted_metrics=weighted_metrics)
  with pytest.raises(keras_compile.KerasModelError) as error:
    keras_compile.read_compile_spec(model)
  assert str(error.value).startswith(message)


def _taxi_estimator(taxi_artifacts, model_dir, module, warm_start_from=None):
  schemas = schemas_lib.load_schemas(None, taxi_artifacts.transform_graph.uri)
  config = config_lib.TrainerConfig.from_custom_config(
      {'train_batch_size': 16, 'eval_batch_size': 16})
  params = prepare.build_params(config, None)
  estimator = estimator_builder.build_estimator(
      dispatch.model_fn_for_module(module), config,
      estimator_builder.build_run_config(config, model_dir), params,
      warm_start_from=warm_start_from)
  return estimator, config, schemas, params


@pytest.mark.slow
def test_taxi_keras_module_trains_and_exports_both_tag_sets(taxi_artifacts,
                                                            tmp_path):
  # The executor's steps, with the model_fn chosen by model_fn_for_module.
  module = user_module.load_user_module({'module_file': TAXI_KERAS_MODULE})
  assert module.model_fn is None and module.build_keras_model is not None
  run = pipeline_outputs.trainer_run(taxi_artifacts, str(tmp_path),
                                     TAXI_KERAS_MODULE)
  fn_args = executor.Executor()._GetFnArgs(  # pylint: disable=protected-access
      run.input_dict, run.output_dict, run.exec_properties)
  model_dir = str(tmp_path / 'model_run')
  estimator, config, schemas, params = _taxi_estimator(
      taxi_artifacts, model_dir, module)
  build_input_fns = executor._build_input_fns  # pylint: disable=protected-access
  train_input_fn, eval_input_fn = build_input_fns(
      fn_args, config, prepare.prepare_run(config, module, schemas))
  metrics = schedule.train_and_evaluate(estimator, config, train_input_fn,
                                        eval_input_fn, 20, 3)
  metrics = metrics_lib.to_python(metrics)
  assert sorted(metrics) == ['accuracy', 'auc', 'global_step', 'loss']
  assert metrics['global_step'] == 20 and metrics['loss'] > 0

  serving_dir = path_utils.serving_model_dir(str(tmp_path / 'model'))
  export.export_serving_model(
      estimator,
      serving.make_serving_input_receiver_fn(schemas, module.label_key,
                                             params),
      serving_dir)
  assert export.saved_model_tag_sets(serving_dir) == [('serve',),
                                                      ('serve', 'tpu')]
  assert 'TPUPartitionedCall' in saved_models.op_types(
      serving_dir, ['serve', 'tpu'])
  loaded = tf.saved_model.load(serving_dir, tags=['serve'])
  raw = pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 5)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  probabilities = outputs['probabilities'].numpy()
  assert probabilities.shape == (5, 1)
  assert ((probabilities > 0) & (probabilities < 1)).all()

  # The weights are estimator variables: checkpointed and warm-started.
  trained = tf.train.load_variable(model_dir, 'deep_hidden_0/kernel')
  assert tf.train.load_variable(model_dir,
                                'wide_company_xf/embeddings').shape == (1010, 1)
  second_dir = str(tmp_path / 'second')
  second, config, _, _ = _taxi_estimator(taxi_artifacts, second_dir, module,
                                         warm_start_from=serving_dir)
  schedule.train_and_evaluate(second, config, train_input_fn, eval_input_fn,
                              1, 1)
  initial = tf.train.load_variable(os.path.join(second_dir, 'model.ckpt-0'),
                                   'deep_hidden_0/kernel')
  assert (initial == trained).all()


@pytest.mark.slow
def test_executor_trains_the_taxi_keras_module(taxi_artifacts, tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path), TAXI_KERAS_MODULE,
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16},
      train_steps=20, eval_steps=3)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  properties = run.model.mlmd_artifact.custom_properties
  assert properties['eval_global_step'].int_value == 20
  assert 0.0 <= properties['eval_accuracy'].double_value <= 1.0
  assert 0.0 <= properties['eval_auc'].double_value <= 1.0
