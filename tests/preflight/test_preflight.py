"""TPU preflight: `tfx-tpu-trainer preflight` and the preflight API, on CPU."""

import json
import os
import time

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import sample as preflight_sample
from tfx_tpu_trainer_cli import main as cli

from tests import conftest
from tests.fixtures import pipeline_outputs
from tests.conftest import TEST_MODULES_DIR

REPO = conftest.REPO_ROOT
TAXI_TPU_MODULE = os.path.join(REPO, 'components', 'taxi_tpu_module.py')
TAXI_KERAS_MODULE = os.path.join(REPO, 'components', 'taxi_keras_module.py')
FLOAT_FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')
SCHEMA = ''.join(
    f'feature {{ name: "{name}" type: FLOAT presence {{ min_fraction: 1.0 }} '
    'shape { } }\n' for name in FLOAT_FEATURES
) + ('feature { name: "big_tipper" type: INT presence { min_fraction: 1.0 } '
     'shape { } }\n')


def _module(name):
  return os.path.join(TEST_MODULES_DIR, name)


@pytest.fixture(scope='module')
def schema_file(tmp_path_factory):
  path = tmp_path_factory.mktemp('schema') / 'schema.pbtxt'
  path.write_text(SCHEMA)
  return str(path)


def _preflight(capsys, *argv):
  """Runs `tfx-tpu-trainer preflight ARGV`: exit code, stdout lines, stderr."""
  try:
    code = cli.main(['preflight'] + list(argv))
  except SystemExit as e:  # argparse's own errors.
    code = e.code
  captured = capsys.readouterr()
  return code, [line.strip() for line in captured.out.splitlines()], (
      captured.err)


def test_ready_module_passes(capsys, schema_file):
  code, lines, _ = _preflight(capsys, '--module-file',
                              _module('preflight_ready_module.py'),
                              '--schema', schema_file)
  assert code == 0, lines
  assert lines[0] == (f'TPU preflight of {_module("preflight_ready_module.py")}'
                      ': TPU-ready')
  assert lines[1] == ('shards: 8; sample: zeros shaped by the feature spec of '
                      f'{schema_file}')
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines
  assert any(line.startswith('INFO    [train/train-step] one train step '
                             'compiled with XLA and ran on the sample')
             for line in lines)


ALSO = ' (Also in the eval and export steps.)'
HOST_CALL_FIX = (
    'Write summaries from the host: return the TPUEstimatorSpec with '
    "host_call=tfx_tpu_trainer.scalar_summaries_host_call({'name': scalar, "
    "...}, params['model_dir']) (tf.summary on the CPU after the steps, as "
    "tensorflow/tpu's ResNet does; docs/guide/your_model.md, \"Summaries on "
    'a TPU").')


