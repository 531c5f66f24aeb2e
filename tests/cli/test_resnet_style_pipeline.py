"""tensorflow/tpu's TPUEstimator idioms, through `run --pipeline` and the executor.

tests/fixtures/resnet_style/ is a small image model written as
tensorflow/tpu's ResNet and MnasNet are: bfloat16 scope, host_call with
tf2 summaries, moving averages restored for eval through scaffold_fn and
exported from the latest checkpoint, a PREDICT tf.estimator.EstimatorSpec,
init_from_checkpoint, its defaults in a `configs/` package beside the
module. Copied outside the repository as a user's folder, it runs through
`tfx-tpu-trainer run --pipeline` (tests/fixtures/image_pipeline.py:
ImportExampleGen, StatisticsGen, SchemaGen, TPUTrainer) on small
ImageNet-style examples: it trains, evaluates, writes the host_call's
summaries into model_run, exports both tag sets and serves raw examples.
Then the executor warm-starts from that run's checkpoint, and the TPU
preflight finds it TPU-ready on the run's examples.
"""

import dataclasses
import glob
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from tests.fixtures import image_examples
from tests.fixtures import pipeline_outputs
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer_cli import main as cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), 'fixtures')
TRAIN_STEPS = 150
CUSTOM_CONFIG = {'train_batch_size': 32, 'eval_batch_size': 32}


@dataclasses.dataclass
class PipelineRun:
  exit_code: int
  work: str
  module_file: str
  root: str

  def output(self, component: str, key: str) -> str:
    """The URI of a component's single output (the run's only execution)."""
    (uri,) = glob.glob(os.path.join(self.root, component, key, '*'))
    return uri


@pytest.fixture(scope='module')
def resnet_style_run(tmp_path_factory):
  """The module run once through `run --pipeline`, outside the repository."""
  work = str(tmp_path_factory.mktemp('resnet_style'))
  shutil.copytree(os.path.join(FIXTURES, 'resnet_style'),
                  os.path.join(work, 'my_model'))
  shutil.copy(os.path.join(FIXTURES, 'image_pipeline.py'), work)
  image_examples.write_image_examples(os.path.join(work, 'data'), count=480)
  module_file = os.path.join(work, 'my_model', 'resnet_style_module.py')
  root = os.path.join(work, 'root')
  with pytest.MonkeyPatch.context() as env:
    for name, value in {
        'IMAGE_DATA_ROOT': os.path.join(work, 'data'),
        'IMAGE_MODULE_FILE': module_file,
        'IMAGE_PIPELINE_ROOT': root,
        'IMAGE_PIPELINE_NAME': 'resnet-style',
        'IMAGE_TRAIN_STEPS': str(TRAIN_STEPS),
        'IMAGE_EVAL_STEPS': '5',
        'IMAGE_CUSTOM_CONFIG': json.dumps(CUSTOM_CONFIG)}.items():
      env.setenv(name, value)
    code = cli.main(['run', '--pipeline',
                     os.path.join(work, 'image_pipeline.py:create_pipeline'),
                     '--output-root', os.path.join(work, 'out')])
  return PipelineRun(code, work, module_file, root)


def _summary_tags(directory):
  tags = set()
  for path in glob.glob(os.path.join(directory, 'events.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(value.tag for value in event.summary.value)
  return tags


def _served_accuracy(serving_dir, examples_uri):
  """The {serve} graph's classes against the eval split's labels."""
  files = glob.glob(os.path.join(examples_uri, 'Split-eval', '*'))
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type='GZIP')]
  labels = [tf.train.Example.FromString(record).features.feature[
      image_examples.LABEL_KEY].int64_list.value[0] - 1 for record in records]
  with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta_graph = tf.compat.v1.saved_model.load(session, ['serve'],
                                               serving_dir)
    signature = meta_graph.signature_def['serving_default']
    (examples,) = signature.inputs.values()
    classes = session.run(signature.outputs['classes'].name,
                          {examples.name: records})
  return float(np.mean(classes == np.array(labels))), len(records)


