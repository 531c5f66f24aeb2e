"""Runs the data half of the taxi pipeline and hands its artifacts to tests."""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from pipelines import taxi_pipeline


@dataclasses.dataclass
class DataArtifacts:
  raw_examples: Any
  transformed_examples: Any
  schema: Any
  transform_graph: Any
  data_dir: str


def run_data_components(root: str, data_dir: str) -> DataArtifacts:
  """Runs ExampleGen, StatisticsGen, SchemaGen, Validator, Transform."""
  metadata_path = os.path.join(root, 'metadata.db')
  options = taxi_pipeline.TaxiPipelineOptions(
      pipeline_root=os.path.join(root, 'pipeline'),
      data_root=data_dir,
      serving_model_dir=os.path.join(root, 'serving'),
      metadata_connection_config=metadata.sqlite_metadata_connection_config(
          metadata_path))
  components = taxi_pipeline.create_data_components(options)
  tfx.orchestration.LocalDagRunner().run(
      tfx.dsl.Pipeline(
          pipeline_name='taxi_data',
          pipeline_root=options.pipeline_root,
          components=list(components.values()),
          metadata_connection_config=options.metadata_connection_config))
  with metadata.Metadata(options.metadata_connection_config) as store:
    return DataArtifacts(
        raw_examples=_artifact(store, components['example_gen'], 'examples'),
        transformed_examples=_artifact(store, components['transform'],
                                       'transformed_examples'),
        schema=_artifact(store, components['schema_gen'], 'schema'),
        transform_graph=_artifact(store, components['transform'],
                                  'transform_graph'),
        data_dir=data_dir)


def _artifact(store, component, output_key: str):
  """The single artifact of `output_key` whose URI is under the component."""
  channel = component.outputs[output_key]
  marker = os.sep + os.path.join(component.id, output_key) + os.sep
  protos = [
      proto for proto in store.store.get_artifacts_by_type(channel.type_name)
      if marker in proto.uri + os.sep
  ]
  assert len(protos) == 1, (output_key, [p.uri for p in protos])
  artifact = channel.type()
  artifact.set_mlmd_artifact(protos[0])
  return artifact


@dataclasses.dataclass
class TrainerRun:
  """The inputs and outputs of one executor `Do()` call."""
  input_dict: Dict[str, List[Any]]
  output_dict: Dict[str, List[Any]]
  exec_properties: Dict[str, Any]

  @property
  def model(self):
    return self.output_dict['model'][0]

  @property
  def model_run(self):
    return self.output_dict['model_run'][0]


def trainer_run(data: DataArtifacts,
                output_dir: str,
                module_file: str,
                custom_config: Optional[Dict[str, Any]] = None,
                train_steps: int = 20,
                eval_steps: Optional[int] = 4,
                transformed: bool = True,
                base_model: Optional[Any] = None,
                hyperparameters: Optional[Any] = None) -> TrainerRun:
  """Builds the artifacts and properties of a TPUTrainer executor call."""
  input_dict = {'schema': [data.schema]}
  if transformed:
    input_dict['examples'] = [data.transformed_examples]
    input_dict['transform_graph'] = [data.transform_graph]
  else:
    input_dict['examples'] = [data.raw_examples]
  if base_model is not None:
    input_dict['base_model'] = [base_model]
  if hyperparameters is not None:
    input_dict['hyperparameters'] = [hyperparameters]
  model = standard_artifacts.Model()
  model.uri = os.path.join(output_dir, 'model')
  model_run = standard_artifacts.ModelRun()
  model_run.uri = os.path.join(output_dir, 'model_run')
  exec_properties = {
      'module_file': module_file,
      'train_args': proto_utils.proto_to_json(
          trainer_pb2.TrainArgs(num_steps=train_steps)),
      'eval_args': proto_utils.proto_to_json(
          trainer_pb2.EvalArgs(num_steps=eval_steps or 0)),
      'custom_config': json.dumps(custom_config or {}),
  }
  return TrainerRun(input_dict, {'model': [model], 'model_run': [model_run]},
                    exec_properties)


def read_serialized_examples(examples, split: str, count: int) -> List[bytes]:
  """The first `count` serialized tf.Examples of a split (gzip TFRecords)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  uri = artifact_utils.get_split_uri([examples], split)
  files = sorted(tf.io.gfile.glob(os.path.join(uri, '*')))
  dataset = tf.data.TFRecordDataset(files, compression_type='GZIP')
  return [record.numpy() for record in dataset.take(count)]
