"""The trainer's outputs in the Kubeflow Pipelines (v1) UI.

TFX 1.15's container entrypoint (`_dump_ui_metadata`) appends the entries of
a valid `/mlpipeline-ui-metadata.json` it finds, so the executor merges into
that file; TFX declares no `mlpipeline-metrics`, so the trainer step does.
When the executor did not run (a retry of an execution that succeeded, where
TFX's dump raises `KeyError: 'model_run'`, or a cache hit), the step shows
the earlier execution's outputs instead (`dump_step_ui_metadata`).
"""

import argparse
import dataclasses
import json
import math
import numbers
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import logging

__all__ = ['kfp_v1_step_paths', 'write_kfp_ui_outputs', 'merge_ui_metadata',
           'trainer_step_outputs', 'main']


METRICS_PATH = '/mlpipeline-metrics.json'
UI_METADATA_PATH = '/mlpipeline-ui-metadata.json'
METRICS_ARTIFACT = 'mlpipeline-metrics'
TFX_V1_ENTRYPOINT = 'tfx.orchestration.kubeflow.container_entrypoint'
# The step's entrypoint module (kubeflow/step_outputs.py runs `main`).
TRAINER_STEP_ENTRYPOINT = 'tfx_tpu_trainer.kubeflow.step_outputs'
TFX_V1_COMMAND = ('python', '-m', TFX_V1_ENTRYPOINT)
TRAINER_STEP_COMMAND = ('python', '-m', TRAINER_STEP_ENTRYPOINT)
# KFP's API server accepts these names and at most 50 metrics per run.
_METRIC_NAME = re.compile(r'^[a-zA-Z]([-_a-zA-Z0-9]{0,62}[a-zA-Z0-9])?$')
MAX_METRICS = 50
# A training report up to this size is inlined into the UI metadata (the
# viewer then needs no access to the artifact store); a larger one is named
# by its path, which the KFP UI reads from the artifact store.
MAX_INLINE_REPORT_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class KfpOutputPaths:
  """Where the step's KFP UI files go."""
  metrics_path: str = METRICS_PATH
  ui_metadata_path: str = UI_METADATA_PATH


def kfp_v1_step_paths(main_module: Optional[str] = None,
                      argv: Optional[Sequence[str]] = None
                     ) -> Optional[KfpOutputPaths]:
  """The KFP UI paths when running inside a Kubeflow v1 step, else None.

  Args:
    main_module: the name `__main__` was run as (default: this process's).
    argv: the entrypoint's arguments, for TFX's `--metadata_ui_path`
      (default: `sys.argv[1:]`).

  Returns:
    The paths, or None outside a Kubeflow v1 step.
  """
  if main_module is None:
    main_module = _main_module_name()
  if main_module not in (TFX_V1_ENTRYPOINT, TRAINER_STEP_ENTRYPOINT):
    return None
  return _paths_from_argv(sys.argv[1:] if argv is None else argv)


