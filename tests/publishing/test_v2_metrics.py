"""The trainer's `system.Metrics` output, as TFX's KFP v2 entrypoint handles it."""

import json
import sys
import types as python_types

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pipeline_pb2
import pytest
from tfx import types
from tfx.orchestration.kubeflow.v2 import compiler_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
from tfx.types import standard_artifacts

from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer.publishing import v2_metrics


def _runtime_metrics_artifact(artifact_type):
  """The trainer's `metrics` output as the KFP v2 executor input gives it."""
  return json_format.ParseDict(
      {'artifacts': [{
          'name': 'projects/p/artifacts/1', 'uri': 'gs://b/metrics/1',
          'type': artifact_type, 'metadata': {}}]},
      pipeline_pb2.ArtifactList())


# As the compiler declares it (kfp 2's form), and as TFX's v2 compiler wrote it.
ARTIFACT_TYPES = [
    v2_metrics.KFP_V2_ARTIFACT_TYPE,
    {'instanceSchema': compiler_utils.get_artifact_schema(v2_metrics.Metrics)},
]


def test_compiled_schema_titles_the_output_system_metrics():
  assert compiler_utils.get_artifact_schema(v2_metrics.Metrics) == (
      'title: system.Metrics\ntype: object\n')


@pytest.mark.parametrize('artifact_type', ARTIFACT_TYPES)
def test_tfx_v2_entrypoint_reads_it_back_only_with_the_system_module(
    monkeypatch, artifact_type):
  monkeypatch.delitem(sys.modules, 'system', raising=False)
  artifacts = {'metrics': _runtime_metrics_artifact(artifact_type)}
  with pytest.raises(ImportError, match='Could not import system.Metrics'):
    kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(artifacts, {})
  v2_metrics.install_system_module()
  v2_metrics.install_system_module()  # Twice is fine.
  parsed = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(artifacts, {})
  [artifact] = parsed['metrics']
  assert isinstance(artifact, v2_metrics.Metrics)
  assert artifact.uri == 'gs://b/metrics/1'


def test_another_system_module_is_an_error(monkeypatch):
  monkeypatch.setitem(sys.modules, 'system',
                      python_types.ModuleType('system'))
  with pytest.raises(ImportError, match="A module named 'system'"):
    v2_metrics.install_system_module()


def test_recorded_metrics_reach_the_kfp_v2_executor_output():
  output = v2_metrics.Metrics()
  output.uri = 'gs://b/metrics/1'
  output.id = 7
  v2_metrics.record_metrics(
      {'accuracy': 0.875, 'global_step': 100, 'auc': float('nan'),
       'loss': float('inf'), 'flag': True, 'note': 'text'}, output)
  # What TFX's v2 entrypoint hands KFP: the metadata becomes the MLMD
  # artifact's custom properties, which the KFP v2 UI shows as metrics.
  result = kubeflow_v2_entrypoint_utils.translate_executor_output(
      {'metrics': [output]}, {7: 'projects/p/artifacts/1'})
  [runtime] = result['metrics'].artifacts
  assert json_format.MessageToDict(runtime.metadata) == {
      'accuracy': 0.875, 'global_step': 100.0}
  assert runtime.name == 'projects/p/artifacts/1'


def test_nothing_numeric_records_nothing_and_no_output_is_no_error():
  output = v2_metrics.Metrics()
  v2_metrics.record_metrics(
      {'auc': float('nan'), 'loss': float('-inf'), 'flag': False,
       'note': 'text'}, output)
  assert not output.mlmd_artifact.custom_properties
  # A trainer without the metrics output (a spec compiled before it): the
  # executor hands None, and nothing is recorded anywhere.
  assert v2_metrics.record_metrics({'accuracy': 0.5}, None) is None
  assert not output.mlmd_artifact.custom_properties


def test_declared_as_kfp_2_declares_output_metrics():
  component = {'outputDefinitions': {'artifacts': {
      'metrics': {'artifactType': ARTIFACT_TYPES[1]},
      'model': {'artifactType': {'instanceSchema': 'title: tfx.Model\n'}}}}}
  v2_metrics.declare_as_kfp_does(component)
  artifacts = component['outputDefinitions']['artifacts']
  assert artifacts['metrics']['artifactType'] == {
      'schemaTitle': 'system.Metrics', 'schemaVersion': '0.0.1'}
  assert artifacts['model']['artifactType'] == {
      'instanceSchema': 'title: tfx.Model\n'}
  # Parses as the pipeline spec's ArtifactTypeSchema.
  json_format.ParseDict(artifacts['metrics']['artifactType'],
                        pipeline_pb2.ArtifactTypeSchema())


def test_tpu_trainer_declares_the_metrics_output():
  trainer = TPUTrainer(
      examples=types.Channel(type=standard_artifacts.Examples),
      module_file=__file__)
  assert sorted(trainer.outputs) == ['metrics', 'model', 'model_run']
  metrics = trainer.outputs['metrics']
  assert metrics.type is v2_metrics.Metrics
  assert metrics.producer_component_id == trainer.id
  assert metrics.output_key == 'metrics'
