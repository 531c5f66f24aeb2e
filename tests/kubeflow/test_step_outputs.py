"""KFP v1 UI outputs of the trainer: metrics file, TensorBoard view, merging
with what TFX's container entrypoint writes after the executor."""

import json
import os

import pytest

from tfx_tpu_trainer.kubeflow import step_outputs as kfp_outputs


@pytest.fixture
def paths(tmp_path):
  return kfp_outputs.KfpOutputPaths(
      metrics_path=str(tmp_path / 'mlpipeline-metrics.json'),
      ui_metadata_path=str(tmp_path / 'mlpipeline-ui-metadata.json'))


def _read(path):
  with open(path) as f:
    return json.load(f)


def test_detects_the_kfp_v1_entrypoints_only():
  assert kfp_outputs.kfp_v1_step_paths() is None  # pytest is __main__ here.
  assert kfp_outputs.kfp_v1_step_paths(main_module='pytest', argv=[]) is None
  assert kfp_outputs.kfp_v1_step_paths(
      main_module='tfx.orchestration.kubeflow.v2.container.'
      'kubeflow_v2_run_executor', argv=[]) is None
  for module in (kfp_outputs.TFX_V1_ENTRYPOINT,
                 kfp_outputs.TRAINER_STEP_ENTRYPOINT):
    assert kfp_outputs.kfp_v1_step_paths(
        main_module=module, argv=['--node_id', 'TPUTrainer']) == (
            kfp_outputs.KfpOutputPaths('/mlpipeline-metrics.json',
                                       '/mlpipeline-ui-metadata.json'))


def test_ui_metadata_path_follows_tfx_flag():
  found = kfp_outputs.kfp_v1_step_paths(
      main_module=kfp_outputs.TFX_V1_ENTRYPOINT,
      argv=['--tfx_ir', '{}', '--metadata_ui_path', '/tmp/ui.json'])
  assert found.ui_metadata_path == '/tmp/ui.json'
  assert found.metrics_path == '/mlpipeline-metrics.json'


def test_no_op_outside_kfp(tmp_path):
  existed = os.path.exists(kfp_outputs.METRICS_PATH)
  kfp_outputs.write_kfp_ui_outputs({'accuracy': 0.5}, str(tmp_path))
  assert os.path.exists(kfp_outputs.METRICS_PATH) == existed
  assert list(tmp_path.iterdir()) == []


def test_metrics_names_values_and_format():
  document = kfp_outputs.kfp_metrics({
      'accuracy': 0.75, 'label/mean': 0.25, 'global_step': 1000,
      'loss': float('nan'), 'auc': float('inf'), 'flag': True,
      'precision_': 0.5, '0bad': 1.0, '///': 2.0, 'name': 'text',
  })
  assert document == {'metrics': [
      {'name': 'bad', 'numberValue': 1.0, 'format': 'RAW'},
      {'name': 'accuracy', 'numberValue': 0.75, 'format': 'RAW'},
      {'name': 'global_step', 'numberValue': 1000, 'format': 'RAW'},
      {'name': 'label-mean', 'numberValue': 0.25, 'format': 'RAW'},
      {'name': 'precision', 'numberValue': 0.5, 'format': 'RAW'},
  ]}


def test_at_most_fifty_metrics_and_unique_names():
  metrics = {f'm{i:03d}': float(i) for i in range(60)}
  metrics.update({'a/b': 1.0, 'a-b': 2.0})
  names = [m['name'] for m in kfp_outputs.kfp_metrics(metrics)['metrics']]
  assert len(names) == 50 and len(set(names)) == 50
  assert names[:1] == ['a-b']  # 'a/b' sorts after 'a-b' and maps onto it.


def test_writes_metrics_and_tensorboard(paths, tmp_path):
  run_dir = str(tmp_path / 'model_run')
  kfp_outputs.write_kfp_ui_outputs({'accuracy': 0.9, 'loss': 0.3}, run_dir,
                                   paths=paths)
  assert _read(paths.metrics_path) == {'metrics': [
      {'name': 'accuracy', 'numberValue': 0.9, 'format': 'RAW'},
      {'name': 'loss', 'numberValue': 0.3, 'format': 'RAW'}]}
  assert _read(paths.ui_metadata_path) == {
      'outputs': [{'type': 'tensorboard', 'source': run_dir}]}
  assert sorted(os.listdir(tmp_path)) == ['mlpipeline-metrics.json',
                                          'mlpipeline-ui-metadata.json']
  assert oct(os.stat(paths.metrics_path).st_mode & 0o777) == '0o644'


def test_merges_into_existing_ui_metadata(paths):
  markdown = {'type': 'markdown', 'storage': 'inline', 'source': '# hi'}
  with open(paths.ui_metadata_path, 'w') as f:
    json.dump({'outputs': [markdown, 'not a dict']}, f)
  kfp_outputs.write_kfp_ui_outputs({}, 'gs://b/run', paths=paths)
  kfp_outputs.write_kfp_ui_outputs({}, 'gs://b/run/', paths=paths)
  assert _read(paths.ui_metadata_path) == {'outputs': [
      markdown, {'type': 'tensorboard', 'source': 'gs://b/run'}]}
  assert _read(paths.metrics_path) == {'metrics': []}