def kfp_metrics(metrics: Mapping[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
  """The `mlpipeline-metrics` document of the finite numeric `metrics`.

  Names become KFP metric names (`label/mean` -> `label-mean`); values that
  are not finite numbers are left out, as KFP rejects them.

  Args:
    metrics: name -> value, e.g. the trainer's final evaluation.

  Returns:
    `{'metrics': [{'name', 'numberValue', 'format'}, ...]}`, sorted by name.
  """
  entries = []
  seen = set()
  for name, value in sorted(metrics.items()):
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
        not math.isfinite(value)):
      logging.info('KFP metrics: %s=%r is not a finite number; left out.',
                   name, value)
      continue
    kfp_name = _kfp_metric_name(name)
    if kfp_name is None or kfp_name in seen:
      logging.info('KFP metrics: %s has no distinct KFP name; left out.', name)
      continue
    seen.add(kfp_name)
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    entries.append({'name': kfp_name, 'numberValue': number, 'format': 'RAW'})
  if len(entries) > MAX_METRICS:
    logging.warning('KFP shows at most %d metrics; %d left out.', MAX_METRICS,
                    len(entries) - MAX_METRICS)
  return {'metrics': entries[:MAX_METRICS]}


def tensorboard_output(tensorboard_dir: str) -> Dict[str, str]:
  """A `mlpipeline-ui-metadata` entry: TensorBoard over `tensorboard_dir`."""
  return {'type': 'tensorboard', 'source': tensorboard_dir}


def report_output(report_path: str) -> Optional[Dict[str, str]]:
  """A `mlpipeline-ui-metadata` entry: the HTML training report (web-app).

  Inline (the page itself) up to MAX_INLINE_REPORT_BYTES, else its path.
  None when the report cannot be read (it is then simply not shown).
  """
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  try:
    if fileio.stat(report_path).length > MAX_INLINE_REPORT_BYTES:
      return {'type': 'web-app', 'source': report_path}
    with fileio.open(report_path, 'r') as f:
      return {'type': 'web-app', 'storage': 'inline', 'source': f.read()}
  except (OSError, ValueError) as e:  # fileio: NotFoundError is an OSError.
    logging.warning('The training report %s is not shown in the KFP UI: %s',
                    report_path, e)
    return None


def write_kfp_ui_outputs(metrics: Mapping[str, Any],
                         tensorboard_dir: str,
                         paths: Optional[KfpOutputPaths] = None,
                         report_path: Optional[str] = None) -> None:
  """Writes the KFP UI metrics and a TensorBoard view; no-op outside KFP v1.

  Writes `metrics` to the metrics file (replacing it) and merges a
  TensorBoard entry, and the training report when given, into the UI
  metadata file (keeping its entries). Both writes are atomic. Failures are
  logged, not raised: the model is trained.

  Args:
    metrics: the final evaluation metrics, name -> number.
    tensorboard_dir: the TensorBoard log directory (the `model_run` dir).
    paths: where to write; default: `kfp_v1_step_paths()`, and nothing is
      written when that is None.
    report_path: the HTML training report (training_report.py), shown as a web-app.
  """
  paths = paths or kfp_v1_step_paths()
  if paths is None:
    return
  outputs = [tensorboard_output(tensorboard_dir)]
  report = report_output(report_path) if report_path else None
  if report:
    outputs.append(report)
  try:
    _write_json_atomically(paths.metrics_path, kfp_metrics(metrics))
    merge_ui_metadata(paths.ui_metadata_path, outputs)
  except OSError as e:
    logging.warning('Could not write the KFP UI outputs (%s, %s): %s',
                    paths.metrics_path, paths.ui_metadata_path, e)
    return
  logging.info('KFP UI outputs written: %s, %s.', paths.metrics_path,
               paths.ui_metadata_path)


def merge_ui_metadata(path: str, outputs: Sequence[Mapping[str, Any]]) -> None:
  """Appends `outputs` to the UI metadata file's, dropping duplicates."""
  merged = _dedupe(read_ui_outputs(path) + [dict(o) for o in outputs])
  _write_json_atomically(path, {'outputs': merged})


def read_ui_outputs(path: str) -> List[Dict[str, Any]]:
  """The valid `outputs` entries of a UI metadata file (as TFX reads them)."""
  try:
    with open(path) as f:
      document = json.load(f)
  except (OSError, ValueError):
    return []
  outputs = document.get('outputs') if isinstance(document, dict) else None
  if not isinstance(outputs, list):
    return []
  return [o for o in outputs if isinstance(o, dict)]


def finalize_step_outputs(paths: KfpOutputPaths) -> None:
  """After TFX's entrypoint: the metrics file exists, UI entries are unique.

  Args:
    paths: the step's KFP UI files.
  """
  try:
    if not _is_metrics_document(paths.metrics_path):
      # Missing, or the empty placeholder the image creates for its user.
      _write_json_atomically(paths.metrics_path, {'metrics': []})
    if os.path.exists(paths.ui_metadata_path):
      outputs = read_ui_outputs(paths.ui_metadata_path)
      unique = _dedupe(outputs)
      if unique != outputs:
        _write_json_atomically(paths.ui_metadata_path, {'outputs': unique})
  except OSError as e:
    logging.warning('Could not finalize the KFP UI outputs: %s', e)


def trainer_step_outputs(op):
  """Operator function for the trainer step: declares the metrics artifact.

  Also runs the step through this module's `main`, which wraps TFX's
  entrypoint, so the declared file always exists.

  Args:
    op: the trainer's `kfp.dsl.ContainerOp`.

  Returns:
    `op`.
  """
  op.output_artifact_paths[METRICS_ARTIFACT] = METRICS_PATH
  if tuple(op.command) == TFX_V1_COMMAND:
    op.command = list(TRAINER_STEP_COMMAND)
  else:
    logging.warning('Trainer step %s has command %s, not TFX\'s; the KFP '
                    'metrics file may be missing on a cache hit.', op.name,
                    op.command)
  return op


def executor_skipped(node, execution_info) -> bool:
  """Whether TFX's launcher returned without running the executor.

  It returns no output artifacts then (an execution that already succeeded,
  or inputs that could not be resolved), while the node declares outputs.
  """
  return bool(node.outputs.outputs) and not (
      execution_info is not None and execution_info.output_dict)


def previous_outputs(metadata_handle, execution_id: int
                    ) -> Dict[str, List[Any]]:
  """The output artifacts (MLMD protos) of an execution, by output key."""
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  store = metadata_handle.store
  keys: Dict[int, str] = {}
  for event in store.get_events_by_execution_ids([execution_id]):
    if event.type in (metadata_store_pb2.Event.OUTPUT,
                      metadata_store_pb2.Event.DECLARED_OUTPUT):
      keys[event.artifact_id] = (event.path.steps[0].key
                                 if event.path.steps else '')
  outputs: Dict[str, List[Any]] = {}
  for artifact in store.get_artifacts_by_id(sorted(keys)):
    outputs.setdefault(keys[artifact.id], []).append(artifact)
  return outputs


RETRY_NOTE = ('Execution {execution_id} had already succeeded; this retry '
              'did not run the executor. Its outputs are shown.')
CACHE_HIT_NOTE = ('Execution {execution_id} is a cache hit: the executor did '
                  'not run, and the cached outputs\' metrics and TensorBoard '
                  'are shown.')


def is_cache_hit(metadata_handle, execution_id: Optional[int]) -> bool:
  """Whether TFX published the execution as CACHED (outputs reused)."""
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  if execution_id is None:
    return False
  executions = metadata_handle.store.get_executions_by_id([execution_id])
  return bool(executions) and (executions[0].last_known_state ==
                               metadata_store_pb2.Execution.CACHED)


def restore_previous_outputs(metadata_handle, execution_id: Optional[int],
                             paths: KfpOutputPaths,
                             model_run_key: str = 'model_run',
                             note: str = RETRY_NOTE) -> bool:
  """Writes the KFP UI outputs of the execution that already succeeded.

  Args:
    metadata_handle: an open `tfx.orchestration.metadata.Metadata`.
    execution_id: the execution TFX's launcher returned (None: no execution).
    paths: the step's KFP UI files.
    model_run_key: the output key of the trainer's `ModelRun`.
    note: the markdown shown with them (`{execution_id}` filled in).

  Returns:
    Whether the previous metrics were found and written.
  """
  from tfx_tpu_trainer.publishing import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  if execution_id is None:
    return False
  model_runs = previous_outputs(metadata_handle, execution_id).get(
      model_run_key, [])
  if not model_runs:
    logging.warning('Execution %d has no %s output; no metrics to restore.',
                    execution_id, model_run_key)
    return False
  model_run_uri = model_runs[0].uri
  metrics_file = os.path.join(model_run_uri, metrics_lib.METRICS_FILE_NAME)
  try:
    with fileio.open(metrics_file) as f:
      metrics = json.loads(f.read())
  except (OSError, ValueError) as e:  # fileio raises NotFoundError(OSError).
    logging.warning('Could not read %s: %s', metrics_file, e)
    return False
  logging.info('Execution %d had already succeeded; its metrics (%s) and '
               'TensorBoard view (%s) are shown again.', execution_id,
               metrics_file, model_run_uri)
  from tfx_tpu_trainer.publishing import training_report  # pylint: disable=g-import-not-at-top
  report_path = training_report.report_path(model_run_uri)
  write_kfp_ui_outputs(metrics, model_run_uri, paths,
                       report_path=(report_path if fileio.exists(report_path)
                                    else None))
  merge_ui_metadata(paths.ui_metadata_path, [{
      'storage': 'inline', 'type': 'markdown',
      'source': note.format(execution_id=execution_id)}])
  return True


def dump_step_ui_metadata(node, execution_info, paths: KfpOutputPaths,
                          metadata_handle_factory, tfx_dump_ui_metadata,
                          ui_metadata_path: str = UI_METADATA_PATH) -> None:
  """The trainer step's UI dump: TFX's, or the earlier outputs' when the
  executor did not run (a retry of a succeeded execution, or a cache hit).

  Args:
    node: the trainer's pipeline node.
    execution_info: what TFX's launcher returned.
    paths: the step's KFP UI files.
    metadata_handle_factory: opens MLMD (a context manager).
    tfx_dump_ui_metadata: TFX's `_dump_ui_metadata`.
    ui_metadata_path: passed on to TFX's.
  """
  execution_id = getattr(execution_info, 'execution_id', None)
  if executor_skipped(node, execution_info):
    logging.warning('The executor of %s did not run (execution %s); TFX\'s '
                    'UI metadata is skipped.', node.node_info.id, execution_id)
    with metadata_handle_factory() as handle:
      restore_previous_outputs(handle, execution_id, paths)
    return
  with metadata_handle_factory() as handle:
    if is_cache_hit(handle, execution_id):
      logging.info('Execution %s is a cache hit; the cached outputs are '
                   'shown.', execution_id)
      restore_previous_outputs(handle, execution_id, paths,
                               note=CACHE_HIT_NOTE)
      return
  tfx_dump_ui_metadata(node, execution_info, ui_metadata_path)


def main(argv: Optional[Sequence[str]] = None,
         paths: Optional[KfpOutputPaths] = None) -> None:
  """The trainer step's entrypoint: TFX's, then `finalize_step_outputs`.

  Runs `tfx.orchestration.kubeflow.container_entrypoint.main` in this
  process with the same arguments, so the executor runs here too. When the
  launcher skips the executor, TFX's UI dump (which would raise) is replaced
  by `restore_previous_outputs`.

  Args:
    argv: TFX's container entrypoint arguments (default `sys.argv[1:]`).
    paths: the KFP UI files (default: from `argv`).
  """
  # Imported here: this module is imported by the executor and the compiler,
  # which do not need the entrypoint.
  from tfx.orchestration.kubeflow import container_entrypoint  # pylint: disable=g-import-not-at-top
  argv = list(sys.argv[1:] if argv is None else argv)
  paths = paths or _paths_from_argv(argv)
  tfx_dump_ui_metadata = container_entrypoint._dump_ui_metadata  # pylint: disable=protected-access

  def dump_ui_metadata(node, execution_info, ui_metadata_path=UI_METADATA_PATH):
    dump_step_ui_metadata(node, execution_info, paths,
                          lambda: _metadata_handle(argv),
                          tfx_dump_ui_metadata, ui_metadata_path)

  container_entrypoint._dump_ui_metadata = dump_ui_metadata  # pylint: disable=protected-access
  try:
    container_entrypoint.main(argv)
  finally:
    container_entrypoint._dump_ui_metadata = tfx_dump_ui_metadata  # pylint: disable=protected-access
    finalize_step_outputs(paths)


def _metadata_handle(argv: Sequence[str]):
  """MLMD as TFX's entrypoint reaches it (`--kubeflow_metadata_config`)."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from tfx.orchestration import metadata  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow import container_entrypoint  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow.proto import kubeflow_pb2  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(add_help=False)
  parser.add_argument('--kubeflow_metadata_config', required=True)
  known, _ = parser.parse_known_args(list(argv))
  config = kubeflow_pb2.KubeflowMetadataConfig()
  json_format.Parse(known.kubeflow_metadata_config, config)
  return metadata.Metadata(
      container_entrypoint._get_metadata_connection_config(config))  # pylint: disable=protected-access


def _is_metrics_document(path: str) -> bool:
  try:
    with open(path) as f:
      document = json.load(f)
  except (OSError, ValueError):
    return False
  return isinstance(document, dict) and isinstance(document.get('metrics'),
                                                   list)


def _main_module_name() -> Optional[str]:
  spec = getattr(sys.modules.get('__main__'), '__spec__', None)
  return getattr(spec, 'name', None)


def _paths_from_argv(argv: Sequence[str]) -> KfpOutputPaths:
  parser = argparse.ArgumentParser(add_help=False)
  parser.add_argument('--metadata_ui_path', default=UI_METADATA_PATH)
  known, _ = parser.parse_known_args(list(argv))
  return KfpOutputPaths(ui_metadata_path=known.metadata_ui_path)


def _kfp_metric_name(name: str) -> Optional[str]:
  candidate = re.sub(r'[^-_a-zA-Z0-9]+', '-', str(name))
  candidate = re.sub(r'^[^a-zA-Z]+', '', candidate)[:64]
  candidate = re.sub(r'[-_]+$', '', candidate)
  return candidate if _METRIC_NAME.match(candidate) else None


def _dedupe(outputs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Drops repeated entries; TensorBoard views are the same by source."""
  unique, keys = [], set()
  for output in outputs:
    if output.get('type') == 'tensorboard':
      key = ('tensorboard', str(output.get('source', '')).rstrip('/'))
    else:
      key = json.dumps(output, sort_keys=True, default=str)
    if key not in keys:
      keys.add(key)
      unique.append(output)
  return unique


def _write_json_atomically(path: str, document: Any) -> None:
  """Replaces `path` atomically; in place where its directory is read-only.

  A step that runs as a non-root user cannot create files in `/`; the images
  create `/mlpipeline-*.json` for that user (see the Dockerfile), so the file
  itself is writable even where a temporary file beside it is not.
  """
  directory = os.path.dirname(os.path.abspath(path))
  try:
    descriptor, temporary = tempfile.mkstemp(
        dir=directory, prefix='.' + os.path.basename(path) + '.')
  except PermissionError:
    if not os.path.isfile(path):
      raise
    with open(path, 'w') as f:
      json.dump(document, f)
    return
  try:
    with os.fdopen(descriptor, 'w') as f:
      json.dump(document, f)
    os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from readers.
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.remove(temporary)
    raise

