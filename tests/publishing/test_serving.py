"""The served model of a pipeline whose Transform renames the label.

TFX's convention renames the label in Transform (`tips` -> `tips_xf`,
`species` -> `species_xf`): the pushed model must answer Predict and
Classify on raw examples that carry no label, and its `{serve}` graph must
export `transform_features` for TFMA's penguin-style Evaluator config.
"""

import os

import pytest
import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import serving
from tfx_tpu_trainer.publishing import serving_inputs

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models
from tests.fixtures import serving_data
from tests.fixtures.run_settings import SMALL_BATCHES

# The stock taxi_utils transform: tips_xf needs tips and fare; fare_xf fare.
TAXI_SOURCES = {
    'tips_xf': {'tips', 'fare'},
    'fare_xf': {'fare'},
    'trip_miles_xf': {'trip_miles'},
}
TAXI_RAW = ('fare', 'tips', 'trip_miles', 'trip_start_timestamp')


def _module(name):
  return os.path.join(TEST_MODULES_DIR, name)


# Deciding what serving parses (plain functions, no TensorFlow graph).


def test_only_the_raw_features_the_label_alone_needs_are_the_raw_label():
  features = serving_inputs.serving_features(TAXI_RAW, TAXI_SOURCES, 'tips_xf')
  assert features.raw_label == ('tips',)
  # fare feeds the label too, but also the served fare_xf: it stays.
  assert features.parsed == ('fare', 'trip_miles')
  assert features.unused == ('trip_start_timestamp',)


def test_without_a_label_key_every_transformed_feature_is_served():
  features = serving_inputs.serving_features(TAXI_RAW, TAXI_SOURCES, None)
  assert features.raw_label == ()
  assert features.parsed == ('fare', 'tips', 'trip_miles')


def test_raw_label_key_overrides_what_the_graph_says():
  sources = dict(TAXI_SOURCES, tips_xf={'fare'})  # e.g. a label from fare
  features = serving_inputs.serving_features(
      TAXI_RAW + ('tip_flag',), dict(sources, flag_xf={'tip_flag'}),
      'tips_xf', raw_label_key='tips')
  assert features.raw_label == ('tips',)
  assert 'tips' not in features.parsed


def test_raw_label_key_not_in_the_raw_schema_is_a_config_error():
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['raw_label_key'\]='tip' is not a "
                     r"feature of the raw schema \(features: \['fare'"):
    serving_inputs.serving_features(TAXI_RAW, TAXI_SOURCES, 'tips_xf',
                               raw_label_key='tip')


def test_raw_label_key_that_a_served_feature_needs_is_a_config_error():
  with pytest.raises(config_lib.ConfigError,
                     match=r"raw_label_key'\]='fare' cannot be left out.*"
                     r"\['fare_xf'\] are computed from it"):
    serving_inputs.serving_features(TAXI_RAW, TAXI_SOURCES, 'tips_xf',
                               raw_label_key='fare')


def test_without_a_transform_graph_label_and_raw_label_key_are_left_out():
  features = serving_inputs.serving_features(('a', 'b', 'label', 'raw'), None,
                                        'label', raw_label_key='raw')
  assert features.parsed == ('a', 'b')
  assert features.raw_label == ('label', 'raw')


def test_raw_label_key_config_is_a_non_empty_string():
  config = config_lib.TrainerConfig.from_custom_config(
      {'raw_label_key': 'species'})
  assert config.raw_label_key == 'species'
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['raw_label_key'\] must be a "
                     'non-empty string, got 3'):
    config_lib.TrainerConfig.from_custom_config({'raw_label_key': 3})


def test_serving_input_receiver_fn_may_take_the_transform_output():
  module = user_module.check_module(
      _import(_module('penguin_two_arg_serving_module.py')),
      'penguin_two_arg_serving_module.py')
  assert 'tf_transform_output' in (
      module.serving_input_receiver_fn.parameters)