@pytest.mark.parametrize('module_name,errors,line', [
    ('preflight_string_op_module.py', 1,
     "ERROR   [train/string-op] op 'AsString' (AsString) computes strings in "
     'the train step; a TPU program cannot hold strings. Do string work in '
     'the input_fn or the preprocessing_fn (e.g. turn strings into ids).' +
     ALSO),
    # The float64 'mul' of the cast and its gradient are folded under it (a
    # knock-on); the constant 0.5 it multiplies by, which XLA folds, is none.
    ('preflight_float64_module.py', 2,
     "ERROR   [train/float64] op 'Cast' (Cast) computes float64 in the train "
     'step; TPUs have no float64 (XLA on CPU accepts it). Use float32 or '
     'bfloat16: cast the inputs, and pass dtype=tf.float32 where a constant '
     "or variable is made. (Knock-on findings of this cause, folded here: "
     "float64 at 'mul', float64 at 'gradients/Cast_1_grad/Cast'.)" + ALSO),
    ('preflight_unique_module.py', 1,
     "ERROR   [train/dynamic-shape] op 'Unique' (Unique) makes tensor "
     "'Unique:0' of shape (None,) from inputs of static shape: its size "
     'depends on the data. TPU programs need static shapes (XLA on CPU '
     'bounds such shapes, a TPU may not, and pads them at best). Keep sizes '
     'fixed: e.g. mask with tf.where(cond, x, 0) instead of tf.boolean_mask, '
     'and pad variable-length outputs to a fixed size.' + ALSO),
    ('preflight_numpy_function_module.py', 1,
     "ERROR   [train/xla-unsupported-op] op 'PyFunc' (PyFunc) in the train "
     'step cannot be compiled by XLA (XLA_CPU_JIT has no kernel for it), so '
     'the TPU cannot run it. Replace it, or move it to the '
     'input_fn/preprocessing_fn.' + ALSO),
    ('preflight_no_cross_shard_module.py', 1,
     'ERROR   [train/missing-cross-shard-optimizer] the train step has no '
     'cross-shard gradient sum for 8 shards: each TPU core would train its '
     'own copy of the model. Wrap the optimizer: `if params["use_tpu"]: '
     'optimizer = tf.compat.v1.tpu.CrossShardOptimizer(optimizer)` (an '
     'Estimator model_fn adapted by estimator_adapter.to_tpu_model_fn gets '
     'this for tf.compat.v1.train optimizers).'),
    ('preflight_summary_module.py', 1,
     "ERROR   [train/v1-summary] op 'mean_logit' (ScalarSummary) is a v1 "
     'summary inside the train step; TPU computations reject v1 summaries. '
     'Remove it. ' + HOST_CALL_FIX + ALSO),
    ('preflight_tf2_summary_module.py', 1,
     "ERROR   [train/tf2-summary] op 'mean_logit/write_summary' "
     '(WriteSummary) writes a tf2 summary inside the train step; XLA cannot '
     'compile summary ops, so this step cannot be checked (on a TPU, '
     'TensorFlow may run them on the host by automatic outside compilation, '
     'a host round trip in every step). ' + HOST_CALL_FIX + ALSO),
    ('preflight_scalar_metric_module.py', 1,
     "ERROR   [eval/eval-metric-tensor-shape] eval_metrics tensor '0' "
     '(Mean:0) is a scalar: the TPU outfeed concatenates these tensors '
     'across shards on the first axis, so each needs a batch axis. Pass '
     'per-example tensors, or tf.reshape(x, [1]).'),
])
def test_broken_module_fails_naming_the_problem(capsys, schema_file,
                                                module_name, errors, line):
  path = _module(module_name)
  code, lines, _ = _preflight(capsys, '--module-file', path, '--schema',
                              schema_file)
  assert code == 1, lines
  assert lines[0] == (f'TPU preflight of {path}: NOT TPU-ready: {errors} '
                      'error(s)')
  assert line in lines


def test_summaries_from_a_host_call_helper_pass(capsys, schema_file):
  code, lines, _ = _preflight(
      capsys, '--module-file', _module('preflight_host_call_module.py'),
      '--schema', schema_file)
  assert code == 0, lines
  assert any(line.startswith('INFO    [train/train-step] one train step '
                             'compiled with XLA and ran on the sample')
             for line in lines)


def test_export_api_v2_without_tpu_inference_is_not_ready(capsys,
                                                           schema_file):
  path = _module('preflight_ready_module.py')
  code, lines, _ = _preflight(
      capsys, '--module-file', path, '--schema', schema_file,
      '--custom-config', '{"export_saved_model_api_version": 2}')
  assert code == 1, lines
  assert lines[0] == f'TPU preflight of {path}: NOT TPU-ready: 1 error(s)'
  assert any(line.startswith(
      'ERROR   [export/no-tpu-inference] the model_fn does no TPU '
      "inference: with custom_config['export_saved_model_api_version']=2")
             for line in lines), lines


def test_export_api_v2_with_the_module_s_own_tpu_inference_is_ready(
    capsys, schema_file):
  # Its PREDICT computation is its own: the preflight's would nest it.
  code, lines, _ = _preflight(
      capsys, '--module-file', _module('tpu_inference_module.py'),
      '--schema', schema_file,
      '--custom-config', '{"export_saved_model_api_version": 2}')
  assert code == 0, lines
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines


def test_bfloat16_the_model_fn_ignores_is_not_ready(capsys, schema_file):
  code, lines, _ = _preflight(
      capsys, '--module-file', _module('preflight_ready_module.py'),
      '--schema', schema_file, '--custom-config', '{"bfloat16": true}')
  assert code == 1, lines
  assert any(line.startswith(
      "ERROR   [train/bfloat16-unused] custom_config['bfloat16'] is true, "
      'but the train step the model_fn built computes nothing in bfloat16')
             for line in lines), lines


