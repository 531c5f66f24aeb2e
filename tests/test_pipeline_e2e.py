"""The main job end to end: two `tfx-tpu-trainer run`s at once, one output root.

Each run is a process of its own, as the console command starts it, both
started together on one output root: the bundled pipeline on a slice of the
taxi data, and the same pipeline on other rows with another trainer module
and the optional TPUBulkInferrer (`--bulk-infer`). Each run reports its own
model (read from its own pipeline run's executions) and pushes a version of
its own; neither reuses the other's executions; and no run leaves a file in
the system temp directory: the processes get TMPDIR pointed at an empty
folder, counted after. The bundled run is given secret Beam args: neither
its output nor its run log shows them (tests/cli/test_log_secrets.py).
(`run` in the test's own process: tests/cli/.)
"""

import os
import re
import subprocess
import sys
import types

from ml_metadata.proto import metadata_store_pb2
import pytest
import tensorflow as tf
from tfx.orchestration import metadata
from tfx.types import standard_artifacts

from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer_cli import local_runner
from tfx_tpu_trainer_cli import run_temp_dir

from tests import conftest
from tests.cli import test_log_secrets
from tests.fixtures import bulk_inference
from tests.fixtures import cli_processes
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

COMPONENTS = ('CsvExampleGen', 'StatisticsGen', 'SchemaGen',
              'ExampleValidator', 'Transform', 'TPUTrainer', 'Evaluator',
              'Pusher')
# Training steps of the two runs: each run's metrics name its own.
BUNDLED_STEPS, LINEAR_STEPS = 60, 40


def _start_run(output_root, temp_dir, log_path, data_root, train_steps,
               *args):
  """`tfx-tpu-trainer run ...` in a process of its own, TMPDIR `temp_dir`."""
  command = [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'run',
             '--data-root', data_root, '--output-root', output_root,
             '--train-steps', str(train_steps), '--eval-steps', '4',
             '--train-batch-size', '16', '--eval-batch-size', '16',
             '--min-accuracy', '0', '--min-balanced-accuracy', '0'
             ] + list(args)
  with open(log_path, 'w') as log:
    return subprocess.Popen(
        command, cwd=conftest.REPO_ROOT,
        env=dict(os.environ, TMPDIR=str(temp_dir)), stdout=log,
        stderr=subprocess.STDOUT)


def _two_slices(tmp_path):
  """Rows 1-300 and rows 301-600 of the taxi data, each with its header."""
  data_one = conftest.write_taxi_slice(str(tmp_path / 'data_one'), rows=300)
  data_two = str(tmp_path / 'data_two')
  os.makedirs(data_two)
  rows = open(os.path.join(
      conftest.write_taxi_slice(str(tmp_path / 'wide'), rows=600),
      'data.csv')).read().splitlines()
  with open(os.path.join(data_two, 'data.csv'), 'w') as f:
    f.write('\n'.join([rows[0]] + rows[301:]) + '\n')
  return data_one, data_two


def _count_files(directory):
  return sum(len(files) + len(dirs) for _, dirs, files in os.walk(directory))


def _summary_value(output, label):
  (value,) = re.findall(rf'^  {label}: +(\S+)$', output, re.M)
  return value


def _executions_by_component(store):
  """Executions grouped by their TFX node context (`<pipeline>.<node id>`)."""
  by_component = {}
  for context in store.store.get_contexts_by_type('node'):
    component = context.name.split('.')[-1]
    by_component[component] = store.store.get_executions_by_context(context.id)
  return by_component