def test_trains_evaluates_and_serves_raw_examples(resnet_style_run):
  assert resnet_style_run.exit_code == 0
  model_run = resnet_style_run.output('TPUTrainer', 'model_run')
  with open(os.path.join(model_run, 'eval_metrics.json')) as f:
    metrics = json.load(f)
  assert metrics['global_step'] == TRAIN_STEPS
  # Ten classes: well above chance, with the moving averages eval restores.
  assert metrics['top_1_accuracy'] > 0.3, metrics
  # The host_call's tf2 summaries, written on the host into model_run.
  assert {'loss', 'learning_rate'} <= _summary_tags(model_run)
  serving_dir = os.path.join(resnet_style_run.output('TPUTrainer', 'model'),
                             'Format-Serving')
  assert export.saved_model_tag_sets(serving_dir) == [
      export.SERVE_TAGS, tuple(sorted(export.SERVE_TPU_TAGS))]
  # The {serve} graph restores the moving averages of the latest checkpoint,
  # as eval does: the served accuracy is eval's, within sampling noise.
  served, count = _served_accuracy(
      serving_dir, resnet_style_run.output('ImportExampleGen', 'examples'))
  assert count > 100
  assert abs(served - metrics['top_1_accuracy']) < 0.15, (served, metrics)


def _trainer_run(resnet_style_run, output_dir, custom_config):
  examples = standard_artifacts.Examples()
  examples.uri = resnet_style_run.output('ImportExampleGen', 'examples')
  examples.split_names = artifact_utils.encode_split_names(['train', 'eval'])
  schema = standard_artifacts.Schema()
  schema.uri = resnet_style_run.output('SchemaGen', 'schema')
  data = pipeline_outputs.DataArtifacts(
      raw_examples=examples, transformed_examples=None, schema=schema,
      transform_graph=None, data_dir='')
  return pipeline_outputs.trainer_run(
      data, output_dir, resnet_style_run.module_file, custom_config,
      train_steps=2, eval_steps=1, transformed=False)


def test_executor_warm_starts_with_init_from_checkpoint(resnet_style_run,
                                                        tmp_path):
  checkpoint = tf.train.latest_checkpoint(
      resnet_style_run.output('TPUTrainer', 'model_run'))
  # MnasNet's init_checkpoint off TPU: init_from_checkpoint in the model_fn,
  # from the moving averages; the default host loop trains it one step per
  # session.run. No learning: the weights stay the checkpoint's. Exported
  # without the moving averages: ResNet's PREDICT EstimatorSpec.
  run = _trainer_run(resnet_style_run, str(tmp_path), dict(
      CUSTOM_CONFIG, params={'init_checkpoint': checkpoint,
                             'base_learning_rate': 0.0,
                             'export_moving_average': False}))
  executor.Executor().Do(run.input_dict, run.output_dict,
                         run.exec_properties)
  warm = tf.train.latest_checkpoint(run.model_run.uri)
  np.testing.assert_array_equal(
      tf.train.load_variable(warm, 'stem_conv/kernel'),
      tf.train.load_variable(checkpoint,
                             'stem_conv/kernel/ExponentialMovingAverage'))
  assert export.saved_model_tag_sets(
      os.path.join(run.model.uri, 'Format-Serving')) == [
          export.SERVE_TAGS, tuple(sorted(export.SERVE_TPU_TAGS))]


def test_tpu_preflight_on_the_runs_examples(resnet_style_run, capsys):
  examples = resnet_style_run.output('ImportExampleGen', 'examples')
  code = cli.main(['preflight', '--module-file', resnet_style_run.module_file,
                   '--examples', examples, '--schema',
                   resnet_style_run.output('SchemaGen', 'schema'),
                   '--custom-config', json.dumps(CUSTOM_CONFIG)])
  lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
  assert code == 0, lines
  assert lines[1] == ('shards: 8; sample: first batch of the module input_fn '
                      f'over {examples}/Split-train')
  assert ('INFO    [export/export] the {serve} and {serve, tpu} SavedModel '
          'exported.') in lines
