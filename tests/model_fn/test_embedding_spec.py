"""The `embedding_config_spec(params)` contract: loading it and its refusals."""

import os
import textwrap

import pytest

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.model_fn import embedding_spec

from tests.conftest import TEST_MODULES_DIR

_BASE_HEADER = textwrap.dedent("""\
    import tensorflow as tf
    import embedding_base
    LABEL_KEY = embedding_base.LABEL_KEY
    model_fn = embedding_base.make_model_fn(
        lambda: [embedding_base.hour_column()])
    """)


def _path(name):
  return os.path.join(TEST_MODULES_DIR, name)


def _load(name):
  return user_module.load_user_module({'module_file': _path(name)})


def _prepare(module, **config):
  return prepare.prepare_run(config_lib.TrainerConfig(**config), module, None)


def _written_module(tmp_path, body):
  """A module beside embedding_base (it imports it) with `body` after it."""
  path = tmp_path / 'written_embedding_module.py'
  path.write_text(_BASE_HEADER + textwrap.dedent(body))
  with user_module.first_on_path(TEST_MODULES_DIR):
    return user_module.load_user_module({'module_file': str(path)})


def test_module_spec_is_read_with_its_tables():
  module = _load('embedding_unused_column_module.py')
  run = _prepare(module)
  embedding = run.embedding
  assert embedding.where == ('embedding_config_spec in '
                             f'{_path("embedding_unused_column_module.py")}')
  assert [(t.name, t.vocabulary_size, t.dimension, t.features)
          for t in embedding.tables] == [
              ('trip_start_day_xf', 31, 4, ('trip_start_day_xf',)),
              ('trip_start_hour_xf', 24, 4, ('trip_start_hour_xf',))]
  assert embedding.optimizer == 'AdagradParameters' and embedding.slots == 1
  # Rows split over the hosts ("div"); float32 rows and one Adagrad slot.
  assert embedding.bytes_per_host(1) == (31 + 24) * 4 * 4 * 2
  assert embedding.bytes_per_host(4) == (8 + 6) * 4 * 4 * 2


def test_modules_without_a_spec_have_no_tables():
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  module = user_module.load_user_module(
      {'module_file': paths.TRAINER_MODULE_FILE})
  assert module.embedding_config_spec is None
  assert _prepare(module).embedding is None


def test_a_train_optimizer_is_refused_naming_what_tpu_embedding_takes():
  module = _load('embedding_train_optimizer_module.py')
  with pytest.raises(embedding_spec.EmbeddingSpecError) as error:
    _prepare(module)
  message = str(error.value)
  assert message.startswith(
      f'embedding_config_spec in {_path("embedding_train_optimizer_module.py")}'
      ' raised ValueError: optimization_parameters is of type '
      'AdagradOptimizer, which TPU embedding does not take. TPU embedding '
      'updates its tables itself, with one of '
      'tf.compat.v1.tpu.experimental.StochasticGradientDescentParameters, '
      'tf.compat.v1.tpu.experimental.AdagradParameters, ')
  assert '(not a tf.compat.v1.train or Keras optimizer)' in message


def test_a_zero_dimension_is_refused():
  module = _load('embedding_zero_dimension_module.py')
  with pytest.raises(embedding_spec.EmbeddingSpecError) as error:
    _prepare(module)
  assert str(error.value) == (
      f'embedding_config_spec in {_path("embedding_zero_dimension_module.py")}'
      ' raised ValueError: Invalid dimension 0. The dimension of a TPU '
      'embedding table (the width of its rows) must be a positive integer.')


def test_a_keras_module_with_a_spec_is_refused_with_what_it_can_use():
  with pytest.raises(user_module.UserModuleError) as error:
    _load('embedding_keras_module.py')
  message = str(error.value)
  assert message.startswith(
      f'embedding_config_spec in {_path("embedding_keras_module.py")} needs '
      'a model_fn(features, labels, mode, params) beside it')
  assert ('it can embed dense integer ids with tf.keras.layers.Embedding '
          "(the whole table in every TPU core's memory, updated densely)"
          in message)


def test_a_spec_that_is_no_function_is_refused(tmp_path):
  with pytest.raises(user_module.UserModuleError,
                     match=r'embedding_config_spec in .* must be a function '
                     r'embedding_config_spec\(params\), got '
                     r'EmbeddingConfigSpec'):
    _written_module(tmp_path, """\
        embedding_config_spec = (
            tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
                feature_columns=[embedding_base.hour_column()],
                optimization_parameters=(
                    tf.compat.v1.tpu.experimental.AdagradParameters(0.1))))
        """)


