"""Modules with TPU embeddings through the executor on CPU: train, check, export,
score (TPUBulkInferrer) and evaluate (TFX's Evaluator)."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import path_utils
from tfx.utils import proto_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.bulk_inferrer import executor as inferrer_executor
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer_cli import paths

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import bulk_inference
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models
from tests.fixtures.run_settings import SMALL_BATCHES

pytestmark = pytest.mark.slow

EMBEDDING_MODULE = os.path.join(TEST_MODULES_DIR, 'embedding_module.py')
TAXI_EMBEDDING_MODULE = os.path.join(paths.COMPONENTS_DIR,
                                     'taxi_embedding_module.py')
HOUR_TABLE = 'input_layer/trip_start_hour_xf_embedding/embedding_weights'
LABELS = ('big_tipper', 'tips')


def _run(taxi_artifacts, output_dir, module_file, custom_config=None,
         train_steps=20):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(output_dir), module_file,
      custom_config=dict(SMALL_BATCHES, **(custom_config or {})),
      train_steps=train_steps, eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  return run


@pytest.fixture(scope='module')
def embedding_run(tmp_path_factory, taxi_artifacts):
  """embedding_module.py trained by the executor on CPU (use_tpu=False)."""
  return _run(taxi_artifacts, tmp_path_factory.mktemp('embedding_run'),
              EMBEDDING_MODULE)


def _raw_examples_without_labels(taxi_artifacts, count):
  examples = []
  for record in pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', count):
    example = tf.train.Example.FromString(record)
    for label in LABELS:
      del example.features.feature[label]
    examples.append(example.SerializeToString())
  return examples


def test_trains_on_cpu_and_exports_both_tag_sets(embedding_run):
  properties = embedding_run.model.mlmd_artifact.custom_properties
  assert properties['eval_global_step'].int_value == 20
  path = path_utils.serving_model_path(embedding_run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  assert 'TPUPartitionedCall' in saved_models.op_types(path, ['serve', 'tpu'])
  # The table is a variable of the checkpoint, under the CPU lookup's name
  # (the name TPUEstimator gives it on a TPU).
  checkpoint = tf.train.latest_checkpoint(
      os.path.join(embedding_run.model_run.uri))
  assert tf.train.load_variable(checkpoint, HOUR_TABLE).shape == (24, 4)


def test_serve_looks_the_ids_up_for_raw_examples_without_the_label(
    embedding_run, taxi_artifacts):
  path = path_utils.serving_model_path(embedding_run.model.uri)
  loaded = tf.saved_model.load(path, tags=['serve'])
  raw = _raw_examples_without_labels(taxi_artifacts, 5)
  outputs = loaded.signatures['serving_default'](examples=tf.constant(raw))
  probabilities = outputs['probabilities'].numpy()
  assert probabilities.shape == (5, 1)
  assert ((probabilities > 0) & (probabilities < 1)).all()
  # The embeddings are read: hours with other rows give other answers.
  assert len(np.unique(probabilities.round(6))) > 1


def test_the_tpu_bulk_inferrer_scores_the_model(embedding_run, taxi_artifacts,
                                                tmp_path):
  output = bulk_inference.run_executor(
      inferrer_executor.Executor, taxi_artifacts.raw_examples,
      embedding_run.model, str(tmp_path / 'inference'),
      bulk_inference.exec_properties(custom_config={'use_tpu': False}))
  logs = bulk_inference.prediction_logs(output)
  eval_count = len(pipeline_outputs.read_serialized_examples(
      taxi_artifacts.raw_examples, 'eval', 10**6))
  assert len(logs) == eval_count
  assert logs[0].predict_log.response.outputs['probabilities'].float_val


def test_the_evaluator_scores_the_model_on_raw_examples(embedding_run,
                                                        taxi_artifacts,
                                                        tmp_path):
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx.components.evaluator import executor as evaluator_executor  # pylint: disable=g-import-not-at-top
  from tfx.utils import json_utils  # pylint: disable=g-import-not-at-top
  eval_config = paths.taxi_pipeline().eval_config(min_accuracy=0.0,
                                                  min_balanced_accuracy=0.0)
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = str(tmp_path / 'evaluation')
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / 'blessing')
  evaluator_executor.Executor().Do(
      {'examples': [taxi_artifacts.raw_examples],
       'model': [embedding_run.model]},
      {'evaluation': [evaluation], 'blessing': [blessing]},
      {'eval_config': proto_utils.proto_to_json(eval_config),
       'example_splits': json_utils.dumps(['eval'])})
  (_, metrics), = tfma.load_eval_result(evaluation.uri).slicing_metrics
  values = {name: next(iter(value.values()))
            for name, value in metrics[''][''].items()}
  assert values['example_count'] > 0
  assert 0.0 <= values['binary_accuracy'] <= 1.0
  assert os.path.exists(os.path.join(blessing.uri, 'BLESSED'))


def _fails_before_training(taxi_artifacts, tmp_path, module_file,
                           custom_config=None):
  with pytest.raises(preflight_report.PreflightError) as error:
    _run(taxi_artifacts, tmp_path, module_file, custom_config)
  model_run = str(tmp_path / 'model_run')
  assert not tf.io.gfile.glob(os.path.join(model_run, '**', '*.index'))
  assert not os.path.exists(str(tmp_path / 'model'))
  return str(error.value)


def test_a_spec_column_the_model_fn_never_reads_fails_before_training(
    taxi_artifacts, tmp_path):
  module_file = os.path.join(TEST_MODULES_DIR,
                             'embedding_unused_column_module.py')
  message = _fails_before_training(taxi_artifacts, tmp_path, module_file)
  assert message.startswith(
      f'{module_file}: 1 error(s) found before training in the TPU embedding '
      f'tables of embedding_config_spec in {module_file}:\n  ERROR   '
      '[embedding/embedding-column-unused] ')
  assert "table(s) ['trip_start_day_xf'] that the model_fn never reads" in (
      message)


def test_an_embedding_feature_missing_from_the_examples_fails_before_training(
    taxi_artifacts, tmp_path):
  module_file = os.path.join(TEST_MODULES_DIR,
                             'embedding_missing_feature_module.py')
  message = _fails_before_training(taxi_artifacts, tmp_path, module_file)
  assert ("[embedding/embedding-feature-missing] the TPU embedding column "
          "'trip_start_weekday_xf_embedding' of embedding_config_spec in "
          f"{module_file} reads the feature 'trip_start_weekday_xf', which "
          'the examples do not have') in message


def test_tables_over_the_memory_budget_fail_before_training(taxi_artifacts,
                                                            tmp_path):
  message = _fails_before_training(taxi_artifacts, tmp_path, EMBEDDING_MODULE,
                                   {'embedding_host_memory_gb': 5e-7})
  assert ('[embedding/embedding-host-memory] embedding_config_spec in '
          f'{EMBEDDING_MODULE} 1 table(s) with AdagradParameters (1 slot(s) '
          'per row) need 768 bytes in this process (use_tpu=False) '
          "('trip_start_hour_xf': 24 rows x 4, 768 bytes per host): more than "
          'the 500 bytes budget') in message


def test_on_a_tpu_the_estimators_input_feeds_sparse_ids(taxi_artifacts,
                                                        tmp_path):
  run = pipeline_outputs.trainer_run(taxi_artifacts, str(tmp_path),
                                     EMBEDDING_MODULE)
  fn_args = executor.Executor()._GetFnArgs(  # pylint: disable=protected-access
      run.input_dict, run.output_dict, run.exec_properties)
  module = user_module.load_user_module({'module_file': EMBEDDING_MODULE})
  schemas = schemas_lib.load_schemas(fn_args.schema_path,
                                     fn_args.transform_graph_path)
  build_input_fns = executor._build_input_fns  # pylint: disable=protected-access

  def specs(**config):
    config = config_lib.TrainerConfig(**dict(SMALL_BATCHES, **config))
    prepared = prepare.prepare_run(config, module, schemas)
    return [input_fn({'batch_size': 8}).element_spec[0]['trip_start_hour_xf']
            for input_fn in build_input_fns(fn_args, config, prepared,
                                            cache='none')]

  assert [type(s).__name__ for s in specs(use_tpu=True)] == [
      'SparseTensorSpec', 'SparseTensorSpec']
  # Evaluated off the TPU, the eval input stays raw for the CPU lookup.
  assert [type(s).__name__ for s in specs(use_tpu=True, eval_on_tpu=False)
         ] == ['SparseTensorSpec', 'TensorSpec']
  assert [type(s).__name__ for s in specs(use_tpu=False)] == [
      'TensorSpec', 'TensorSpec']


@pytest.mark.heavy
def test_the_bundled_embedding_module_trains_its_hashed_table(
    taxi_artifacts, tmp_path):
  run = _run(taxi_artifacts, tmp_path, TAXI_EMBEDDING_MODULE)
  checkpoint = tf.train.latest_checkpoint(run.model_run.uri)
  table = tf.train.load_variable(
      checkpoint,
      'input_layer/dropoff_census_tract_xf_embedding/embedding_weights')
  assert table.shape == (2**20, 8)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
