"""The TPU preflight of modules with TPU embeddings (`tfx-tpu-trainer preflight`)."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.preflight import checks as preflight
from tfx_tpu_trainer.preflight import sample as preflight_sample
from tfx_tpu_trainer_cli import main as cli

from tests.conftest import TEST_MODULES_DIR

pytestmark = pytest.mark.slow


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _preflight(capsys, taxi_artifacts, module_name, custom_config=None):
  """`tfx-tpu-trainer preflight` over the taxi slice: exit code, lines."""
  argv = ['preflight', '--module-file', _path(module_name),
          '--examples', taxi_artifacts.transformed_examples.uri,
          '--transform-graph', taxi_artifacts.transform_graph.uri]
  if custom_config:
    argv += ['--custom-config', json.dumps(custom_config)]
  code = cli.main(argv)
  return code, [line.strip() for line in capsys.readouterr().out.splitlines()]


def _where(module_name):
  return f'embedding_config_spec in {_path(module_name)}'


def test_an_embedding_module_is_tpu_ready_and_exports_both_tag_sets(
    capsys, taxi_artifacts):
  code, lines = _preflight(capsys, taxi_artifacts, 'embedding_module.py')
  assert code == 0, lines
  assert ("INFO    [embedding/embedding-enqueue] the ids of "
          "'trip_start_hour_xf' enqueue as TPUEstimator enqueues them on a "
          'TPU host.') in lines
  assert any(line.startswith('INFO    [train/train-step] one train step '
                             'compiled with XLA and ran on the sample')
             for line in lines)
  # No "dense tensors only" finding for the ids TPU embedding takes.
  assert not any('sparse-input' in line for line in lines)
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines


@pytest.mark.parametrize('module_name,line', [
    ('embedding_unused_column_module.py',
     'ERROR   [embedding/embedding-column-unused] {where} lists TPU embedding '
     "column(s) of table(s) ['trip_start_day_xf'] that the model_fn never "
     "reads (it reads ['trip_start_hour_xf']): on a TPU, TPUEstimator cannot "
     'name their variables and fails after the first step is built. Read '
     'every column of the spec with tf.compat.v1.feature_column.input_layer '
     '(or DenseFeatures) in the model_fn, or leave the unread ones out of '
     'the spec: build both from one function, as '
     'components/taxi_embedding_module.py does.'),
    ('embedding_extra_column_module.py',
     'ERROR   [embedding/embedding-column-not-in-spec] the model_fn reads TPU '
     "embedding column(s) of table(s) ['trip_start_day_xf'] that {where} "
     'does not list: on a TPU nothing looks their ids up, and the model_fn '
     'would read the raw ids as if they were embeddings. Add the columns to '
     "the EmbeddingConfigSpec's feature_columns (build both from one "
     'function).'),
    ('embedding_missing_feature_module.py',
     "ERROR   [embedding/embedding-feature-missing] the TPU embedding column "
     "'trip_start_weekday_xf_embedding' of {where} reads the feature "
     "'trip_start_weekday_xf', which the examples do not have (they have "
     "'company_xf', 'dropoff_census_tract_xf', 'dropoff_community_area_xf', "
     "'dropoff_latitude_xf', 'dropoff_longitude_xf', 'fare_xf', "
     "'payment_type_xf', 'pickup_census_tract_xf', ...). Output the feature "
     "from the preprocessing_fn (or the module's input_fn), or give the "
     'column the key of a feature the examples have.'),
])
def test_a_spec_that_does_not_fit_the_model_or_data_is_not_tpu_ready(
    capsys, taxi_artifacts, module_name, line):
  code, lines = _preflight(capsys, taxi_artifacts, module_name)
  assert code == 1
  assert lines[0].startswith(f'TPU preflight of {_path(module_name)}: NOT '
                             'TPU-ready')
  assert line.format(where=_where(module_name)) in lines, lines
  # The export would fail the same way: not tried, no knock-on error.
  assert not any(line.startswith('ERROR   [export/export]') for line in lines)


def test_ids_past_a_tables_end_are_not_tpu_ready(capsys, taxi_artifacts):
  module_name = 'embedding_id_range_module.py'
  code, lines = _preflight(capsys, taxi_artifacts, module_name)
  assert code == 1
  (line,) = [line for line in lines if line.startswith('ERROR')]
  assert re.fullmatch(
      r"ERROR   \[embedding/embedding-id-range\] the TPU embedding column "
      r"'dropoff_census_tract_xf_embedding' of " + re.escape(
          _where(module_name)) +
      r' gives ids \[170310\d{5}(, 170\d{8})*\] in first batch of the default '
      r'input_fn over ' + re.escape(taxi_artifacts.transformed_examples.uri)
      + r'/Split-train, outside its table of 1,000 rows \[0, 1000\): on CPU '
      r'the lookup fails when such an id comes; on a TPU nothing checks it\. '
      r'Size the column for every id \(num_buckets above the largest id\), '
      r"map stray ids to a row \(categorical_column_with_identity's "
      r'default_value\), or hash the ids '
      r'\(categorical_column_with_hash_bucket\)\.', line), line


def test_tables_over_a_hosts_memory_budget_are_not_tpu_ready(
    capsys, taxi_artifacts):
  # One 24 x 4 table with one Adagrad slot: 768 bytes on one host.
  code, lines = _preflight(capsys, taxi_artifacts, 'embedding_module.py',
                           {'embedding_host_memory_gb': 5e-7})
  assert code == 1
  assert (
      'ERROR   [embedding/embedding-host-memory] '
      f'{_where("embedding_module.py")} 1 table(s) with AdagradParameters (1 '
      'slot(s) per row) need 768 bytes on each of 1 host '
      "('trip_start_hour_xf': 24 rows x 4, 768 bytes per host): more than the "
      "500 bytes budget (custom_config['embedding_host_memory_gb']=5e-07), so "
      'the host would run out of memory loading them. Split the tables over '
      "more hosts (a multi-host slice, custom_config['tpu_workers']), hash "
      'the ids into fewer rows or lower the dimension, or use an optimizer '
      'with fewer slots (StochasticGradientDescentParameters has none, '
      "Adagrad one, Adam and FTRL two); set custom_config["
      "'embedding_host_memory_gb'] to the TPU hosts' memory when it differs "
      "from this machine's.") in lines


def test_tables_split_over_a_slices_hosts_fit_their_budget(capsys,
                                                           taxi_artifacts):
  # Rows split over two hosts ("div"): 12 rows of the 24 on each.
  code, lines = _preflight(
      capsys, taxi_artifacts, 'embedding_module.py',
      {'embedding_host_memory_gb': 5e-7, 'tpu_workers': ['w-0', 'w-1']})
  assert code == 0, lines
  assert ('INFO    [embedding/embedding-host-memory] 1 table(s) with '
          'AdagradParameters (1 slot(s) per row) need 384 bytes on each of 2 '
          "hosts ('trip_start_hour_xf': 24 rows x 4, 384 bytes per host), "
          'within the 500 bytes budget '
          "(custom_config['embedding_host_memory_gb']=5e-07).") in lines


def test_sparse_ids_that_bypass_the_spec_are_still_found(capsys,
                                                         taxi_artifacts):
  code, lines = _preflight(capsys, taxi_artifacts, 'embedding_bypass_module.py')
  assert code == 1
  (line,) = [line for line in lines if line.startswith('ERROR')]
  assert line.startswith(
      "ERROR   [train/dynamic-shape] op 'input_layer/trip_start_day_xf_"
      "indicator/to_sparse_input/indices' (Where) belongs to the feature "
      "column 'trip_start_day_xf_indicator'")
  assert ('Or, in a model_fn module, give the ids to TPU embedding: a '
          'tf.compat.v1.tpu.experimental.embedding_column listed in '
          'embedding_config_spec(params) '
          '(docs/guide/tpu_embeddings.md).') in line


def test_sparse_input_is_accepted_for_the_spec_and_refused_beside_it():
  # A VarLen feature read by a spec column goes to TPU embedding; another
  # sparse feature would reach the infeed, which takes dense tensors only.
  module = user_module.load_user_module(
      {'module_file': _path('embedding_module.py')})
  config = config_lib.TrainerConfig(use_tpu=True, num_shards=1,
                                    train_batch_size=4)
  run = prepare.prepare_run(config, module, None)
  dataset = tf.data.Dataset.from_tensors(({
      'trip_start_hour_xf': tf.sparse.from_dense(
          tf.constant([[1, 0], [2, 3], [4, 0], [5, 0]], tf.int64)),
      'tags': tf.sparse.from_dense(tf.constant([[1], [0], [1], [1]],
                                               tf.int64)),
      'fare_xf': tf.constant(np.ones([4, 1], np.float32)),
  }, tf.constant([[0], [1], [0], [1]], tf.int64)))
  sample = preflight_sample.from_dataset(dataset, 'a sparse sample')
  report = preflight.run_preflight(
      run.model_fn, config, run.params, sample, module.module_file,
      embedding=run.embedding)
  sparse = [f for f in report.findings if f.code == 'sparse-input']
  assert [(f.where, f.severity) for f in sparse] == [("feature 'tags'",
                                                      'error')]
  assert not report.errors[1:], [f.line() for f in report.errors]
