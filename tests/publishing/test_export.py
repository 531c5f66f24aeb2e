"""The export's own check: a {serve, tpu} graph must run on the TPU."""

import os

import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.training import estimator_builder

from tests.conftest import TEST_MODULES_DIR

FEATURES = ('fare_xf', 'trip_miles_xf', 'trip_seconds_xf')


def _input_fn(params):
  features = {name: tf.ones([params['batch_size']]) for name in FEATURES}
  labels = tf.ones([params['batch_size'], 1], tf.int64)
  return tf.data.Dataset.from_tensors((features, labels)).repeat()


def _receiver():
  features = {name: tf.compat.v1.placeholder(tf.float32, [None], name=name)
              for name in FEATURES}
  return tf.estimator.export.ServingInputReceiver(features, features)


def _trained_estimator(module_name, model_dir):
  module = user_module.load_user_module(
      {'module_file': os.path.join(TEST_MODULES_DIR, module_name)})
  config = config_lib.TrainerConfig.from_custom_config(
      {'export_saved_model_api_version': 2, 'train_batch_size': 4},
      environ={})
  estimator = estimator_builder.build_estimator(
      dispatch.model_fn_for_module(module), config,
      estimator_builder.build_run_config(config, model_dir), {})
  estimator.train(_input_fn, max_steps=1)
  return module, estimator


def test_a_cpu_graph_tagged_serve_tpu_is_not_published(tmp_path):
  module, estimator = _trained_estimator('linear_module.py',
                                         str(tmp_path / 'model_run'))
  serving_dir = str(tmp_path / 'model' / 'Format-Serving')
  os.makedirs(os.path.dirname(serving_dir))
  with pytest.raises(export.ExportError) as error:
    export.export_serving_model(estimator, _receiver, serving_dir,
                                source=module.model_fn.where)
  assert str(error.value).startswith(
      f'{module.model_fn.where} does no TPU inference: with '
      "custom_config['export_saved_model_api_version']=2")
  # Nothing published, the staging directory gone.
  assert os.listdir(os.path.dirname(serving_dir)) == []


def test_a_model_fn_that_runs_its_own_tpu_inference_is_published(tmp_path):
  _, estimator = _trained_estimator('tpu_inference_module.py',
                                    str(tmp_path / 'model_run'))
  serving_dir = str(tmp_path / 'model' / 'Format-Serving')
  os.makedirs(os.path.dirname(serving_dir))
  export.export_serving_model(estimator, _receiver, serving_dir)
  assert export.saved_model_tag_sets(serving_dir) == [('serve',),
                                                      ('serve', 'tpu')]
  export.check_tpu_graph(serving_dir)
