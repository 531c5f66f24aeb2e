"""Runs a pipeline locally: LocalDagRunner, Beam DirectRunner, SQLite.

`run` runs the taxi pipeline; `run_pipeline` any pipeline with a TPUTrainer
(a user's, from `tfx-tpu-trainer run --pipeline FILE:FUNCTION`), with the
same progress lines and summary.
"""

import contextlib
import dataclasses
import datetime
import os
import shutil
import tempfile
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

from tfx_tpu_trainer_cli.bundled.pipelines import taxi_pipeline
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.publishing import report as report_lib

# No Beam arguments: the DirectRunner's defaults are in-memory, one worker.
# Any Beam argument makes TFX package itself as a `tfx_ephemeral` sdist per
# Beam component (dependency_utils.make_beam_dependency_flags; ~5,800 files
# under the temp directory each), which only remote runners use.
BEAM_PIPELINE_ARGS = []
# The run's temporary files (TFX's module wheels and pip targets) go in a
# folder of this name under the pipeline root, removed when the run ends.
TMP_DIR_NAME = '_tmp'


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
class RunSummary:
  """What a finished local run produced.

  `blessed` is None without an Evaluator; the Transform paths are None
  without a Transform.
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


class ComponentProgress:
  """Prints `[i/n] Component ... done in Ns` from LocalDagRunner's log.

  A filter on the absl logger that sees every record the runner logs and
  passes them all on.
  """

  def __init__(self, component_ids: List[str], printer=print):
    self._ids = component_ids
    self._started = {}
    self._print = printer

  def filter(self, record) -> bool:
    """Watches the runner's start/finish messages."""
    message = record.msg
    if message in ('Component %s is running.', 'Component %s is finished.'):
      node_id = record.args[0]
      position = (f'[{self._ids.index(node_id) + 1}/{len(self._ids)}]'
                  if node_id in self._ids else '[-]')
      if message.endswith('running.'):
        self._started[node_id] = time.time()
        self._print(f'{position} {node_id} ...', flush=True)
      else:
        seconds = time.time() - self._started.get(node_id, time.time())
        self._print(f'{position} {node_id} done in {seconds:.1f}s', flush=True)
    return True


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
  progress = ComponentProgress([c.id for c in pipeline.components], printer)
  absl_logging.set_verbosity(absl_logging.INFO)
  absl_logger = absl_logging.get_absl_logger()
  absl_logger.addFilter(progress)
  run_id = datetime.datetime.now().isoformat()
  try:
    with _private_temp_dir(os.path.join(pipeline.pipeline_info.pipeline_root,
                                        TMP_DIR_NAME)):
      # LocalDagRunner().run(pipeline) with a pipeline run id we know, so the
      # summary reads this run's executions even when another run shares
      # the metadata store.
      pipeline_ir = tfx_runner._make_pipeline_proto(pipeline)  # pylint: disable=protected-access
      runtime_parameter_utils.substitute_runtime_parameter(
          pipeline_ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id})
      tfx.orchestration.LocalDagRunner().run_with_ir(pipeline_ir)
  finally:
    absl_logger.removeFilter(progress)
  return _summarize(pipeline.metadata_connection_config, run_id,
                    time.time() - start)


@contextlib.contextmanager
def _private_temp_dir(parent: str):
  """Points tempfile and TMPDIR (for subprocesses) at a fresh directory.

  TFX builds module wheels and pip-installs them into temporary directories
  it never removes; they go under `parent` and are deleted afterwards.
  """
  parent = os.path.abspath(parent)
  os.makedirs(parent, exist_ok=True)
  directory = tempfile.mkdtemp(prefix='run-', dir=parent)
  saved_tempdir, saved_env = tempfile.tempdir, os.environ.get('TMPDIR')
  tempfile.tempdir = directory
  os.environ['TMPDIR'] = directory
  try:
    yield directory
  finally:
    tempfile.tempdir = saved_tempdir
    if saved_env is None:
      os.environ.pop('TMPDIR', None)
    else:
      os.environ['TMPDIR'] = saved_env
    shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
      os.rmdir(parent)  # Only when no other run is using it.


