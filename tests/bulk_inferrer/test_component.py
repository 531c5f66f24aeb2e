"""TPUBulkInferrer as a component: BulkInferrer's interface plus custom_config."""

import json
import os

import pytest
from tfx import v1 as tfx
from tfx.components.bulk_inferrer import component as stock_component
from tfx.proto import bulk_inferrer_pb2
from tfx.types import channel_utils
from tfx.types import standard_artifacts

import tfx_tpu_trainer
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.bulk_inferrer import component
from tfx_tpu_trainer.bulk_inferrer import executor
from tfx_tpu_trainer.bulk_inferrer import inference_config


def _channel(artifact_type):
  return channel_utils.as_channel([artifact_type()])


def _inferrer(**kwargs):
  return tfx_tpu_trainer.TPUBulkInferrer(
      examples=_channel(standard_artifacts.Examples),
      model=_channel(standard_artifacts.Model),
      model_blessing=_channel(standard_artifacts.ModelBlessing), **kwargs)


def test_is_exported_lazily_and_is_a_bulk_inferrer():
  assert tfx_tpu_trainer.TPUBulkInferrer is component.TPUBulkInferrer
  assert issubclass(component.TPUBulkInferrer, stock_component.BulkInferrer)
  assert issubclass(executor.Executor, tfx.components.BulkInferrer.EXECUTOR_SPEC
                    .executor_class)


def test_takes_the_stock_arguments_and_has_its_outputs():
  inferrer = _inferrer(
      data_spec=bulk_inferrer_pb2.DataSpec(example_splits=['eval']),
      model_spec=bulk_inferrer_pb2.ModelSpec(
          model_signature_name=['classification']))
  stock = tfx.components.BulkInferrer(
      examples=_channel(standard_artifacts.Examples),
      model=_channel(standard_artifacts.Model),
      model_blessing=_channel(standard_artifacts.ModelBlessing),
      data_spec=bulk_inferrer_pb2.DataSpec(example_splits=['eval']),
      model_spec=bulk_inferrer_pb2.ModelSpec(
          model_signature_name=['classification']))
  assert set(inferrer.inputs) == set(stock.inputs) == {
      'examples', 'model', 'model_blessing'}
  assert set(inferrer.outputs) == set(stock.outputs) == {'inference_result'}
  assert inferrer.outputs['inference_result'].type_name == (
      standard_artifacts.InferenceResult.TYPE_NAME)
  ours = dict(inferrer.exec_properties)
  assert ours.pop('custom_config') is None
  assert ours == dict(stock.exec_properties)
  assert inferrer.executor_spec.executor_class is executor.Executor


def test_output_example_spec_gives_output_examples():
  inferrer = _inferrer(output_example_spec=bulk_inferrer_pb2.OutputExampleSpec(
      output_columns_spec=[bulk_inferrer_pb2.OutputColumnsSpec(
          predict_output=bulk_inferrer_pb2.PredictOutput(output_columns=[
              bulk_inferrer_pb2.PredictOutputCol(output_key='y',
                                                 output_column='y')]))]))
  assert set(inferrer.outputs) == {'output_examples'}


def test_custom_config_is_checked_and_kept_as_json():
  inferrer = _inferrer(custom_config={'use_tpu': False, 'batch_size': 8})
  assert json.loads(inferrer.exec_properties['custom_config']) == {
      'batch_size': 8, 'use_tpu': False}
  with pytest.raises(config_lib.ConfigError,
                     match=r"Unknown TPUBulkInferrer custom_config key\(s\) "
                     r"\['batch'\]. Accepted keys: \['use_tpu', 'tpu', "
                     r"'batch_size'\]"):
    _inferrer(custom_config={'batch': 8})


@pytest.mark.parametrize('raw, message', [
    ({'batch_size': 0}, r"custom_config\['batch_size'\] must be a positive "
     'integer, got 0'),
    ({'use_tpu': 'yes'}, r"custom_config\['use_tpu'\] must be true or "
     "false, got 'yes'"),
    ({'tpu': {'zone': 'x'}}, r"custom_config\['tpu'\] needs a 'name'"),
])
def test_bad_config_values_name_the_key(raw, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    inference_config.InferenceConfig.from_custom_config(raw, environ={})


def test_use_tpu_is_auto_as_for_the_trainer():
  make = inference_config.InferenceConfig.from_custom_config
  assert not make(None, environ={}).use_tpu
  assert make(None, environ={'TPU_NAME': 'my-tpu'}).tpu.name == 'my-tpu'
  assert make(None, environ={'TPU_NAME': 'my-tpu'}).use_tpu
  assert make({'tpu': 'local'}, environ={}).use_tpu
  assert not make({'tpu': 'local', 'use_tpu': False}, environ={}).use_tpu
  assert make('{"batch_size": 3}', environ={}).batch_size == 3
  assert make(None, environ={}).batch_size == (
      inference_config.DEFAULT_BATCH_SIZE)


def test_reference_table_of_keys_is_rendered_from_the_keys():
  table = inference_config.keys_table()
  rows = [line.split(' | ')[0].strip('|` ') for line in table.splitlines()[2:]]
  assert rows == list(inference_config.KEYS)
  assert f'| `batch_size` | `{inference_config.DEFAULT_BATCH_SIZE}` |' in table
  page = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))), 'docs', 'reference', 'custom_config.md')
  with open(page) as f:
    text = f.read()
  assert table in text.split('## TPUBulkInferrer')[1], (
      'docs/reference/custom_config.md\'s TPUBulkInferrer table differs from '
      'the keys; paste the output of `python -m '
      'tfx_tpu_trainer.bulk_inferrer.inference_config` under '
      '"## TPUBulkInferrer":\n' + table)
