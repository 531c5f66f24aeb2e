"""The main job end to end: `tfx-tpu-trainer run` on slices of the taxi data."""

import os
import types

from ml_metadata.proto import metadata_store_pb2
import pytest
import tensorflow as tf
from tfx.orchestration import metadata

from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer_cli import local_runner
from tfx_tpu_trainer_cli import main as cli

from tests import conftest
from tests.fixtures import bulk_inference
from tests.fixtures import pipeline_outputs
from tests.fixtures import saved_models

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

COMPONENTS = ('CsvExampleGen', 'StatisticsGen', 'SchemaGen',
              'ExampleValidator', 'Transform', 'TPUTrainer', 'Evaluator',
              'Pusher')


_RUN = ['run', '--train-steps', '60', '--eval-steps', '4',
        '--train-batch-size', '16', '--eval-batch-size', '16',
        '--min-accuracy', '0', '--min-balanced-accuracy', '0']


def _run_cli(capfd, *args):
  """The command through its main function, in this process (as a process
  of its own: test_package.py and test_pipeline_isolation.py)."""
  code = cli.main(_RUN + list(args))
  captured = capfd.readouterr()
  assert code == 0, captured.out + captured.err
  return captured.out


def _executions_by_component(store):
  """Executions grouped by their TFX node context (`<pipeline>.<node id>`)."""
  by_component = {}
  for context in store.store.get_contexts_by_type('node'):
    component = context.name.split('.')[-1]
    by_component[component] = store.store.get_executions_by_context(context.id)
  return by_component


def test_taxi_pipeline_twice_with_other_data_and_module(tmp_path, capfd):
  data_one = conftest.write_taxi_slice(str(tmp_path / 'data_one'), rows=300)
  output_root = tmp_path / 'out'
  stdout = _run_cli(capfd, '--data-root', data_one, '--output-root',
                    str(output_root))

  for index, component in enumerate(COMPONENTS, start=1):
    assert f'[{index}/8] {component} done in' in stdout
  assert 'Blessed:                yes' in stdout
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in stdout
  assert 'TensorBoard logs:       tensorboard --logdir' in stdout

  layout = local_runner.OutputLayout(str(output_root))
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(
      layout.metadata_path)) as store:
    executions = _executions_by_component(store)
    assert sorted(executions) == sorted(COMPONENTS)
    for component, runs in executions.items():
      assert [e.last_known_state for e in runs] == [
          metadata_store_pb2.Execution.COMPLETE], component
    for artifact in store.store.get_artifacts():
      assert tf.io.gfile.exists(artifact.uri), artifact.uri
    blessing = store.store.get_artifacts_by_type('ModelBlessing')[0]
    assert blessing.custom_properties['blessed'].int_value == 1
    model = store.store.get_artifacts_by_type('Model')[0]
    assert model.custom_properties['eval_global_step'].int_value == 60

  versions = sorted(os.listdir(layout.serving_model_dir))
  assert len(versions) == 1
  pushed = os.path.join(layout.serving_model_dir, versions[0])
  assert export.saved_model_tag_sets(pushed) == [('serve',), ('serve', 'tpu')]
  assert 'TPUPartitionedCall' in saved_models.op_types(
      pushed, ['serve', 'tpu'])
  raw_examples = pipeline_outputs.read_serialized_examples(
      _first_examples_artifact(layout), 'eval', 6)
  served = tf.saved_model.load(pushed, tags=['serve'])
  predictions = served.signatures['serving_default'](
      examples=tf.constant(raw_examples))
  assert predictions['probabilities'].shape == (6, 1)
  classified = served.signatures['classification'](
      inputs=tf.constant(raw_examples))
  assert classified['scores'].shape == (6, 2)

  # Again, on other rows and with another trainer module: a new version;
  # and the optional TPUBulkInferrer (`--bulk-infer`) scores the eval split.
  data_two = str(tmp_path / 'data_two')
  os.makedirs(data_two)
  rows = open(os.path.join(
      conftest.write_taxi_slice(str(tmp_path / 'wide'), rows=600),
      'data.csv')).read().splitlines()
  with open(os.path.join(data_two, 'data.csv'), 'w') as f:
    f.write('\n'.join([rows[0]] + rows[301:]) + '\n')
  stdout = _run_cli(
      capfd, '--data-root', data_two, '--output-root', str(output_root),
      '--module-file',
      os.path.join(conftest.TEST_MODULES_DIR, 'linear_module.py'),
      '--bulk-infer')
  assert 'Blessed:                yes' in stdout
  assert f'[{len(COMPONENTS) + 1}/{len(COMPONENTS) + 1}] TPUBulkInferrer done in' in stdout
  (line,) = [l for l in stdout.splitlines() if l.startswith('  Bulk inference:')]
  result_dir = line.split(':', 1)[1].strip()
  logs = bulk_inference.prediction_logs(types.SimpleNamespace(uri=result_dir))
  assert logs and all(
      log.predict_log.response.outputs['probabilities'].float_val
      for log in logs)
  second_versions = sorted(os.listdir(layout.serving_model_dir))
  assert len(second_versions) == 2 and second_versions[0] == versions[0]
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(
      layout.metadata_path)) as store:
    for component, runs in _executions_by_component(store).items():
      # Nothing reused from the first run, which had no inferrer.
      expected = 1 if component == 'TPUBulkInferrer' else 2
      assert len(runs) == expected, component
    example_uris = {a.uri for a in store.store.get_artifacts_by_type(
        'Examples') if '/CsvExampleGen/' in a.uri}
    assert len(example_uris) == 2
  second = os.path.join(layout.serving_model_dir, second_versions[1])
  assert export.saved_model_tag_sets(second) == [('serve',), ('serve', 'tpu')]


def _first_examples_artifact(layout):
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(
      layout.metadata_path)) as store:
    proto = [a for a in store.store.get_artifacts_by_type('Examples')
             if '/CsvExampleGen/' in a.uri][0]
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  examples = standard_artifacts.Examples()
  examples.set_mlmd_artifact(proto)
  return examples
