"""TFX's native-Keras penguin module, as the tfx wheel ships it, unchanged.

penguin_utils_keras.py and penguin_utils_base.py are copied out of the
installed wheel (not edited) beside a pipeline shaped as TFX's
penguin_pipeline_local.py (its Evaluator config), with `Trainer(` changed to
`TPUTrainer(`; `tfx-tpu-trainer run --pipeline` runs it to a pushed model,
which serves raw examples without the label.
"""

import os
import shutil
import textwrap

import pytest
import tensorflow as tf
import tfx as tfx_package

from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli

PENGUIN_DIR = os.path.join(os.path.dirname(tfx_package.__file__), 'examples',
                           'penguin')
PENGUIN_MODULES = ('penguin_utils_keras.py', 'penguin_utils_base.py')

_PIPELINE = '''
import os

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from tfx_tpu_trainer import TPUTrainer

_HERE = os.path.dirname(os.path.abspath(__file__))


def create_pipeline():
  module_file = os.path.join(_HERE, 'penguin_utils_keras.py')
  pipeline_root = os.path.join(_HERE, 'root')
  example_gen = tfx.components.CsvExampleGen(
      input_base=os.path.join(_HERE, 'data'))
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs['examples'])
  schema_gen = tfx.components.SchemaGen(
      statistics=statistics_gen.outputs['statistics'],
      infer_feature_shape=True)
  transform = tfx.components.Transform(
      examples=example_gen.outputs['examples'],
      schema=schema_gen.outputs['schema'],
      module_file=module_file)
  trainer = TPUTrainer(
      module_file=module_file,
      examples=transform.outputs['transformed_examples'],
      transform_graph=transform.outputs['transform_graph'],
      schema=schema_gen.outputs['schema'],
      train_args=tfx.proto.TrainArgs(num_steps=120),
      eval_args=tfx.proto.EvalArgs(num_steps=5),
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16})
  # penguin_pipeline_local.py's EvalConfig.
  eval_config = tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(
          signature_name='serving_default', label_key='species_xf',
          preprocessing_function_names=['transform_features'])],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(
          class_name='SparseCategoricalAccuracy',
          threshold=tfma.MetricThreshold(
              value_threshold=tfma.GenericValueThreshold(
                  lower_bound={'value': 0.6})))])])
  evaluator = tfx.components.Evaluator(
      examples=example_gen.outputs['examples'],
      model=trainer.outputs['model'],
      eval_config=eval_config)
  pusher = tfx.components.Pusher(
      model=trainer.outputs['model'],
      model_blessing=evaluator.outputs['blessing'],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=os.path.join(_HERE, 'serving_model'))))
  return tfx.dsl.Pipeline(
      pipeline_name='penguin-keras-run-fn',
      pipeline_root=pipeline_root,
      components=[example_gen, statistics_gen, schema_gen, transform,
                  trainer, evaluator, pusher])
'''


def copy_penguin_modules(directory: str) -> str:
  """The wheel's penguin Keras modules, copied unchanged; the run_fn file."""
  os.makedirs(directory, exist_ok=True)
  for name in PENGUIN_MODULES:
    shutil.copy(os.path.join(PENGUIN_DIR, name), directory)
  return os.path.join(directory, PENGUIN_MODULES[0])


def _raw_eval_examples(root: str, count: int):
  """Serialized raw eval examples of the run's CsvExampleGen."""
  files = tf.io.gfile.glob(os.path.join(
      root, 'CsvExampleGen', 'examples', '*', 'Split-eval', '*'))
  dataset = tf.data.TFRecordDataset(files, compression_type='GZIP')
  return [record.numpy() for record in dataset.take(count)]


@pytest.mark.slow
@pytest.mark.heavy
def test_penguin_utils_keras_runs_unchanged_to_a_pushed_model(tmp_path,
                                                              capfd):
  work = tmp_path / 'penguin'
  copy_penguin_modules(str(work))
  serving_data.write_penguins(str(work / 'data'), rows=300, species_ids=True)
  (work / 'penguin_pipeline.py').write_text(textwrap.dedent(_PIPELINE))
  assert cli.main(['run', '--pipeline',
                   f'{work / "penguin_pipeline.py"}:create_pipeline',
                   '--output-root', str(tmp_path / 'out')]) == 0
  out = capfd.readouterr().out
  assert 'Blessed:                yes' in out
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in out
  pushed = [line.split()[-1] for line in out.splitlines()
            if line.startswith('  Pushed model:')][0]
  for name in PENGUIN_MODULES:  # Unchanged.
    with open(work / name) as copy, open(os.path.join(PENGUIN_DIR,
                                                      name)) as shipped:
      assert copy.read() == shipped.read()

  raw = _raw_eval_examples(str(work / 'root'), 20)
  requests = [serving_data.strip_feature(r, 'species') for r in raw]
  loaded = tf.saved_model.load(pushed, tags=['serve'])
  assert set(loaded.signatures) == {'serving_default', 'transform_features'}
  # Named as the module's own save names it: {'outputs': model(...)}.
  served = loaded.signatures['serving_default'](
      examples=tf.constant(requests))
  assert list(served) == ['outputs']
  assert served['outputs'].shape == (20, 3)
  labels = [tf.train.Example.FromString(r).features.feature['species']
            .int64_list.value[0] for r in raw]
  predicted = tf.argmax(served['outputs'], axis=-1).numpy().tolist()
  accuracy = sum(p == l for p, l in zip(predicted, labels)) / len(labels)
  assert accuracy >= 0.6, (predicted, labels)
  transformed = loaded.signatures['transform_features'](
      examples=tf.constant(raw))
  assert set(transformed) == {'culmen_length_mm_xf', 'culmen_depth_mm_xf',
                              'flipper_length_mm_xf', 'body_mass_g_xf',
                              'species_xf'}
