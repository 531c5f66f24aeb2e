"""Runs a pipeline locally: LocalDagRunner, Beam DirectRunner, SQLite."""

import dataclasses
import datetime
import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from absl import logging as absl_logging
from tfx import v1 as tfx
from ml_metadata.proto import metadata_store_pb2
from tfx.dsl.compiler import constants
from tfx.orchestration import metadata
from tfx.orchestration.portable import runtime_parameter_utils
from tfx.orchestration.portable import tfx_runner
from tfx.types import artifact_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.publishing import training_report
from tfx_tpu_trainer.training import checkpoints
from tfx_tpu_trainer_cli import blessing as blessing_lib
from tfx_tpu_trainer_cli import paths
from tfx_tpu_trainer_cli import run_temp_dir

# The bundled pipeline: package data, loaded by path.
taxi_pipeline = paths.taxi_pipeline()

# No Beam arguments: the DirectRunner's defaults are in-memory, one worker.
# Any Beam argument makes TFX package itself as a `tfx_ephemeral` sdist per
# Beam component (dependency_utils.make_beam_dependency_flags; ~5,800 files
# under the temp directory each), which only remote runners use.
BEAM_PIPELINE_ARGS = []


_PIPELINE_RUN_CONTEXT = 'pipeline_run'


@dataclasses.dataclass(frozen=True)
class OutputLayout:
  """Where a local run writes, all under one output root."""
  output_root: str
  pipeline_name: str = taxi_pipeline.PIPELINE_NAME

  @property
  def pipeline_root(self) -> str:
    return os.path.join(self.output_root, 'pipelines', self.pipeline_name)

  @property
  def metadata_path(self) -> str:
    return os.path.join(self.output_root, 'metadata', self.pipeline_name,
                        'metadata.db')

  @property
  def serving_model_dir(self) -> str:
    return os.path.join(self.output_root, 'serving_model', self.pipeline_name)


@dataclasses.dataclass
class TrainerSummary:
  """What one TPUTrainer of a run produced, and what became of its model.

  `blessed` is None when no Evaluator read the model; the pusher is the one
  that pushed (or was given) this trainer's model, None without one. Local
  paths are absolute.
  """
  trainer_id: str
  metrics: Dict[str, Any]
  model_path: str
  tensorboard_dir: str
  report_path: Optional[str]
  evaluator_metrics: Dict[str, float]
  blessed: Optional[bool]
  pusher_id: Optional[str]
  pushed: bool
  pushed_model_path: Optional[str]
  pushed_model_tag_sets: List[Tuple[str, ...]]
  # The verdict and why: `yes (BalancedAccuracy 0.71 (needs >= 0.55))`.
  blessing: str = ''
  # The TPUBulkInferrer's PredictionLogs of this model (None: no inferrer, or
  # it scored nothing because the model was not blessed).
  inference_result_path: Optional[str] = None


@dataclasses.dataclass
class RunSummary:
  """What a finished local run produced.

  The first fields are those of the first TPUTrainer that ran; `trainers`
  holds every TPUTrainer's, in the order they ran. `blessed` is None without
  an Evaluator; the Transform paths are None without a Transform.
  """
  trainer_metrics: Dict[str, Any]
  evaluator_metrics: Dict[str, float]
  blessed: Optional[bool]
  pushed: bool
  pushed_model_path: Optional[str]
  pushed_model_tag_sets: List[Tuple[str, ...]]
  model_path: str
  tensorboard_dir: str
  seconds: float
  report_path: Optional[str] = None
  transform_graph_path: Optional[str] = None
  transformed_examples_path: Optional[str] = None
  trainers: List[TrainerSummary] = dataclasses.field(default_factory=list)
  # The verdict and why: `yes (BalancedAccuracy 0.71 (needs >= 0.55))`.
  blessing: str = ''
  # The TPUBulkInferrer's PredictionLogs (None: no inferrer, or it scored
  # nothing because the model was not blessed).
  inference_result_path: Optional[str] = None


# What TFX's launcher logs when it reuses a cached execution's outputs.
_CACHED_MESSAGE = 'A cached execution %d is used.'


