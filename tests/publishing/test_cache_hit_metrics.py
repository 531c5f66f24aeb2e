"""A cache hit of the trainer step shows the cached execution's metrics and
TensorBoard, not an empty list and a link to a `model_run` never written.

The CACHED execution is published by TFX's own
`execution_publish_utils.publish_cached_executions` (what the portable
launcher calls on a cache hit) into a real MLMD store; TFX's
`ExecutionInfo` carries the fresh, unwritten output artifacts as the
launcher returns them; TFX's real `_dump_ui_metadata` is the one replaced."""

import json

from tfx_tpu_trainer.publishing import step_outputs as kfp_outputs


def _read(path):
  with open(path) as f:
    return json.load(f)


class _Store:
  """A real MLMD store (SQLite) with a trainer execution that wrote its
  model_run, opened afresh by each `handle()` as the step opens it."""

  def __init__(self, tmp_path, metrics):
    # pylint: disable=g-import-not-at-top
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration import metadata
    from tfx.types import standard_artifacts
    # pylint: enable=g-import-not-at-top
    self._config = metadata.sqlite_metadata_connection_config(
        str(tmp_path / 'mlmd.sqlite'))
    self.model_run_uri = str(tmp_path / 'TPUTrainer' / 'model_run' / '1')
    (tmp_path / 'TPUTrainer' / 'model_run' / '1').mkdir(parents=True)
    (tmp_path / 'TPUTrainer' / 'model_run' / '1' /
     'eval_metrics.json').write_text(json.dumps(metrics))
    with self.handle() as handle:
      store = handle.store
      self.artifact_type_id = store.put_artifact_type(
          metadata_store_pb2.ArtifactType(
              name=standard_artifacts.ModelRun.TYPE_NAME))
      self.execution_type_id = store.put_execution_type(
          metadata_store_pb2.ExecutionType(name='TPUTrainer'))
      self.model_run = standard_artifacts.ModelRun()
      self.model_run.uri = self.model_run_uri
      self.model_run.type_id = self.artifact_type_id
      self.model_run.id, = store.put_artifacts([self.model_run.mlmd_artifact])
      self.first_id = self._execution(
          store, metadata_store_pb2.Execution.COMPLETE)

  def handle(self):
    from tfx.orchestration import metadata  # pylint: disable=g-import-not-at-top
    return metadata.Metadata(self._config)

  def _execution(self, store, state):
    from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
    execution_id, = store.put_executions([metadata_store_pb2.Execution(
        type_id=self.execution_type_id, last_known_state=state)])
    return execution_id

  def cache_hit(self):
    """A second execution, published CACHED by TFX with the first's outputs."""
    # pylint: disable=g-import-not-at-top
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration.portable import execution_publish_utils
    # pylint: enable=g-import-not-at-top
    with self.handle() as handle:
      execution_id = self._execution(handle.store,
                                     metadata_store_pb2.Execution.RUNNING)
      execution, = handle.store.get_executions_by_id([execution_id])
      execution_publish_utils.publish_cached_executions(
          handle, contexts=[], executions=[execution],
          output_artifacts_maps=[{'model_run': [self.model_run]}])
    return execution_id


def _node_and_info(execution_id, model_run_uri):
  """The trainer node and what TFX's launcher returns for the execution."""
  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.portable import data_types
  from tfx.proto.orchestration import pipeline_pb2
  from tfx.types import standard_artifacts
  # pylint: enable=g-import-not-at-top
  node = pipeline_pb2.PipelineNode()
  node.node_info.id = 'TPUTrainer'
  node.outputs.outputs['model_run'].artifact_spec.type.name = (
      standard_artifacts.ModelRun.TYPE_NAME)
  model_run = standard_artifacts.ModelRun()
  model_run.uri = model_run_uri
  return node, data_types.ExecutionInfo(
      execution_id=execution_id, input_dict={},
      output_dict={'model_run': [model_run]},
      exec_properties={'custom_config': '{}'})


def _tfx_dump():
  from tfx.orchestration.kubeflow import container_entrypoint  # pylint: disable=g-import-not-at-top
  return container_entrypoint._dump_ui_metadata  # pylint: disable=protected-access


def test_a_cache_hit_shows_the_cached_metrics_and_tensorboard(paths,
                                                              tmp_path):
  store = _Store(tmp_path, {'accuracy': 0.875, 'global_step': 100})
  execution_id = store.cache_hit()
  # The launcher's fresh output: prepared, never written.
  fresh_uri = str(tmp_path / 'TPUTrainer' / 'model_run' / str(execution_id))
  node, execution_info = _node_and_info(execution_id, fresh_uri)
  kfp_outputs.dump_step_ui_metadata(node, execution_info, paths, store.handle,
                                    _tfx_dump(), paths.ui_metadata_path)
  kfp_outputs.finalize_step_outputs(paths)
  assert _read(paths.metrics_path) == {'metrics': [
      {'name': 'accuracy', 'numberValue': 0.875, 'format': 'RAW'},
      {'name': 'global_step', 'numberValue': 100, 'format': 'RAW'}]}
  outputs = _read(paths.ui_metadata_path)['outputs']
  tensorboards = [o['source'] for o in outputs if o['type'] == 'tensorboard']
  assert tensorboards == [store.model_run_uri]
  assert fresh_uri not in json.dumps(outputs)
  assert {'storage': 'inline', 'type': 'markdown', 'source': (
      f'Execution {execution_id} is a cache hit: the executor did not run, '
      "and the cached outputs' metrics and TensorBoard are shown.")} in outputs


def test_an_execution_that_ran_keeps_tfxs_own_ui_metadata(paths, tmp_path):
  store = _Store(tmp_path, {'accuracy': 0.5})
  kfp_outputs.write_kfp_ui_outputs({'accuracy': 0.5}, store.model_run_uri,
                                   paths)  # What the executor writes.
  node, execution_info = _node_and_info(store.first_id, store.model_run_uri)
  kfp_outputs.dump_step_ui_metadata(node, execution_info, paths, store.handle,
                                    _tfx_dump(), paths.ui_metadata_path)
  kfp_outputs.finalize_step_outputs(paths)
  outputs = _read(paths.ui_metadata_path)['outputs']
  assert [o['type'] for o in outputs] == ['markdown', 'tensorboard']
  assert outputs[1]['source'] == store.model_run_uri
  assert 'cache hit' not in json.dumps(outputs)
  assert _read(paths.metrics_path)['metrics'] == [
      {'name': 'accuracy', 'numberValue': 0.5, 'format': 'RAW'}]
