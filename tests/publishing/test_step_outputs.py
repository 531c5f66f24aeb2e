"""KFP v1 UI outputs of the trainer: metrics file, TensorBoard view, merging
with what TFX's container entrypoint writes after the executor."""

import json
import os

import pytest

from tfx_tpu_trainer.publishing import step_outputs as kfp_outputs


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


def test_training_report_is_a_web_app_beside_tensorboard(paths, tmp_path):
  report = tmp_path / 'training_report.html'
  report.write_text('<html><body><h1>Training report</h1></body></html>')
  kfp_outputs.write_kfp_ui_outputs({'auc': 0.5}, 'gs://b/run', paths=paths,
                                   report_path=str(report))
  assert _read(paths.ui_metadata_path) == {'outputs': [
      {'type': 'tensorboard', 'source': 'gs://b/run'},
      {'type': 'web-app', 'storage': 'inline',
       'source': '<html><body><h1>Training report</h1></body></html>'}]}


def test_a_large_training_report_is_named_by_its_path(paths, tmp_path,
                                                      monkeypatch):
  monkeypatch.setattr(kfp_outputs, 'MAX_INLINE_REPORT_BYTES', 10)
  report = tmp_path / 'training_report.html'
  report.write_text('<html>' + 'x' * 20 + '</html>')
  kfp_outputs.write_kfp_ui_outputs({}, 'gs://b/run', paths=paths,
                                   report_path=str(report))
  assert _read(paths.ui_metadata_path)['outputs'][1] == {
      'type': 'web-app', 'source': str(report)}


def test_a_missing_training_report_is_left_out(paths, tmp_path,
                                               absl_warnings):
  missing = str(tmp_path / 'no_report.html')
  kfp_outputs.write_kfp_ui_outputs({'auc': 0.5}, 'gs://b/run', paths=paths,
                                   report_path=missing)
  assert _read(paths.ui_metadata_path) == {
      'outputs': [{'type': 'tensorboard', 'source': 'gs://b/run'}]}
  assert (f'The training report {missing} is not shown in the KFP UI'
          in absl_warnings.text)
  assert _read(paths.metrics_path)['metrics'][0]['name'] == 'auc'


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


# --- A retried trainer step whose execution already succeeded ----------------


def _store_with_trainer_execution(tmp_path, metrics):
  """A real MLMD store (SQLite) with a trainer execution and its outputs."""
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  from tfx.orchestration import metadata  # pylint: disable=g-import-not-at-top
  model_run = tmp_path / 'model_run'
  model_run.mkdir()
  (model_run / 'eval_metrics.json').write_text(json.dumps(metrics))
  handle = metadata.Metadata(metadata.sqlite_metadata_connection_config(
      str(tmp_path / 'mlmd.sqlite')))
  handle.__enter__()
  store = handle.store
  artifact_type = store.put_artifact_type(
      metadata_store_pb2.ArtifactType(name='ModelRun'))
  execution_type = store.put_execution_type(
      metadata_store_pb2.ExecutionType(name='TPUTrainer'))
  artifact_id, = store.put_artifacts([metadata_store_pb2.Artifact(
      type_id=artifact_type, uri=str(model_run))])
  execution_id, = store.put_executions([metadata_store_pb2.Execution(
      type_id=execution_type,
      last_known_state=metadata_store_pb2.Execution.COMPLETE)])
  event = metadata_store_pb2.Event(
      artifact_id=artifact_id, execution_id=execution_id,
      type=metadata_store_pb2.Event.OUTPUT)
  event.path.steps.add().key = 'model_run'
  store.put_events([event])
  return handle, execution_id, str(model_run)


def test_retry_restores_the_succeeded_executions_metrics(paths, tmp_path):
  handle, execution_id, model_run = _store_with_trainer_execution(
      tmp_path, {'accuracy': 0.875, 'global_step': 100})
  with open(os.path.join(model_run, 'training_report.html'), 'w') as f:
    f.write('<html>the report</html>')
  try:
    assert kfp_outputs.restore_previous_outputs(handle, execution_id, paths)
  finally:
    handle.__exit__(None, None, None)
  assert _read(paths.metrics_path) == {'metrics': [
      {'name': 'accuracy', 'numberValue': 0.875, 'format': 'RAW'},
      {'name': 'global_step', 'numberValue': 100, 'format': 'RAW'}]}
  outputs = _read(paths.ui_metadata_path)['outputs']
  assert {'type': 'tensorboard', 'source': model_run} in outputs
  assert {'type': 'web-app', 'storage': 'inline',
          'source': '<html>the report</html>'} in outputs
  assert any(o['type'] == 'markdown' and 'had already succeeded' in
             o['source'] for o in outputs)


def test_retry_without_an_execution_restores_nothing(paths):
  assert not kfp_outputs.restore_previous_outputs(None, None, paths)
  kfp_outputs.finalize_step_outputs(paths)
  assert _read(paths.metrics_path) == {'metrics': []}


def test_executor_skipped_is_an_execution_without_outputs():
  from tfx.orchestration.portable import data_types  # pylint: disable=g-import-not-at-top
  from tfx.proto.orchestration import pipeline_pb2  # pylint: disable=g-import-not-at-top
  node = pipeline_pb2.PipelineNode()
  node.outputs.outputs['model_run'].artifact_spec.type.name = 'ModelRun'
  assert kfp_outputs.executor_skipped(
      node, data_types.ExecutionInfo(execution_id=7))
  assert kfp_outputs.executor_skipped(node, None)
  assert not kfp_outputs.executor_skipped(
      node, data_types.ExecutionInfo(execution_id=7,
                                     output_dict={'model_run': [object()]}))


def test_read_only_root_writes_the_images_placeholders_in_place(
    paths, monkeypatch):
  # The images run as a non-root user who cannot create files in /, and
  # create /mlpipeline-*.json for it (empty): they are written in place.
  for path in (paths.metrics_path, paths.ui_metadata_path):
    open(path, 'w').close()

  def no_temporary_files(*args, **kwargs):
    raise PermissionError(13, 'Permission denied')

  monkeypatch.setattr(kfp_outputs.tempfile, 'mkstemp', no_temporary_files)
  kfp_outputs.finalize_step_outputs(paths)  # Empty placeholder: replaced.
  assert _read(paths.metrics_path) == {'metrics': []}
  kfp_outputs.write_kfp_ui_outputs({'auc': 0.5}, '/runs/1', paths)
  assert _read(paths.metrics_path) == {'metrics': [
      {'name': 'auc', 'numberValue': 0.5, 'format': 'RAW'}]}
  assert _read(paths.ui_metadata_path) == {
      'outputs': [{'type': 'tensorboard', 'source': '/runs/1'}]}