def test_dynamic_input_shapes_name_each_feature(capsys):
  # No examples and no schema: the sample is the module input_fn's first
  # batch, which it batches without drop_remainder.
  path = _module('preflight_dynamic_input_module.py')
  code, lines, _ = _preflight(capsys, '--module-file', path)
  assert code == 1
  assert lines[0] == f'TPU preflight of {path}: NOT TPU-ready: 4 error(s)'
  assert lines[1] == ("shards: 8; sample: first batch of the module's "
                      'input_fn (called without files)')
  for name in ("feature 'fare_xf'", "feature 'trip_miles_xf'",
               "feature 'trip_seconds_xf'", 'label'):
    assert (f'ERROR   [input/dynamic-input-shape] {name} has shape (None,) in '
            'the input: the TPU needs static shapes. Batch with '
            'drop_remainder=True (the default input does) and pad '
            'variable-length features to a fixed length.') in lines


def test_batch_size_that_does_not_divide_by_8_shards(capsys, schema_file):
  path = _module('preflight_ready_module.py')
  code, lines, _ = _preflight(
      capsys, '--module-file', path, '--schema', schema_file,
      '--custom-config', '{"train_batch_size": 12, "num_shards": 8}')
  assert code == 1
  assert lines[0] == f'TPU preflight of {path}: NOT TPU-ready: 1 error(s)'
  assert ("ERROR   [config/batch-size-not-divisible] "
          "custom_config['train_batch_size']=12 does not divide by "
          'num_shards=8: TPU splits each global batch evenly across shards. '
          'Use a multiple of 8.') in lines


def test_assumed_shard_count_only_warns(capsys, schema_file):
  code, lines, _ = _preflight(
      capsys, '--module-file', _module('preflight_ready_module.py'),
      '--schema', schema_file, '--custom-config', '{"eval_batch_size": 20}')
  assert code == 0
  assert ("WARNING [config/batch-size-not-divisible] "
          "custom_config['eval_batch_size']=20 does not divide by "
          'num_shards=8: TPU splits each global batch evenly across shards. '
          'Use a multiple of 8 (num_shards is not set: 8, one TPU host, was '
          'assumed; set custom_config num_shards to check exactly).') in lines


def test_num_shards_flag_sets_the_shard_count(capsys, schema_file):
  code, lines, _ = _preflight(
      capsys, '--module-file', _module('preflight_no_cross_shard_module.py'),
      '--schema', schema_file, '--num-shards', '1', '--custom-config',
      '{"train_batch_size": 12}')
  # One shard: nothing to sum across, and 12 divides by 1.
  assert code == 0, lines
  assert lines[1].startswith('shards: 1; ')


def test_keras_module_without_data_uses_its_inputs(capsys):
  code, lines, _ = _preflight(capsys, '--module-file', TAXI_KERAS_MODULE)
  assert code == 0, lines
  assert lines[1] == ('shards: 8; sample: zeros shaped by the Keras model '
                      'inputs and outputs')
  assert ('INFO    [export/export-skipped] the dual-tag export was not tried: '
          'no serving input was given (a transform graph, a schema or the '
          "module's serving_input_receiver_fn).") in lines


def test_adapted_estimator_module_passes_as_json(capsys, schema_file):
  code, _, _ = _preflight(
      capsys, '--module-file', _module('estimator_adapted_module.py'),
      '--schema', schema_file, '--json')
  assert code == 0
  # _preflight consumed the output; run again for the JSON text.
  cli.main(['preflight', '--module-file',
            _module('estimator_adapted_module.py'), '--schema', schema_file,
            '--json'])
  report = json.loads(capsys.readouterr().out)
  assert report['ok'] is True and report['num_shards'] == 8
  assert set(report['seconds']) == {'config', 'input', 'train', 'eval',
                                    'export'}
  by_code = {f['code']: f for f in report['findings']}
  assert all(f['severity'] == 'info' for f in report['findings'])
  eval_message = by_code['eval-step']['message']
  for name in ('accuracy=', 'auc=', 'mean_loss='):
    assert name in eval_message


def test_module_that_does_not_load_is_not_ready(capsys):
  code, lines, _ = _preflight(capsys, '--module-file',
                              _module('fails_to_import.py'))
  assert code == 1
  assert lines[0] == 'TPU preflight: NOT TPU-ready'
  assert lines[1].startswith(
      f"ERROR   module_file '{_module('fails_to_import.py')}' failed to "
      'import: ')


