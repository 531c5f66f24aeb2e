"""Runs the taxi pipeline locally: LocalDagRunner, Beam DirectRunner, SQLite."""

import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from absl import logging as absl_logging
from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.types import artifact_utils

from pipelines import taxi_pipeline
from tfx_tpu_trainer import export
from tfx_tpu_trainer import metrics as metrics_lib

BEAM_PIPELINE_ARGS = ['--direct_running_mode=in_memory',
                      '--direct_num_workers=1']


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
  """What a finished local run produced."""
  trainer_metrics: Dict[str, Any]
  evaluator_metrics: Dict[str, float]
  blessed: bool
  pushed: bool
  pushed_model_path: Optional[str]
  pushed_model_tag_sets: List[Tuple[str, ...]]
  model_path: str
  tensorboard_dir: str
  seconds: float


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
  pipeline = taxi_pipeline.create_pipeline(options)
  progress = ComponentProgress([c.id for c in pipeline.components], printer)
  absl_logging.set_verbosity(absl_logging.INFO)
  absl_logger = absl_logging.get_absl_logger()
  absl_logger.addFilter(progress)
  first_new_id = _next_artifact_id(options.metadata_connection_config)
  try:
    tfx.orchestration.LocalDagRunner().run(pipeline)
  finally:
    absl_logger.removeFilter(progress)
  return _summarize(options.metadata_connection_config, first_new_id,
                    time.time() - start)


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


def _next_artifact_id(connection_config) -> int:
  with metadata.Metadata(connection_config) as store:
    artifacts = store.store.get_artifacts()
  return max((a.id for a in artifacts), default=0) + 1


def _new_artifact(store, type_name: str, first_new_id: int):
  """The newest artifact of a type created by this run, as a TFX Artifact."""
  protos = [a for a in store.store.get_artifacts_by_type(type_name)
            if a.id >= first_new_id]
  if not protos:
    return None
  proto = max(protos, key=lambda a: a.id)
  artifact_type = store.store.get_artifact_types_by_id([proto.type_id])[0]
  return artifact_utils.deserialize_artifact(artifact_type, proto)


def _summarize(connection_config, first_new_id: int,
               seconds: float) -> RunSummary:
  with metadata.Metadata(connection_config) as store:
    model = _new_artifact(store, 'Model', first_new_id)
    model_run = _new_artifact(store, 'ModelRun', first_new_id)
    blessing = _new_artifact(store, 'ModelBlessing', first_new_id)
    evaluation = _new_artifact(store, 'ModelEvaluation', first_new_id)
    pushed_model = _new_artifact(store, 'PushedModel', first_new_id)
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
      blessed=bool(blessing.get_int_custom_property('blessed')),
      pushed=pushed,
      pushed_model_path=pushed_path,
      pushed_model_tag_sets=(export.saved_model_tag_sets(pushed_path)
                             if pushed_path else []),
      model_path=model.uri,
      tensorboard_dir=model_run.uri,
      seconds=seconds)


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