def _import(path):
  import importlib.util  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(path))
  try:
    spec = importlib.util.spec_from_file_location('module_under_test', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(os.path.dirname(path))
  return module


# Real pipelines: Transform renames the label; train, export, serve, evaluate.


@pytest.fixture(scope='session')
def stock_taxi_artifacts(tmp_path_factory):
  """300 taxi rows through the wheel's stock taxi_utils.preprocessing_fn."""
  data_dir = serving_data.write_taxi_simple_slice(
      str(tmp_path_factory.mktemp('taxi_simple')))
  return serving_data.run_data_components(
      str(tmp_path_factory.mktemp('stock_taxi_pipeline')), data_dir,
      serving_data.stock_taxi_utils_module(), infer_feature_shape=False)


@pytest.fixture(scope='session')
def penguin_artifacts(tmp_path_factory):
  """300 penguin-style rows; Transform renames species -> species_xf."""
  data_dir = serving_data.write_penguins(
      str(tmp_path_factory.mktemp('penguins')))
  return serving_data.run_data_components(
      str(tmp_path_factory.mktemp('penguin_pipeline')), data_dir,
      serving_data.PENGUIN_PREPROCESSING, infer_feature_shape=True)


def _schemas(artifacts):
  return schemas_lib.load_schemas(
      os.path.join(artifacts.schema.uri, 'schema.pbtxt'),
      artifacts.transform_graph.uri)


def _train(artifacts, tmp_path, module_name, custom_config=None):
  run = pipeline_outputs.trainer_run(
      artifacts, str(tmp_path), _module(module_name),
      custom_config=dict(SMALL_BATCHES, **(custom_config or {})),
      train_steps=30, eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  assert 'TPUPartitionedCall' in saved_models.op_types(
      path, ['serve', 'tpu'])
  return run, path


def _requests(artifacts, raw_label_name, count=6):
  """Raw eval examples as a client sends them: without the raw label."""
  raw = pipeline_outputs.read_serialized_examples(artifacts.raw_examples,
                                                  'eval', count)
  return raw, [serving_data.strip_feature(r, raw_label_name) for r in raw]


@pytest.mark.slow
@pytest.mark.heavy
def test_stock_taxi_utils_label_is_found_in_the_transform_graph(
    stock_taxi_artifacts):
  schemas = _schemas(stock_taxi_artifacts)
  sources = serving_inputs.transformed_feature_sources(schemas.tf_transform_output)
  assert sources['tips_xf'] == {'tips', 'fare'}
  assert sources['fare_xf'] == {'fare'}
  features = serving_inputs.find_serving_features(schemas, 'tips_xf')
  assert features.raw_label == ('tips',)
  assert 'fare' in features.parsed and 'tips' not in features.parsed


@pytest.mark.slow
def test_transform_applied_unconverted_builds_the_same_features(
    stock_taxi_artifacts):
  """schemas.transform_raw_features (no autograph) == tf.Transform's own."""
  schemas = _schemas(stock_taxi_artifacts)
  output = schemas.tf_transform_output
  raw = pipeline_outputs.read_serialized_examples(
      stock_taxi_artifacts.raw_examples, 'eval', 8)
  with tf.Graph().as_default():
    serialized = tf.compat.v1.placeholder(tf.string, [None])
    features = tf.io.parse_example(serialized, output.raw_feature_spec())
    without_tips = {k: v for k, v in features.items() if k != 'tips'}
    ours = (schemas_lib.transform_raw_features(output, features),
            schemas_lib.transform_raw_features(output, without_tips))
    theirs = (dict(output.transform_raw_features(features)),
              dict(output.transform_raw_features(without_tips)))
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.tables_initializer())
      ours, theirs = session.run((ours, theirs), {serialized: raw})
  assert 'tips_xf' in ours[0] and 'tips_xf' not in ours[1]
  for mine, reference in zip(ours, theirs):
    assert set(mine) == set(reference)
    for name in reference:
      assert (mine[name] == reference[name]).all(), name


@pytest.mark.slow
def test_stock_taxi_utils_model_serves_examples_without_tips(
    stock_taxi_artifacts, tmp_path):
  _, path = _train(stock_taxi_artifacts, tmp_path,
                   'renamed_label_taxi_module.py')
  raw, requests = _requests(stock_taxi_artifacts, 'tips')
  loaded = tf.saved_model.load(path, tags=['serve'])
  predict = loaded.signatures['serving_default'](examples=tf.constant(requests))
  assert predict['probabilities'].shape == (6, 1)
  classify = loaded.signatures['classification'](inputs=tf.constant(requests))
  assert classify['scores'].shape == (6, 2)
  # transform_features: labelled raw examples in, transformed features out.
  transformed = loaded.signatures['transform_features'](
      examples=tf.constant(raw))
  assert {'tips_xf', 'fare_xf', 'company_xf'} <= set(transformed)
  assert transformed['tips_xf'].shape == (6,)
  assert serving.TRANSFORM_FEATURES_SIGNATURE not in _signature_names(
      path, ['serve', 'tpu'])


def _signature_names(path, tags):
  from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-import-not-at-top
  return set(saved_model_utils.get_meta_graph_def(
      path, ','.join(tags)).signature_def)


@pytest.mark.slow
@pytest.mark.heavy
def test_penguin_renamed_label_serves_without_species_and_evaluates(
    penguin_artifacts, tmp_path):
  run, path = _train(penguin_artifacts, tmp_path, 'penguin_module.py')
  raw, requests = _requests(penguin_artifacts, 'species')
  loaded = tf.saved_model.load(path, tags=['serve'])
  predict = loaded.signatures['serving_default'](examples=tf.constant(requests))
  assert predict['probabilities'].shape == (6, 3)
  classify = loaded.signatures['classification'](inputs=tf.constant(requests))
  assert classify['scores'].shape == (6, 3)
  # The raw label is required by the raw schema: only a parse that leaves it
  # out serves these requests (transform_features parses everything).
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match='species .* is required but could not be found'):
    loaded.signatures['transform_features'](examples=tf.constant(requests))
  transformed = loaded.signatures['transform_features'](
      examples=tf.constant(raw))
  assert transformed['species_xf'].dtype == tf.int64

  result = _evaluate(penguin_artifacts, run.model, tmp_path)
  assert result['example_count'] > 0
  assert 0.0 <= result['sparse_categorical_accuracy'] <= 1.0