@pytest.mark.parametrize('argv,message', [
    (['--module-file', '/no/such/module.py'],
     "--module-file '/no/such/module.py' does not exist or is not a file."),
    (['--custom-config', '{not json'], '--custom-config is not valid JSON: '),
    (['--custom-config', '[1, 2]'],
     '--custom-config must be a JSON object, got list.'),
    (['--custom-config', '{"bogus": 1}'],
     "Unknown custom_config key(s) ['bogus']."),
    (['--custom-config', '{"train_batch_size": 0}'],
     "custom_config['train_batch_size'] must be a positive integer, got 0."),
    (['--num-shards', '0'],
     'argument --num-shards: must be a positive integer, got 0'),
    (['--examples', '/no/such/dir'],
     "--examples '/no/such/dir' has no Split-train directory (found: "
     'nothing); pass an examples artifact directory.'),
    (['--transform-graph', '/no/such/dir'],
     "--transform-graph '/no/such/dir' is not a Transform graph artifact "
     'directory (no transformed_metadata).'),
    (['--schema', '/no/such/schema.pbtxt'],
     "--schema '/no/such/schema.pbtxt' does not exist."),
    ([], 'preflight needs a sample batch for a model_fn module: pass '
     '--examples DIR (an examples artifact directory), or --transform-graph '
     '/ --schema to synthesize one.'),
])
def test_bad_arguments_exit_2(capsys, argv, message):
  if not any(arg == '--module-file' for arg in argv):
    argv = ['--module-file', _module('preflight_ready_module.py')] + argv
  code, _, err = _preflight(capsys, *argv)
  assert code == 2
  assert message in err


def _synthetic_sample(extra_features=None, batch_size=8):
  spec = {name: tf.io.FixedLenFeature([], tf.float32)
          for name in FLOAT_FEATURES}
  spec['big_tipper'] = tf.io.FixedLenFeature([], tf.int64)
  spec.update(extra_features or {})
  return preflight_sample.from_feature_spec(spec, 'big_tipper', batch_size,
                                            'synthetic')


def _model_fn(module_name):
  module = user_module.load_user_module({'module_file': _module(module_name)})
  return dispatch.model_fn_for_module(module)


def test_unused_string_feature_is_reported_once_and_model_still_checked():
  report = preflight.run_preflight(
      _model_fn('preflight_ready_module.py'),
      config_lib.TrainerConfig(), {},
      _synthetic_sample({'company': tf.io.FixedLenFeature([], tf.string)}),
      'ready')
  assert [f.code for f in report.errors] == ['input-dtype']
  assert report.errors[0].message == (
      "feature 'company' is a string tensor: the TPU infeed cannot carry it, "
      'even when the model does not read it. Turn strings into ids in the '
      'preprocessing_fn, or drop the feature in an input_fn.')
  assert {'train-step', 'eval-step', 'predict-step'} <= {f.code for f in report.findings}


def test_model_reading_a_string_feature_is_told_why():

  def model_fn(features, labels, mode, params):
    del labels, mode, params
    return features['company']

  report = preflight.run_preflight(
      model_fn, config_lib.TrainerConfig(), {},
      _synthetic_sample({'company': tf.io.FixedLenFeature([], tf.string)}),
      'reads_strings')
  train = [f for f in report.errors if f.phase == 'train']
  assert [f.code for f in train] == ['model-fn-error']
  # The same error in the eval and export steps: one finding names them.
  assert train[0].message == (
      "the model_fn failed in mode 'train' (built as on TPU: "
      "params['use_tpu']=True): KeyError: \"feature 'company' is a string "
      'tensor, which the TPU infeed cannot carry, so a TPU model_fn never '
      'receives it (see the input findings)" (Also in the eval and export '
      'steps.)')
  assert [f.phase for f in report.errors if f.code == 'model-fn-error'] == [
      'train']


def test_sparse_feature_skips_the_model_checks():
  report = preflight.run_preflight(
      _model_fn('preflight_ready_module.py'), config_lib.TrainerConfig(), {},
      _synthetic_sample({'tags': tf.io.VarLenFeature(tf.int64)}), 'sparse')
  assert [f.code for f in report.findings] == ['sparse-input', 'skipped']
  assert report.errors[0].message.startswith(
      "feature 'tags' is a SparseTensor: TPUEstimator infeeds dense tensors "
      'only.')
  assert report.seconds.keys() == {'config', 'input'}


def test_loss_that_is_not_float32():

  def model_fn(features, labels, mode, params):
    del labels, params
    weight = tf.compat.v1.get_variable('w', [1])
    loss = tf.cast(tf.reduce_mean(features['fare_xf'] * weight), tf.bfloat16)
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, train_op=optimizer.minimize(
            loss, tf.compat.v1.train.get_global_step()))

  report = preflight.run_preflight(model_fn, config_lib.TrainerConfig(), {},
                                   _synthetic_sample(), 'bfloat16_loss')
  train = [f for f in report.errors if f.phase == 'train']
  assert [f.code for f in train] == ['loss']
  assert train[0].message == (
      "the loss 'Cast:0' has shape () and dtype bfloat16; TPUEstimator "
      'accumulates a float32 scalar loss on the TPU. Reduce it to a scalar '
      '(tf.reduce_mean) in float32.')