@pytest.mark.parametrize('body,message', [
    ("""\
     def embedding_config_spec(params):
       return {'hour': 24}
     """, 'must return a tf.compat.v1.estimator.tpu.experimental.'
     'EmbeddingConfigSpec, got dict.'),
    ("""\
     def embedding_config_spec(params):
       return tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
           feature_columns=[
               embedding_base.hour_column(),
               tf.feature_column.embedding_column(
                   tf.feature_column.categorical_column_with_identity(
                       'trip_start_day_xf', 31), 4)],
           optimization_parameters=(
               tf.compat.v1.tpu.experimental.AdagradParameters(0.1)))
     """, "lists EmbeddingColumn 'trip_start_day_xf_embedding': the columns "
     'of an EmbeddingConfigSpec must be made by '
     'tf.compat.v1.tpu.experimental.embedding_column or '
     'shared_embedding_columns'),
    ("""\
     def embedding_config_spec(params):
       return tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
           feature_columns=[embedding_base.hour_column()],
           optimization_parameters=(
               tf.compat.v1.tpu.experimental.AdagradParameters(0.1)),
           partition_strategy='mod')
     """, "sets partition_strategy='mod'"),
    ("""\
     from tensorflow.python.tpu import tpu_embedding
     def embedding_config_spec(params):
       return tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
           table_to_config_dict={'hour': tpu_embedding.TableConfig(24, 4)},
           feature_to_config_dict={
               'trip_start_hour_xf': tpu_embedding.FeatureConfig('hour')},
           optimization_parameters=(
               tf.compat.v1.tpu.experimental.AdagradParameters(0.1)))
     """, 'without feature_columns: TPUTrainer needs the columns'),
])
def test_specs_tpu_trainer_cannot_train_are_refused(tmp_path, body, message):
  module = _written_module(tmp_path, body)
  with pytest.raises(embedding_spec.EmbeddingSpecError) as error:
    _prepare(module)
  assert str(error.value).startswith(
      f'embedding_config_spec in {tmp_path / "written_embedding_module.py"} ')
  assert message in str(error.value)


def test_tpu_embedding_needs_a_per_host_input_on_a_tpu():
  module = _load('embedding_module.py')
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['per_host_input'\]='PER_SHARD_V1': "
                     r'with TPU embeddings \(embedding_config_spec in .*\) '
                     r"TPUEstimator takes only \['PER_HOST_V1', 'PER_HOST_V2'\]"):
    _prepare(module, use_tpu=True, per_host_input='PER_SHARD_V1')
  assert _prepare(module, per_host_input='PER_SHARD_V1').embedding is not None


def test_embedding_host_memory_gb_takes_positive_numbers():
  config = config_lib.TrainerConfig.from_custom_config(
      {'embedding_host_memory_gb': 0.5})
  assert config.embedding_host_memory_gb == 0.5
  for bad in (0, -1, 'lots', True):
    with pytest.raises(config_lib.ConfigError,
                       match=r"custom_config\['embedding_host_memory_gb'\] "
                       'must be a positive number'):
      config_lib.TrainerConfig.from_custom_config(
          {'embedding_host_memory_gb': bad})


def test_a_keras_model_is_told_tpu_embedding_columns_need_a_model_fn(capfd):
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  module_file = _path('embedding_dense_features_keras_module.py')
  assert cli.main(['preflight', '--module-file', module_file]) == 1
  out = capfd.readouterr().out
  assert ("'trip_start_hour_xf_embedding' (tpu.experimental.embedding_column "
          "in DenseFeatures layer 'dense_features')") in out
  assert ('TPU embedding columns (tf.compat.v1.tpu.experimental.'
          'embedding_column) are looked up by TPU embedding only for a '
          'model_fn module that lists them in embedding_config_spec(params); '
          'TPUTrainer turns a Keras model into a model_fn without that path, '
          'so put such tables in a model_fn module '
          '(components/taxi_embedding_module.py, docs/guide/tpu_embeddings.md).'
          ) in out


def test_the_busiest_hosts_share_is_checked_against_its_memory(monkeypatch):
  from tfx_tpu_trainer.preflight import embedding_checks  # pylint: disable=g-import-not-at-top
  embedding = _prepare(_load('embedding_unused_column_module.py')).embedding
  # 31 + 24 rows x 4 wide, float32, with one Adagrad slot: 1,760 bytes.
  (finding,) = embedding_checks.memory_findings(
      embedding, config_lib.TrainerConfig(), available_bytes=1000)
  assert finding.severity == 'error'
  assert finding.cause.startswith(
      '2 table(s) with AdagradParameters (1 slot(s) per row) need 1.76 kB in '
      "this process (use_tpu=False) ('trip_start_day_xf': 31 rows x 4, 992 "
      "bytes per host; 'trip_start_hour_xf': 24 rows x 4, 768 bytes per "
      "host): more than the 1 kB budget (this machine's available memory)")
  # On a slice of 4 hosts (TPU_WORKER_HOSTNAMES) each holds a quarter.
  monkeypatch.setenv('TPU_WORKER_HOSTNAMES', 'w-0,w-1,w-2,w-3')
  (finding,) = embedding_checks.memory_findings(
      embedding, config_lib.TrainerConfig(use_tpu=True), available_bytes=1000)
  assert finding.severity == 'info'
  assert finding.cause.startswith(
      '2 table(s) with AdagradParameters (1 slot(s) per row) need 448 bytes '
      'on each of 4 hosts')