def test_two_runs_at_once_each_push_their_own_model_and_leave_no_temp_files(
    tmp_path):
  data_one, data_two = _two_slices(tmp_path)
  output_root = tmp_path / 'out'
  temp_dir = tmp_path / 'system_tmp'
  temp_dir.mkdir()
  logs = {'bundled': tmp_path / 'bundled.log', 'linear': tmp_path / 'linear.log'}
  processes = {
      'bundled': _start_run(str(output_root), temp_dir, logs['bundled'],
                            data_one, BUNDLED_STEPS,
                            *cli_processes.SECRET_BEAM_ARGS),
      'linear': _start_run(
          str(output_root), temp_dir, logs['linear'], data_two, LINEAR_STEPS,
          '--module-file',
          os.path.join(conftest.TEST_MODULES_DIR, 'linear_module.py'),
          '--bulk-infer'),
  }
  codes = {name: process.wait() for name, process in processes.items()}
  outputs = {name: path.read_text() for name, path in logs.items()}
  assert codes == {'bundled': 0, 'linear': 0}, outputs

  bundled, linear = outputs['bundled'], outputs['linear']
  for index, component in enumerate(COMPONENTS, start=1):
    assert f'[{index}/8] {component} done in' in bundled
  for output in outputs.values():
    assert 'Blessed:                yes' in output
    assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in output
    assert 'TensorBoard logs:       tensorboard --logdir' in output
  # Each run reports its own model: the metrics of its own training.
  for output, steps in ((bundled, BUNDLED_STEPS), (linear, LINEAR_STEPS)):
    metrics = re.search(r'Trainer eval metrics: .*', output).group(0)
    assert f'global_step={steps},' in metrics, output
  models = {_summary_value(output, 'Trained model')
            for output in outputs.values()}
  assert len(models) == 2
  full_logs = {re.search(r'full log: (\S+)', output).group(1)
               for output in outputs.values()}
  assert len(full_logs) == 2  # Runs started in the same second log apart.
  _assert_no_secret_in_output_or_log(bundled)
  assert _count_files(temp_dir) == 0, sorted(os.listdir(temp_dir))

  layout = local_runner.OutputLayout(str(output_root))
  assert not os.path.exists(os.path.join(layout.pipeline_root,
                                         run_temp_dir.TMP_DIR_NAME))
  _assert_both_runs_recorded(layout)
  pushed = {name: _summary_value(output, 'Pushed model')
            for name, output in outputs.items()}
  assert sorted(os.listdir(layout.serving_model_dir)) == sorted(
      os.path.basename(path) for path in pushed.values())
  for path in pushed.values():
    assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]
  _assert_serves_raw_examples(pushed['bundled'], layout)

  # The optional TPUBulkInferrer scored the eval split with the linear model.
  assert (f'[{len(COMPONENTS) + 1}/{len(COMPONENTS) + 1}] TPUBulkInferrer '
          'done in') in linear
  result_dir = _summary_value(linear, 'Bulk inference')
  predictions = bulk_inference.prediction_logs(
      types.SimpleNamespace(uri=result_dir))
  assert predictions and all(
      log.predict_log.response.outputs['probabilities'].float_val
      for log in predictions)


def _assert_no_secret_in_output_or_log(output):
  """The bundled run's secret Beam args, masked wherever they are shown."""
  with open(re.search(r'full log: (\S+)', output).group(1)) as f:
    log = f.read()
  test_log_secrets.assert_no_secret(output, log)
  # TFX's deployment config: two lines per Beam component and Beam arg.
  assert log.count('beam_pipeline_args: "--s3_secret_access_key=***"') >= 4
  assert log.count('AccountKey=***;EndpointSuffix') >= 8


def _assert_both_runs_recorded(layout):
  """Every execution of both runs complete, none reused, artifacts on disk."""
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(
      layout.metadata_path)) as store:
    executions = _executions_by_component(store)
    assert sorted(executions) == sorted(COMPONENTS + ('TPUBulkInferrer',))
    for component, runs in executions.items():
      # Nothing reused: the runs differ in data, module and components.
      expected = 1 if component == 'TPUBulkInferrer' else 2
      assert [e.last_known_state for e in runs] == [
          metadata_store_pb2.Execution.COMPLETE] * expected, component
    for artifact in store.store.get_artifacts():
      assert tf.io.gfile.exists(artifact.uri), artifact.uri
    blessings = store.store.get_artifacts_by_type('ModelBlessing')
    assert [b.custom_properties['blessed'].int_value for b in blessings] == [
        1, 1]
    steps = sorted(m.custom_properties['eval_global_step'].int_value
                   for m in store.store.get_artifacts_by_type('Model'))
    assert steps == sorted([BUNDLED_STEPS, LINEAR_STEPS])
    example_uris = {a.uri for a in store.store.get_artifacts_by_type(
        'Examples') if '/CsvExampleGen/' in a.uri}
    assert len(example_uris) == 2


def _assert_serves_raw_examples(pushed, layout):
  """The bundled run's pushed {serve} model answers raw tf.Examples."""
  assert 'TPUPartitionedCall' in saved_models.op_types(
      pushed, ['serve', 'tpu'])
  raw_examples = pipeline_outputs.read_serialized_examples(
      _an_examples_artifact(layout), 'eval', 6)
  served = tf.saved_model.load(pushed, tags=['serve'])
  predictions = served.signatures['serving_default'](
      examples=tf.constant(raw_examples))
  assert predictions['probabilities'].shape == (6, 1)
  classified = served.signatures['classification'](
      inputs=tf.constant(raw_examples))
  assert classified['scores'].shape == (6, 2)


def _an_examples_artifact(layout):
  """One of the runs' CsvExampleGen outputs (both hold raw taxi rows)."""
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(
      layout.metadata_path)) as store:
    proto = [a for a in store.store.get_artifacts_by_type('Examples')
             if '/CsvExampleGen/' in a.uri][0]
  examples = standard_artifacts.Examples()
  examples.set_mlmd_artifact(proto)
  return examples