def local_options(output_root: str, **kwargs) -> taxi_pipeline.TaxiPipelineOptions:
  """TaxiPipelineOptions for a local run under `output_root`."""
  layout = OutputLayout(os.path.abspath(output_root),
                        kwargs.get('pipeline_name', taxi_pipeline.PIPELINE_NAME))
  os.makedirs(os.path.dirname(layout.metadata_path), exist_ok=True)
  kwargs.setdefault('beam_pipeline_args', list(BEAM_PIPELINE_ARGS))
  return taxi_pipeline.TaxiPipelineOptions(
      pipeline_root=layout.pipeline_root,
      serving_model_dir=layout.serving_model_dir,
      metadata_connection_config=metadata.sqlite_metadata_connection_config(
          layout.metadata_path),
      **kwargs)


def run_outputs(store, run_id: str) -> Dict[str, Any]:
  """Type name -> the newest output artifact of the pipeline run `run_id`.

  Only the executions of this pipeline run count (MLMD context of type
  `pipeline_run` named by the run id), so a concurrent run on the same
  metadata store cannot leak into the summary.
  """
  context = store.store.get_context_by_type_and_name(_PIPELINE_RUN_CONTEXT,
                                                     run_id)
  if context is None:
    return {}
  executions = store.store.get_executions_by_context(context.id)
  events = store.store.get_events_by_execution_ids([e.id for e in executions])
  output_ids = sorted({
      event.artifact_id for event in events
      if event.type in (metadata_store_pb2.Event.OUTPUT,
                        metadata_store_pb2.Event.DECLARED_OUTPUT)})
  outputs = {}
  for proto in store.store.get_artifacts_by_id(output_ids):
    artifact_type = store.store.get_artifact_types_by_id([proto.type_id])[0]
    if (artifact_type.name not in outputs or
        proto.id > outputs[artifact_type.name].id):
      outputs[artifact_type.name] = artifact_utils.deserialize_artifact(
          artifact_type, proto)
  return outputs


def _summarize(connection_config, run_id: str, seconds: float) -> RunSummary:
  with metadata.Metadata(connection_config) as store:
    outputs = run_outputs(store, run_id)
    model = outputs.get('Model')
    model_run = outputs.get('ModelRun')
    blessing = outputs.get('ModelBlessing')
    evaluation = outputs.get('ModelEvaluation')
    pushed_model = outputs.get('PushedModel')
    transform_graph = outputs.get('TransformGraph')
    transformed_examples = _transformed_examples(store, run_id)
  trainer_metrics = {
      name[len(metrics_lib.CUSTOM_PROPERTY_PREFIX):]: model.get_custom_property(name)
      for name in model.mlmd_artifact.custom_properties
      if name.startswith(metrics_lib.CUSTOM_PROPERTY_PREFIX)
  }
  pushed = bool(pushed_model and pushed_model.get_int_custom_property('pushed'))
  pushed_path = (pushed_model.get_string_custom_property('pushed_destination')
                 if pushed else None)
  return RunSummary(
      trainer_metrics=trainer_metrics,
      evaluator_metrics=_evaluator_metrics(evaluation.uri) if evaluation else {},
      blessed=(bool(blessing.get_int_custom_property('blessed'))
               if blessing else None),
      pushed=pushed,
      pushed_model_path=pushed_path,
      pushed_model_tag_sets=(export.saved_model_tag_sets(pushed_path)
                             if pushed_path else []),
      model_path=model.uri,
      tensorboard_dir=model_run.uri,
      seconds=seconds,
      report_path=_existing(report_lib.report_path(model_run.uri)),
      transform_graph_path=transform_graph.uri if transform_graph else None,
      transformed_examples_path=transformed_examples)


def _existing(path: str) -> Optional[str]:
  return path if os.path.isfile(path) else None


def _transformed_examples(store, run_id: str) -> Optional[str]:
  """The uri of the Examples that Transform wrote in this run, if any."""
  context = store.store.get_context_by_type_and_name(_PIPELINE_RUN_CONTEXT,
                                                     run_id)
  if context is None:
    return None
  executions = store.store.get_executions_by_context(context.id)
  types = {t.id: t.name for t in store.store.get_execution_types()}
  transforms = [e.id for e in executions
                if types.get(e.type_id, '').endswith('Transform')]
  events = store.store.get_events_by_execution_ids(transforms)
  ids = [e.artifact_id for e in events
         if e.type == metadata_store_pb2.Event.OUTPUT]
  for artifact in store.store.get_artifacts_by_id(ids):
    artifact_type = store.store.get_artifact_types_by_id([artifact.type_id])[0]
    if artifact_type.name == 'Examples':
      return artifact.uri
  return None


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
