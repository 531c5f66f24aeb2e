"""Benchmark: TPUBulkInferrer's CPU path against the stock BulkInferrer,
`python -m benchmarks.bulk_inference [--rows N] [--repeats R]` (make bench)."""

import csv
import json
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List

from absl import app
from absl import flags
from absl import logging

_ROWS = flags.DEFINE_integer('rows', None, 'Taxi rows to score (default: all '
                             '15,002).')
_REPEATS = flags.DEFINE_integer('repeats', 2, 'Runs of each executor.')
_BATCH_SIZES = flags.DEFINE_list(
    'batch_sizes', ['64', '256', '1024'],
    'TPUBulkInferrer batch sizes measured (the default is one of them).')
_OUTPUT_DIR = flags.DEFINE_string(
    'output_dir', os.path.join(os.path.dirname(__file__), 'results'),
    'Where bulk_inference_<timestamp>.json is written.')
# Numeric columns of the taxi CSV (an empty value scores as 0).
FEATURES = ('trip_miles', 'fare', 'trip_seconds', 'trip_start_hour')
LABEL = 'big_tipper'
TARGET = 1.0  # Ours at its default batch size / the stock at its defaults.


def _taxi_rows(rows) -> List[Dict[str, str]]:
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  with open(os.path.join(paths.embedded_data_root(), 'data.csv'),
            newline='') as f:
    found = list(csv.DictReader(f))
  return found[:rows] if rows else found


def write_examples(work_dir: str, rows: List[Dict[str, str]]):
  """The rows as an Examples artifact with one split, `eval` (gzip)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  examples = standard_artifacts.Examples()
  examples.uri = os.path.join(work_dir, 'examples')
  examples.split_names = '["eval"]'
  os.makedirs(os.path.join(examples.uri, 'Split-eval'))
  with tf.io.TFRecordWriter(os.path.join(examples.uri, 'Split-eval',
                                         'data.gz'), options='GZIP') as w:
    for row in rows:
      feature = {name: tf.train.Feature(float_list=tf.train.FloatList(
          value=[float(row[name] or 0)])) for name in FEATURES}
      feature['company'] = tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[row['company'].encode()]))
      w.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())
  return examples


def train_model(work_dir: str, rows: List[Dict[str, str]]):
  """A canned DNNClassifier on the rows, exported as the Trainer would."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx.utils import path_utils  # pylint: disable=g-import-not-at-top
  features = {n: np.array([float(r[n] or 0) for r in rows], np.float32)
              for n in FEATURES}
  label = np.array([int(r[LABEL]) for r in rows])
  estimator = tf.compat.v1.estimator.DNNClassifier(
      [64, 32], [tf.feature_column.numeric_column(n) for n in FEATURES],
      model_dir=os.path.join(work_dir, 'model_dir'))
  estimator.train(lambda: tf.data.Dataset.from_tensor_slices(
      (features, label)).shuffle(1000).repeat().batch(64), steps=200)
  spec = {n: tf.io.FixedLenFeature([], tf.float32) for n in FEATURES}
  exported = estimator.export_saved_model(
      os.path.join(work_dir, 'export'),
      tf.estimator.export.build_parsing_serving_input_receiver_fn(spec))
  model = standard_artifacts.Model()
  model.uri = os.path.join(work_dir, 'model')
  os.makedirs(model.uri)
  os.rename(exported.decode(), path_utils.serving_model_dir(model.uri))
  return model


def _run(executor_class, examples, model, output_dir: str,
         custom_config=None) -> float:
  """Seconds of one executor Do() (model load, checks, Beam run, write)."""
  from tfx.proto import bulk_inferrer_pb2  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx.utils import proto_utils  # pylint: disable=g-import-not-at-top
  result = standard_artifacts.InferenceResult()
  result.uri = output_dir
  properties = {
      'data_spec': proto_utils.proto_to_json(bulk_inferrer_pb2.DataSpec()),
      'model_spec': proto_utils.proto_to_json(bulk_inferrer_pb2.ModelSpec(
          model_signature_name=['predict'])),
      'output_example_spec': None}
  if custom_config is not None:
    properties['custom_config'] = json.dumps(custom_config)
  started = time.monotonic()
  executor_class().Do({'examples': [examples], 'model': [model]},
                      {'inference_result': [result]}, properties)
  return time.monotonic() - started