def _evaluate(artifacts, model, tmp_path):
  """TFX's Evaluator executor with the penguin example's EvalConfig."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx.components.evaluator import executor as evaluator_executor  # pylint: disable=g-import-not-at-top
  from tfx.utils import json_utils  # pylint: disable=g-import-not-at-top
  from tfx.utils import proto_utils  # pylint: disable=g-import-not-at-top
  eval_config = tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(
          signature_name='serving_default', label_key='species_xf',
          prediction_key='probabilities',
          preprocessing_function_names=['transform_features'])],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(metrics=[
          tfma.MetricConfig(class_name='ExampleCount'),
          tfma.MetricConfig(class_name='SparseCategoricalAccuracy')])])
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = str(tmp_path / 'evaluation')
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / 'blessing')
  evaluator_executor.Executor().Do(
      {'examples': [artifacts.raw_examples], 'model': [model]},
      {'evaluation': [evaluation], 'blessing': [blessing]},
      {'eval_config': proto_utils.proto_to_json(eval_config),
       'example_splits': json_utils.dumps(['eval'])})
  result = tfma.load_eval_result(evaluation.uri)
  (_, metrics), = result.slicing_metrics
  values = metrics['']['']
  return {name: next(iter(value.values())) for name, value in values.items()}


@pytest.mark.slow
def test_two_argument_serving_input_receiver_fn_gets_the_transform_output(
    penguin_artifacts, tmp_path):
  _, path = _train(penguin_artifacts, tmp_path,
                   'penguin_two_arg_serving_module.py')
  loaded = tf.saved_model.load(path, tags=['serve'])
  measurements = {name: tf.constant([[40.0], [47.0]])
                  for name in ('culmen_length_mm', 'culmen_depth_mm',
                               'flipper_length_mm', 'body_mass_g')}
  outputs = loaded.signatures['serving_default'](**measurements)
  assert outputs['probabilities'].shape == (2, 3)
  assert serving.TRANSFORM_FEATURES_SIGNATURE in loaded.signatures


@pytest.mark.slow
def test_raw_label_key_names_the_raw_label(penguin_artifacts):
  schemas = _schemas(penguin_artifacts)
  module = user_module.check_module(_import(_module('penguin_module.py')),
                                    'penguin_module.py')
  found = prepare.prepare_run(config_lib.TrainerConfig(), module, schemas)
  assert found.serving_features.raw_label == ('species',)
  named = prepare.prepare_run(
      config_lib.TrainerConfig(raw_label_key='species'), module, schemas)
  assert named.serving_features == found.serving_features
  with pytest.raises(config_lib.ConfigError,
                     match=r"raw_label_key'\]='label' is not a feature of the "
                     r'raw schema'):
    prepare.prepare_run(config_lib.TrainerConfig(raw_label_key='label'),
                        module, schemas)