def _linear_model_fn(eval_metric_fn=None, host_call_fn=None):
  """A TPU model_fn whose metric_fn or host_call is given."""

  def model_fn(features, labels, mode, params):
    del params
    weight = tf.compat.v1.get_variable('w', [1])
    logits = tf.reshape(features['fare_xf'] * weight, [-1, 1])
    if mode == tf.estimator.ModeKeys.PREDICT:
      return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
          mode, predictions={'logits': logits})
    loss = tf.reduce_mean(tf.square(
        logits - tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)))
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
          mode, loss=loss, eval_metrics=(eval_metric_fn, [logits]))
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.1))
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
        mode, loss=loss, host_call=(host_call_fn, [logits]),
        train_op=optimizer.minimize(loss,
                                    tf.compat.v1.train.get_global_step()))

  return model_fn


def _mean_logit(logits):
  return {'mean_logit': tf.compat.v1.metrics.mean(logits)}


def test_metric_fn_returning_a_keras_metric():

  def keras_metric_fn(logits):
    mean = tf.keras.metrics.Mean()
    mean.update_state(logits)
    return {'mean_logit': mean}

  report = preflight.run_preflight(
      _linear_model_fn(keras_metric_fn, _mean_logit),
      config_lib.TrainerConfig(), {}, _synthetic_sample(), 'keras_metric')
  assert [(f.phase, f.code, f.message) for f in report.errors] == [(
      'eval', 'eval-metric-fn',
      "metric_fn returned Mean for 'mean_logit'; TPUEstimator takes (value, "
      'update_op) pairs, e.g. from tf.compat.v1.metrics (not Keras Metric '
      'objects).')]


def test_host_call_with_a_v1_summary():

  def summary_host_call(logits):
    tf.compat.v1.summary.histogram('logits', logits)
    return []

  report = preflight.run_preflight(
      _linear_model_fn(_mean_logit, summary_host_call),
      config_lib.TrainerConfig(), {}, _synthetic_sample(), 'host_call')
  assert [(f.phase, f.code, f.message) for f in report.errors] == [(
      'train', 'host-call-v1-summary',
      "host_call creates the v1 summary 'logits' (HistogramSummary); "
      'TPUEstimator rejects tf.compat.v1.summary ops in host calls. Use '
      'tf.summary (v2) with a writer in a host_call.')]


def test_keras_sample_follows_inputs_outputs_and_loss():
  tokens = tf.keras.Input(shape=(None,), dtype=tf.int32, name='tokens')
  pooled = tf.keras.layers.GlobalAveragePooling1D()(
      tf.keras.layers.Embedding(10, 2)(tokens))
  classes = tf.keras.layers.Dense(3, activation='softmax',
                                  name='classes')(pooled)
  model = tf.keras.Model(tokens, classes)
  model.compile('sgd', 'sparse_categorical_crossentropy')
  sample = preflight_sample.from_keras_model(model, 4, 'keras')
  assert sample.features['tokens'].shape == (4, 1)
  assert sample.element_spec[0]['tokens'].shape.as_list() == [4, None]
  assert sample.labels.shape == (4,) and sample.labels.dtype == np.int64
  report = preflight.run_preflight(
      keras_adapter.make_keras_model_fn(user_module.ModuleFunction(
          'build_keras_model', 'tokens.py', lambda params: model)),
      config_lib.TrainerConfig(train_batch_size=32), {}, sample, 'tokens.py')
  assert [f.code for f in report.errors] == ['dynamic-input-shape']
  assert report.errors[0].message.startswith(
      "feature 'tokens' has shape (4, None) in the input: the TPU needs "
      'static shapes.')


def test_check_before_training_raises_listing_the_errors():
  path = _module('preflight_no_cross_shard_module.py')
  module = user_module.load_user_module({'module_file': path})
  sample = _synthetic_sample()

  def input_fn(params):
    del params
    return tf.data.Dataset.from_tensors((sample.features, sample.labels))

  with pytest.raises(preflight_report.PreflightError) as error:
    config = config_lib.TrainerConfig(use_tpu=True)
    preflight.check_before_training(
        prepare.prepare_run(config, module, None), config, input_fn)
  assert str(error.value).startswith(
      f'{path} is not TPU-ready (1 error(s) found by the TPU preflight):\n'
      '  ERROR   [train/missing-cross-shard-optimizer] the train step has no '
      'cross-shard gradient sum for 8 shards')
  assert isinstance(error.value, errors.TPUTrainerError)