def test_invalid_existing_ui_metadata_is_replaced(paths):
  with open(paths.ui_metadata_path, 'w') as f:
    f.write('{not json')
  kfp_outputs.write_kfp_ui_outputs({}, 'gs://b/run', paths=paths)
  assert _read(paths.ui_metadata_path) == {
      'outputs': [{'type': 'tensorboard', 'source': 'gs://b/run'}]}


def test_unwritable_location_is_logged_not_raised(tmp_path):
  missing = tmp_path / 'no' / 'such'
  kfp_outputs.write_kfp_ui_outputs(
      {'accuracy': 1.0}, 'gs://b/run',
      paths=kfp_outputs.KfpOutputPaths(str(missing / 'm.json'),
                                       str(missing / 'ui.json')))
  assert not missing.exists()


def _tfx_dump_ui_metadata(run_uri: str, ui_metadata_path: str) -> None:
  """What TFX's v1 container entrypoint does after the executor ran."""
  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow import container_entrypoint
  from tfx.orchestration.portable import data_types
  from tfx.proto.orchestration import pipeline_pb2
  from tfx.types import standard_artifacts
  # pylint: enable=g-import-not-at-top
  node = pipeline_pb2.PipelineNode()
  node.node_info.id = 'TPUTrainer'
  node.outputs.outputs['model_run'].artifact_spec.type.name = (
      standard_artifacts.ModelRun.TYPE_NAME)
  model_run = standard_artifacts.ModelRun()
  model_run.uri = run_uri
  execution_info = data_types.ExecutionInfo(
      input_dict={}, output_dict={'model_run': [model_run]},
      exec_properties={'custom_config': '{}'})
  container_entrypoint._dump_ui_metadata(  # pylint: disable=protected-access
      node, execution_info, ui_metadata_path)


def test_tfx_entrypoint_keeps_ours_and_finalize_dedupes(paths):
  run_uri = 'gs://bucket/root/TPUTrainer/model_run/7'
  kfp_outputs.write_kfp_ui_outputs({'accuracy': 0.8}, run_uri, paths=paths)
  _tfx_dump_ui_metadata(run_uri, paths.ui_metadata_path)
  outputs = _read(paths.ui_metadata_path)['outputs']
  # TFX's markdown and tensorboard first, then what it found in the file.
  assert [o['type'] for o in outputs] == ['markdown', 'tensorboard',
                                          'tensorboard']
  assert {o['source'] for o in outputs[1:]} == {run_uri}

  kfp_outputs.finalize_step_outputs(paths)
  outputs = _read(paths.ui_metadata_path)['outputs']
  assert [o['type'] for o in outputs] == ['markdown', 'tensorboard']
  assert outputs[1] == {'type': 'tensorboard', 'source': run_uri}
  assert _read(paths.metrics_path)['metrics'] == [
      {'name': 'accuracy', 'numberValue': 0.8, 'format': 'RAW'}]


def test_finalize_writes_empty_metrics_on_cache_hit(paths):
  _tfx_dump_ui_metadata('gs://b/run', paths.ui_metadata_path)  # No executor.
  before = _read(paths.ui_metadata_path)
  kfp_outputs.finalize_step_outputs(paths)
  assert _read(paths.metrics_path) == {'metrics': []}
  assert _read(paths.ui_metadata_path) == before


def test_step_entrypoint_finalizes_even_when_tfx_fails(paths, capsys):
  # Without its required flags TFX's entrypoint exits; the declared metrics
  # artifact must still exist for Argo.
  with pytest.raises(SystemExit) as raised:
    kfp_outputs.main(['--metadata_ui_path', paths.ui_metadata_path],
                     paths=paths)
  assert raised.value.code == 2
  assert 'the following arguments are required' in capsys.readouterr().err
  assert _read(paths.metrics_path) == {'metrics': []}


def test_trainer_step_outputs_declares_metrics_and_wraps_entrypoint():
  from kfp import dsl  # pylint: disable=g-import-not-at-top
  op = dsl.ContainerOp(
      name='TPUTrainer', image='img', command=list(kfp_outputs.TFX_V1_COMMAND),
      arguments=['--node_id', 'TPUTrainer'],
      output_artifact_paths={'mlpipeline-ui-metadata':
                                 '/mlpipeline-ui-metadata.json'})
  assert kfp_outputs.trainer_step_outputs(op) is op
  assert op.command == ['python', '-m', 'tfx_tpu_trainer.kubeflow.step_outputs']
  assert op.arguments == ['--node_id', 'TPUTrainer']
  assert op.output_artifact_paths == {
      'mlpipeline-ui-metadata': '/mlpipeline-ui-metadata.json',
      'mlpipeline-metrics': '/mlpipeline-metrics.json'}