class ComponentProgress:
  """Prints `[i/n] Component ... done in Ns` from LocalDagRunner's log.

  A filter on the absl logger that sees every record the runner logs and
  passes them all on. A component whose outputs came from the cache is
  `done (cached: the outputs of execution N)`, N found by `reused_execution`
  (the cached execution's id -> the id of the one that made the outputs).
  """

  def __init__(self, component_ids: List[str], printer=print,
               reused_execution=None):
    self._ids = component_ids
    self._started = {}
    self._print = printer
    self._reused_execution = reused_execution
    self._cached = {}  # node id -> the id of its cached execution.
    # Components started and not finished, in start order.
    self.running: List[str] = []

  def filter(self, record) -> bool:
    """Watches the runner's start/finish messages."""
    message = record.msg
    if message == _CACHED_MESSAGE and self.running and record.args:
      self._cached[self.running[-1]] = record.args[0]
    if message in ('Component %s is running.', 'Component %s is finished.'):
      node_id = record.args[0]
      position = (f'[{self._ids.index(node_id) + 1}/{len(self._ids)}]'
                  if node_id in self._ids else '[-]')
      if message.endswith('running.'):
        self._started[node_id] = time.time()
        self.running.append(node_id)
        self._print(f'{position} {node_id} ...', flush=True)
      else:
        if node_id in self.running:
          self.running.remove(node_id)
        seconds = time.time() - self._started.get(node_id, time.time())
        self._print(f'{position} {node_id} done in {seconds:.1f}s'
                    f'{self._cached_note(node_id)}', flush=True)
    return True

  def _cached_note(self, node_id: str) -> str:
    if node_id not in self._cached:
      return ''
    execution_id = self._cached.pop(node_id)
    try:
      reused = (self._reused_execution(execution_id)
                if self._reused_execution else None)
    except Exception:  # pylint: disable=broad-except
      reused = None  # A progress line never fails a run.
    return (f' (cached: the outputs of execution {reused})' if reused else
            ' (cached)')


def run(options: taxi_pipeline.TaxiPipelineOptions,
        printer=print) -> RunSummary:
  """Runs the whole pipeline and summarises what it produced.

  Args:
    options: the pipeline options; metadata config and Beam args are filled in
      when unset.
    printer: where progress lines go.

  Returns:
    The run's summary.
  """
  start = time.time()
  if options.metadata_connection_config is None:
    raise ValueError('options.metadata_connection_config must be set; '
                     'use local_options().')
  return run_pipeline(taxi_pipeline.create_pipeline(options), printer,
                      start=start)