@pytest.mark.slow
@pytest.mark.parametrize('module_file', [TAXI_TPU_MODULE, TAXI_KERAS_MODULE])
def test_bundled_modules_are_tpu_ready(capsys, taxi_artifacts,
                                       module_file):
  examples = taxi_artifacts.transformed_examples.uri
  # In CPU seconds of this process (all its threads; preflight starts no
  # other process): "in seconds" on CPU, without a wall-clock limit that a
  # loaded machine would break.
  start = time.process_time()
  code, lines, _ = _preflight(
      capsys, '--module-file', module_file, '--examples', examples,
      '--transform-graph', taxi_artifacts.transform_graph.uri,
      '--custom-config', '{"num_shards": 8}')
  seconds = time.process_time() - start
  assert code == 0, lines
  assert lines[0] == f'TPU preflight of {module_file}: TPU-ready'
  assert lines[1] == ('shards: 8; sample: first batch of the default input_fn '
                      f'over {examples}/Split-train')
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines
  assert seconds < 60


@pytest.mark.slow
def test_examples_without_a_schema_are_typed_by_their_first_example(
    capsys, taxi_artifacts):
  code, lines, _ = _preflight(
      capsys, '--module-file', TAXI_KERAS_MODULE, '--examples',
      taxi_artifacts.transformed_examples.uri)
  assert code == 0, lines
  assert any(line.startswith('INFO    [eval/eval-step] one eval step '
                             'compiled with XLA and ran on the sample; '
                             'metric_fn ran on the host: loss=')
             for line in lines)


@pytest.mark.slow
def test_executor_runs_the_preflight_before_training_on_tpu(taxi_artifacts,
                                                            tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path),
      _module('preflight_no_cross_shard_module.py'),
      custom_config={'use_tpu': True, 'num_shards': 8,
                     'train_batch_size': 16, 'eval_batch_size': 16},
      train_steps=10, eval_steps=2)
  with pytest.raises(preflight_report.PreflightError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert ('ERROR   [train/missing-cross-shard-optimizer] the train step has '
          'no cross-shard gradient sum for 8 shards') in str(error.value)
  assert not os.path.exists(os.path.join(run.model.uri, 'Format-Serving'))
  assert not os.path.exists(os.path.join(run.model_run.uri, 'checkpoint'))


def test_a_finding_is_data_and_its_text_is_rendered_from_it():
  finding = preflight_report.Finding(
      'float64', preflight.ERROR, 'computes float64 in the train step.',
      'train', fix='Use float32.', op='Cast', where="op 'Cast' (Cast)",
      knock_on=("float64 at 'mul'",), also_in=('eval', 'export'))
  assert finding.message == (
      "op 'Cast' (Cast) computes float64 in the train step. Use float32. "
      "(Knock-on findings of this cause, folded here: float64 at 'mul'.) "
      '(Also in the eval and export steps.)')
  assert finding.to_dict() == {
      'code': 'float64', 'severity': 'error', 'message': finding.message,
      'phase': 'train', 'op': 'Cast', 'where': "op 'Cast' (Cast)",
      'cause': 'computes float64 in the train step.', 'fix': 'Use float32.',
      'knock_on': ["float64 at 'mul'"], 'also_in': ['eval', 'export'],
      'error': ''}
  # Positional as before: code, severity, what is wrong, phase.
  assert preflight_report.Finding('x', preflight.INFO, 'all well.',
                           'train').message == 'all well.'


def test_folding_and_merging_read_the_findings_op_not_their_text():
  report = preflight.run_preflight(
      _model_fn('preflight_float64_module.py'), config_lib.TrainerConfig(),
      {}, _synthetic_sample(), 'float64')
  cast = [f for f in report.errors if f.op == 'Cast']
  assert len(cast) == 1
  assert (cast[0].code, cast[0].phase, cast[0].where) == (
      'float64', 'train', "op 'Cast' (Cast)")
  assert cast[0].knock_on == ("float64 at 'mul'",
                              "float64 at 'gradients/Cast_1_grad/Cast'")
  assert cast[0].also_in == ('eval', 'export')
  assert cast[0].fix.startswith('Use float32 or bfloat16')