def _checks_seconds(examples, model, batch_size: int) -> float:
  """What our executor spends before Beam: checks, first examples scored."""
  # pylint: disable=g-import-not-at-top
  from tfx.proto import bulk_inferrer_pb2
  from tfx.utils import path_utils
  from tfx_bsl.public.proto import model_spec_pb2
  from tfx_tpu_trainer.bulk_inferrer import inference_config
  from tfx_tpu_trainer.bulk_inferrer import model_checks
  # pylint: enable=g-import-not-at-top
  config = inference_config.InferenceConfig(batch_size=batch_size)
  spec = model_spec_pb2.InferenceSpecType()
  spec.saved_model_spec.model_path = path_utils.serving_model_path(model.uri)
  spec.saved_model_spec.tag.append('serve')
  spec.saved_model_spec.signature_name.append('predict')
  started = time.monotonic()
  model_checks.check_model(spec, config)
  uris = model_checks.selected_splits([examples], bulk_inferrer_pb2.DataSpec())
  model_checks.check_examples(uris, 6, spec, config)  # 6: FORMAT_TF_EXAMPLE
  return time.monotonic() - started


def measure(work_dir: str, rows: List[Dict[str, str]], repeats: int,
            batch_sizes: List[int]) -> Dict[str, Any]:
  """Examples/s of the stock executor and of ours at each batch size."""
  # pylint: disable=g-import-not-at-top
  from tfx.components.bulk_inferrer import executor as stock_executor
  from tfx_tpu_trainer.bulk_inferrer import executor as tpu_executor
  from tfx_tpu_trainer.bulk_inferrer import inference_config
  # pylint: enable=g-import-not-at-top
  examples = write_examples(work_dir, rows)
  model = train_model(work_dir, rows)
  runs: Dict[str, List[float]] = {}
  for repeat in range(repeats):
    out = os.path.join(work_dir, f'out{repeat}')
    runs.setdefault('stock', []).append(_run(
        stock_executor.Executor, examples, model, f'{out}/stock'))
    for size in batch_sizes:
      runs.setdefault(f'ours_batch_{size}', []).append(_run(
          tpu_executor.Executor, examples, model, f'{out}/ours{size}',
          {'batch_size': size}))
  checks = _checks_seconds(examples, model,
                           inference_config.DEFAULT_BATCH_SIZE)
  seconds = {k: statistics.median(v) for k, v in runs.items()}
  rates = {k: len(rows) / v for k, v in seconds.items()}
  default = f'ours_batch_{inference_config.DEFAULT_BATCH_SIZE}'
  return {'examples': len(rows), 'repeats': repeats, 'seconds': seconds,
          'examples_per_second': rates,
          'default': default,
          'ratio_default_vs_stock': (rates[default] / rates['stock']
                                     if default in rates else None),
          'our_checks_seconds': checks, 'runs': runs}


def format_report(result: Dict[str, Any]) -> str:
  lines = [f'Bulk inference, {result["examples"]} taxi examples, DNNClassifier'
           f' predict signature, median of {result["repeats"]} Do() runs:',
           '| executor | seconds | examples/s | vs stock |', '|---|---|---|---|']
  stock = result['examples_per_second']['stock']
  for name, rate in result['examples_per_second'].items():
    lines.append(f'| {name} | {result["seconds"][name]:.2f} | {rate:.0f} | '
                 f'{rate / stock:.2f}x |')
  ratio = result['ratio_default_vs_stock']
  verdict = ('n/a' if ratio is None else
             'PASS' if ratio >= TARGET else 'FAIL')
  lines.append(f'TPUBulkInferrer at its default batch ({result["default"]}) / '
               f'stock: {ratio and f"{ratio:.2f}"}x (target >= {TARGET:g}x): '
               f'{verdict}')
  lines.append(f'Of our Do(): {result["our_checks_seconds"]:.2f} s of checks '
               'before Beam (the model loaded once more on CPU to score each '
               "split's first example).")
  return '\n'.join(lines)


def main(argv) -> None:
  del argv
  logging.set_verbosity(logging.WARNING)
  rows = _taxi_rows(_ROWS.value)
  with tempfile.TemporaryDirectory(prefix='bench-bulk-') as work_dir:
    result = measure(work_dir, rows, _REPEATS.value,
                     [int(b) for b in _BATCH_SIZES.value])
  print(format_report(result))
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  path = os.path.join(_OUTPUT_DIR.value, time.strftime(
      'bulk_inference_%Y%m%d-%H%M%S.json'))
  with open(path, 'w') as f:
    json.dump(result, f, indent=2)
  print(f'Wrote {path}.')


if __name__ == '__main__':
  app.run(main)
