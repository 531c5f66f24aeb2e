"""Prepares the benchmark's transformed taxi examples, once per run."""

import csv
import json
import os
import time
from typing import Dict, List, Optional

from absl import app
from absl import flags
from absl import logging

DATA_SPEC_NAME = 'data.json'
PIPELINE_NAME = 'bench_taxi_data'
# Beam DirectRunner in memory, one worker: the pipeline's own local setting.
BEAM_PIPELINE_ARGS = ['--direct_running_mode=in_memory',
                      '--direct_num_workers=1']


def stock_taxi_utils_path() -> str:
  """The `taxi_utils.py` module file that the tfx wheel ships."""
  import tfx  # pylint: disable=g-import-not-at-top
  return os.path.join(
      os.path.dirname(tfx.__file__), 'examples', 'chicago_taxi_pipeline',
      'taxi_utils.py')


def data_spec_path(work_dir: str) -> str:
  return os.path.join(work_dir, DATA_SPEC_NAME)


def _copy_rows(source_dir: str, target_dir: str, rows: int) -> str:
  """Writes the header and the first `rows` data rows of the taxi CSV."""
  os.makedirs(target_dir, exist_ok=True)
  with open(os.path.join(source_dir, 'data.csv'), newline='') as src, open(
      os.path.join(target_dir, 'data.csv'), 'w', newline='') as dst:
    writer = csv.writer(dst)
    for index, row in enumerate(csv.reader(src)):
      if index > rows:
        break
      writer.writerow(row)
  return target_dir


def _count_rows(data_dir: str) -> int:
  with open(os.path.join(data_dir, 'data.csv'), newline='') as f:
    return sum(1 for _ in csv.reader(f)) - 1


def _single_artifact(store, channel, component_id: str, output_key: str):
  """The one artifact of `output_key` written by `component_id`."""
  marker = os.sep + os.path.join(component_id, output_key) + os.sep
  protos = [
      proto for proto in store.store.get_artifacts_by_type(channel.type_name)
      if marker in proto.uri + os.sep
  ]
  if len(protos) != 1:
    raise RuntimeError(f'Expected one {output_key} artifact of '
                       f'{component_id}, found {[p.uri for p in protos]}.')
  artifact = channel.type()
  artifact.set_mlmd_artifact(protos[0])
  return artifact


def prepare(work_dir: str, rows: Optional[int] = None) -> Dict[str, object]:
  """Runs the data components and writes `<work_dir>/data.json`.

  Args:
    work_dir: a directory of the benchmark run (created if needed).
    rows: use only the first `rows` rows of the CSV (None: all 15,002).

  Returns:
    The data spec: `input_dict` (TFX artifact JSON of examples, schema,
    transform_graph), the module file, the row count and the wall time.
  """
  # pylint: disable=g-import-not-at-top
  from tfx import v1 as tfx
  from tfx.orchestration import metadata
  from tfx.types import artifact_utils
  from tfx_tpu_trainer_cli import paths
  from tfx_tpu_trainer_cli import paths
  taxi_pipeline = paths.taxi_pipeline()
  # pylint: enable=g-import-not-at-top

  start = time.time()
  data_root = paths.embedded_data_root()
  if rows is not None:
    data_root = _copy_rows(data_root, os.path.join(work_dir, 'csv'), rows)
  module_file = stock_taxi_utils_path()
  pipeline_root = os.path.join(work_dir, 'pipeline')
  connection = metadata.sqlite_metadata_connection_config(
      os.path.join(work_dir, 'metadata.db'))

  # The pipeline's own data components with the stock preprocessing_fn
  # (ExampleValidator left out: nothing here reads its anomalies).
  components = taxi_pipeline.create_data_components(
      taxi_pipeline.TaxiPipelineOptions(
          pipeline_root=pipeline_root, data_root=data_root,
          serving_model_dir='', trainer_module_file=paths.TRAINER_MODULE_FILE,
          preprocessing_module_file=module_file))
  schema_gen, transform = components['schema_gen'], components['transform']
  tfx.orchestration.LocalDagRunner().run(
      tfx.dsl.Pipeline(
          pipeline_name=PIPELINE_NAME,
          pipeline_root=pipeline_root,
          components=[components[name] for name in (
              'example_gen', 'statistics_gen', 'schema_gen', 'transform')],
          enable_cache=False,
          metadata_connection_config=connection,
          beam_pipeline_args=BEAM_PIPELINE_ARGS))

  with metadata.Metadata(connection) as store:
    input_dict = {
        'examples': [
            _single_artifact(store, transform.outputs['transformed_examples'],
                             transform.id, 'transformed_examples')
        ],
        'schema': [
            _single_artifact(store, schema_gen.outputs['schema'],
                             schema_gen.id, 'schema')
        ],
        'transform_graph': [
            _single_artifact(store, transform.outputs['transform_graph'],
                             transform.id, 'transform_graph')
        ],
    }
  spec = {
      'input_dict': json.loads(
          artifact_utils.jsonify_artifact_dict(input_dict)),
      'preprocessing_module_file': module_file,
      'data_root': data_root,
      'rows': _count_rows(data_root),
      'seconds': time.time() - start,
  }
  with open(data_spec_path(work_dir), 'w') as f:
    json.dump(spec, f, indent=2)
  logging.info('Transformed examples ready in %.1f s: %s', spec['seconds'],
               data_spec_path(work_dir))
  return spec


def parse_input_dict(spec: Dict[str, object]) -> Dict[str, List[object]]:
  """The executor `input_dict` (artifacts) of a data spec."""
  from tfx.types import artifact_utils  # pylint: disable=g-import-not-at-top
  return artifact_utils.parse_artifact_dict(json.dumps(spec['input_dict']))


_WORK_DIR = flags.DEFINE_string('work_dir', None, 'Directory to write into.')
_ROWS = flags.DEFINE_integer('rows', None, 'Use only the first N CSV rows.')


def main(argv: List[str]) -> None:
  del argv
  logging.set_verbosity(logging.INFO)
  prepare(_WORK_DIR.value, _ROWS.value)


if __name__ == '__main__':
  flags.mark_flag_as_required('work_dir')
  app.run(main)