def run_pipeline(pipeline: tfx.dsl.Pipeline, printer=print,
                 start: Optional[float] = None) -> RunSummary:
  """Runs any pipeline with a TPUTrainer; summarises what it produced.

  Args:
    pipeline: the pipeline, with its metadata connection config set.
    printer: where progress lines go.
    start: when the run started (default: now).

  Returns:
    The run's summary.
  """
  start = time.time() if start is None else start
  if pipeline.metadata_connection_config is None:
    raise ValueError(
        f'Pipeline {pipeline.pipeline_info.pipeline_name!r} has no '
        'metadata_connection_config.')
  progress = ComponentProgress(
      [c.id for c in pipeline.components], printer,
      lambda execution_id: reused_execution(
          pipeline.metadata_connection_config, execution_id))
  absl_logging.set_verbosity(absl_logging.INFO)
  absl_logger = absl_logging.get_absl_logger()
  absl_logger.addFilter(progress)
  run_id = datetime.datetime.now().isoformat()
  # Local runs are never retried: earlier runs' checkpoints nobody holds
  # are left by killed runs.
  for checkpoint_dir in _trainer_checkpoint_dirs(pipeline):
    checkpoints.remove_unheld_runs(checkpoint_dir)
  try:
    with run_temp_dir.private_temp_dir(
        os.path.join(pipeline.pipeline_info.pipeline_root,
                     run_temp_dir.TMP_DIR_NAME)):
      # LocalDagRunner().run(pipeline) with a pipeline run id we know, so the
      # summary reads this run's executions even when another run shares
      # the metadata store.
      # TFX packages module files into wheels as it compiles: read them first.
      modules = {component.id: component.exec_properties.get('module_file')
                 for component in pipeline.components}
      pipeline_ir = tfx_runner._make_pipeline_proto(pipeline)  # pylint: disable=protected-access
      runtime_parameter_utils.substitute_runtime_parameter(
          pipeline_ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
      try:
        tfx.orchestration.LocalDagRunner().run_with_ir(pipeline_ir)
      except SystemExit as e:
        raise _module_exit_error(e, modules, progress.running,
                                 pipeline.metadata_connection_config,
                                 run_id) from e
  finally:
    absl_logger.removeFilter(progress)
  return _summarize(pipeline.metadata_connection_config, run_id,
                    time.time() - start)


def _module_exit_error(exit_error: SystemExit, modules: Dict[str, Any],
                       running: List[str], connection_config,
                       run_id: str) -> errors.ModuleExitError:
  """Names the component and module that exited; fails its execution.

  TFX's launcher does not catch SystemExit (not an Exception): the
  execution would stay RUNNING in MLMD and `run` would exit with the
  module's code, 0 for `sys.exit(0)`.

  Args:
    exit_error: the SystemExit.
    modules: component id -> its module_file (read before TFX packages it).
    running: the components started and not finished.
    connection_config: the MLMD connection.
    run_id: the pipeline run id.

  Returns:
    The error to raise.
  """
  node_id = running[-1] if running else None
  module = modules.get(node_id)
  failed = mark_running_executions_failed(connection_config, run_id)
  return errors.ModuleExitError(
      f'The pipeline stopped: SystemExit({exit_error.code!r}) was raised '
      f'while {node_id or "a component"} ran'
      + (f' (module_file {module})' if module else '')
      + ' (e.g. sys.exit() in preprocessing_fn or at module level), so the '
      f'run did not finish{"; its execution is marked failed" if failed else ""}. '
      'Module code must return or raise an exception, never exit the '
      'process.')


def reused_execution(connection_config, execution_id: int) -> Optional[int]:
  """The execution whose outputs the cached execution `execution_id` reused.

  A cached execution records the reused artifacts as its outputs; the
  first execution that output them made them. None for an execution that
  made its own.
  """
  with metadata.Metadata(connection_config) as store:
    outputs = [event.artifact_id for event in
               store.store.get_events_by_execution_ids([execution_id])
               if event.type == metadata_store_pb2.Event.OUTPUT]
    if not outputs:
      return None
    producers = {event.execution_id for event in
                 store.store.get_events_by_artifact_ids(outputs)
                 if event.type == metadata_store_pb2.Event.OUTPUT and
                 event.execution_id < execution_id}
  return min(producers) if producers else None


def mark_running_executions_failed(connection_config, run_id: str) -> int:
  """Marks this run's executions still RUNNING in MLMD as FAILED."""
  with metadata.Metadata(connection_config) as store:
    context = store.store.get_context_by_type_and_name(_PIPELINE_RUN_CONTEXT,
                                                       run_id)
    if context is None:
      return 0
    running = [
        execution for execution in store.store.get_executions_by_context(
            context.id)
        if execution.last_known_state == metadata_store_pb2.Execution.RUNNING
    ]
    for execution in running:
      execution.last_known_state = metadata_store_pb2.Execution.FAILED
    if running:
      store.store.put_executions(running)
    return len(running)


def _checkpoint_dir(pipeline_root: str, pipeline_name: str,
                    custom_config: Optional[Dict[str, Any]]) -> str:
  base = ((custom_config or {}).get('checkpoint_dir') or
          os.path.join(pipeline_root, checkpoints.DEFAULT_DIR_NAME))
  return os.path.join(base, checkpoints.safe_name(pipeline_name))


def _trainer_checkpoint_dirs(pipeline: tfx.dsl.Pipeline) -> List[str]:
  """The checkpoint folders of the pipeline's TPUTrainers (none: none)."""
  from tfx_tpu_trainer import component  # pylint: disable=g-import-not-at-top
  dirs = []
  for trainer in pipeline.components:
    if not isinstance(trainer, component.TPUTrainer):
      continue
    custom_config = trainer.exec_properties.get('custom_config')
    if isinstance(custom_config, str):
      custom_config = json.loads(custom_config or '{}')
    directory = _checkpoint_dir(pipeline.pipeline_info.pipeline_root,
                                pipeline.pipeline_info.pipeline_name,
                                custom_config if isinstance(custom_config, dict)
                                else None)
    if directory not in dirs:
      dirs.append(directory)
  return dirs


def local_options(output_root: str, **kwargs) -> taxi_pipeline.TaxiPipelineOptions:
  """TaxiPipelineOptions for a local run under `output_root`."""
  layout = OutputLayout(os.path.abspath(output_root),
                        kwargs.get('pipeline_name', taxi_pipeline.PIPELINE_NAME))
  os.makedirs(os.path.dirname(layout.metadata_path), exist_ok=True)
  kwargs.setdefault('beam_pipeline_args', list(BEAM_PIPELINE_ARGS))
  kwargs.setdefault('trainer_module_file', paths.TRAINER_MODULE_FILE)
  kwargs.setdefault('preprocessing_module_file',
                    paths.PREPROCESSING_MODULE_FILE)
  return taxi_pipeline.TaxiPipelineOptions(
      pipeline_root=layout.pipeline_root,
      serving_model_dir=layout.serving_model_dir,
      metadata_connection_config=metadata.sqlite_metadata_connection_config(
          layout.metadata_path),
      **kwargs)


def _summarize(connection_config, run_id: str, seconds: float) -> RunSummary:
  """The run's summary, read from MLMD (this pipeline run's executions only)."""
  with metadata.Metadata(connection_config) as store:
    run = _RunGraph(store, run_id)
    trainers = [_trainer_summary(run, execution)
                for execution in run.executions
                if {'Model', 'ModelRun'} <= set(run.output_types(execution))]
    transform_graph = run.newest_output('TransformGraph')
    transformed_examples = run.transformed_examples()
  if not trainers:
    raise ValueError(f'Pipeline run {run_id!r} recorded no trainer output '
                     '(Model and ModelRun) in MLMD.')
  first = trainers[0]
  return RunSummary(
      trainer_metrics=first.metrics,
      evaluator_metrics=first.evaluator_metrics,
      blessed=first.blessed,
      blessing=first.blessing,
      inference_result_path=first.inference_result_path,
      pushed=first.pushed,
      pushed_model_path=first.pushed_model_path,
      pushed_model_tag_sets=first.pushed_model_tag_sets,
      model_path=first.model_path,
      tensorboard_dir=first.tensorboard_dir,
      seconds=seconds,
      report_path=first.report_path,
      transform_graph_path=(_absolute(transform_graph.uri) if transform_graph
                            else None),
      transformed_examples_path=_absolute(transformed_examples),
      trainers=trainers)


class _RunGraph:
  """The executions of one pipeline run, their nodes and artifacts (MLMD)."""

  def __init__(self, store, run_id: str):
    context = store.store.get_context_by_type_and_name(_PIPELINE_RUN_CONTEXT,
                                                       run_id)
    executions = (store.store.get_executions_by_context(context.id)
                  if context else [])
    self.executions = sorted(executions, key=lambda e: e.id)
    self._execution_types = {t.id: t.name
                             for t in store.store.get_execution_types()}
    self.node_ids = {}
    for execution in self.executions:
      contexts = {c.type: c.name for c in
                  store.store.get_contexts_by_execution(execution.id)}
      # `<pipeline context name>.<node id>` (TFX's node_context_name).
      node = contexts.get(constants.NODE_CONTEXT_TYPE_NAME, '')
      prefix = contexts.get(constants.PIPELINE_CONTEXT_TYPE_NAME, '') + '.'
      self.node_ids[execution.id] = (node[len(prefix):]
                                     if node.startswith(prefix) else node)
    events = store.store.get_events_by_execution_ids(
        [e.id for e in self.executions])
    self._inputs = {}
    self._outputs = {}
    for event in events:
      if event.type == metadata_store_pb2.Event.INPUT:
        self._inputs.setdefault(event.execution_id, []).append(
            event.artifact_id)
      elif event.type in (metadata_store_pb2.Event.OUTPUT,
                          metadata_store_pb2.Event.DECLARED_OUTPUT):
        self._outputs.setdefault(event.execution_id, []).append(
            event.artifact_id)
    ids = sorted({e.artifact_id for e in events})
    protos = store.store.get_artifacts_by_id(ids)
    types = {t.id: t for t in store.store.get_artifact_types_by_id(
        sorted({p.type_id for p in protos}))}
    self.artifacts = {
        p.id: artifact_utils.deserialize_artifact(types[p.type_id], p)
        for p in protos}

  def output_types(self, execution) -> Dict[str, Any]:
    """Type name -> the newest output artifact of `execution`."""
    return self._by_type(self._outputs.get(execution.id, []))

  def newest_output(self, type_name: str) -> Optional[Any]:
    """The run's newest output artifact of `type_name`, or None."""
    return self._by_type([artifact_id for execution in self.executions
                          for artifact_id in self._outputs.get(execution.id, [])
                          ]).get(type_name)

  def transformed_examples(self) -> Optional[str]:
    """The uri of the Examples that Transform wrote in this run, if any."""
    for execution in self.executions:
      if self._execution_types.get(execution.type_id, '').endswith('Transform'):
        examples = self.output_types(execution).get('Examples')
        if examples is not None:
          return examples.uri
    return None

  def readers(self, artifact_id: int, output_type: str) -> List[Any]:
    """The executions that read the artifact and output an `output_type`."""
    return [e for e in self.executions
            if artifact_id in self._inputs.get(e.id, []) and
            output_type in self.output_types(e)]

  def _by_type(self, artifact_ids) -> Dict[str, Any]:
    by_type = {}
    for artifact_id in sorted(artifact_ids):
      artifact = self.artifacts[artifact_id]
      by_type[artifact.type_name] = artifact
    return by_type


def _trainer_summary(run: _RunGraph, execution) -> TrainerSummary:
  """One TPUTrainer's outputs, and the Evaluator and Pusher of its model."""
  outputs = run.output_types(execution)
  model, model_run = outputs['Model'], outputs['ModelRun']
  evaluators = run.readers(model.id, 'ModelBlessing') or run.readers(
      model.id, 'ModelEvaluation')
  evaluated = run.output_types(evaluators[-1]) if evaluators else {}
  blessing = evaluated.get('ModelBlessing')
  evaluation = evaluated.get('ModelEvaluation')
  pushers = run.readers(model.id, 'PushedModel')
  pushed_model = (run.output_types(pushers[-1])['PushedModel'] if pushers
                  else None)
  inferrers = run.readers(model.id, 'InferenceResult')
  inference_result = (run.output_types(inferrers[-1])['InferenceResult']
                      if inferrers else None)
  pushed = bool(pushed_model and pushed_model.get_int_custom_property('pushed'))
  pushed_path = (_absolute(pushed_model.get_string_custom_property(
      'pushed_destination')) if pushed else None)
  tensorboard_dir = _absolute(model_run.uri)
  evaluator_metrics = _evaluator_metrics(evaluation.uri) if evaluation else {}
  blessed = (bool(blessing.get_int_custom_property('blessed'))
             if blessing else None)
  return TrainerSummary(
      trainer_id=run.node_ids.get(execution.id, ''),
      metrics={
          name[len(metrics_lib.CUSTOM_PROPERTY_PREFIX):]:
              model.get_custom_property(name)
          for name in model.mlmd_artifact.custom_properties
          if name.startswith(metrics_lib.CUSTOM_PROPERTY_PREFIX)},
      model_path=_absolute(model.uri),
      tensorboard_dir=tensorboard_dir,
      report_path=_existing(training_report.report_path(tensorboard_dir)),
      evaluator_metrics=evaluator_metrics,
      blessed=blessed,
      blessing=(blessing_lib.explain(evaluation.uri, blessed,
                                     evaluator_metrics)
                if evaluation and blessed is not None else ''),
      inference_result_path=_scored(inference_result),
      pusher_id=run.node_ids.get(pushers[-1].id) if pushers else None,
      pushed=pushed,
      pushed_model_path=pushed_path,
      pushed_model_tag_sets=(export.saved_model_tag_sets(pushed_path)
                             if pushed_path else []))


def _absolute(path: Optional[str]) -> Optional[str]:
  """A local path made absolute, against the directory the run ran in.

  A pipeline file may change the directory (`os.chdir`) and give relative
  paths; the summary's paths must still work from the user's directory.
  """
  if not path or config_lib.is_uri(path):
    return path
  return os.path.abspath(path)


def _scored(inference_result: Any) -> Optional[str]:
  """The inferrer's output folder when it wrote PredictionLogs, else None."""
  if inference_result is None or not os.path.isdir(inference_result.uri):
    return None
  return (_absolute(inference_result.uri) if os.listdir(inference_result.uri)
          else None)


def _existing(path: str) -> Optional[str]:
  return path if os.path.isfile(path) else None


def _evaluator_metrics(evaluation_uri: str) -> Dict[str, float]:
  """The overall-slice metrics TFMA wrote."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  result = tfma.load_eval_result(evaluation_uri)
  metrics = {}
  for slice_key, slice_metrics in result.slicing_metrics:
    if slice_key:
      continue
    for output in slice_metrics.values():
      for sub_key in output.values():
        for name, value in sub_key.items():
          if 'doubleValue' in value:
            metrics[name] = value['doubleValue']
  return metrics
