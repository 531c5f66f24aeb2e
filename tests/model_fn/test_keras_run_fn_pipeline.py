"""TFX's native-Keras penguin and mnist modules, as the tfx wheel ships them.

penguin_utils_keras.py and penguin_utils_base.py are copied out of the
installed wheel (not edited) beside a pipeline shaped as TFX's
penguin_pipeline_local.py (its Evaluator config), with `Trainer(` changed to
`TPUTrainer(`; `tfx-tpu-trainer run --pipeline` runs it to a pushed model,
which serves raw examples without the label. mnist_utils_native_keras.py
(+ its base) trains through the executor on real Transform output of
mnist-shaped examples (the wheel ships no mnist data).
"""

import os
import shutil
import textwrap

import numpy as np
import pytest
import tensorflow as tf
import tfx as tfx_package

from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli

EXAMPLES_DIR = os.path.join(os.path.dirname(tfx_package.__file__), 'examples')
PENGUIN_DIR = os.path.join(EXAMPLES_DIR, 'penguin')
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


# --- mnist_utils_native_keras.py, through the executor ---------------------

MNIST_MODULES = ('mnist_utils_native_keras.py',
                 'mnist_utils_native_keras_base.py')


def _write_digits(directory: str, rows: int) -> str:
  """mnist-shaped tf.Examples: 784 floats in [-0.5, 0.5], a class 0-9.

  Each class lights its own band of pixels, so a few steps learn it.
  """
  os.makedirs(directory, exist_ok=True)
  generator = np.random.default_rng(0)
  with tf.io.TFRecordWriter(os.path.join(directory, 'data.tfrecord')) as f:
    for index in range(rows):
      label = index % 10
      image = generator.uniform(-0.5, -0.3, 784)
      image[label * 78:(label + 1) * 78] = 0.5
      f.write(tf.train.Example(features=tf.train.Features(feature={
          'image_floats': tf.train.Feature(
              float_list=tf.train.FloatList(value=image.tolist())),
          'image_class': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[label])),
      })).SerializeToString())
  return directory


@pytest.mark.slow
@pytest.mark.heavy
def test_mnist_utils_native_keras_runs_unchanged_through_the_executor(
    tmp_path):
  from tfx.utils import path_utils  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.publishing import export  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pipeline_outputs  # pylint: disable=g-import-not-at-top
  modules = tmp_path / 'modules'
  modules.mkdir()
  for name in MNIST_MODULES:
    shutil.copy(os.path.join(EXAMPLES_DIR, 'mnist', name), modules)
  module_file = str(modules / MNIST_MODULES[0])
  data = serving_data.run_data_components(
      str(tmp_path / 'pipeline'), _write_digits(str(tmp_path / 'data'), 200),
      module_file, infer_feature_shape=True, tf_records=True)
  run = pipeline_outputs.trainer_run(
      data, str(tmp_path / 'trainer'), module_file,
      custom_config={'train_batch_size': 20, 'eval_batch_size': 20},
      train_steps=60, eval_steps=2)
  executor.Executor().Do(run.input_dict, run.output_dict, run.exec_properties)
  path = path_utils.serving_model_path(run.model.uri)
  assert export.saved_model_tag_sets(path) == [('serve',), ('serve', 'tpu')]

  raw = pipeline_outputs.read_serialized_examples(data.raw_examples, 'eval',
                                                  20)
  requests = [serving_data.strip_feature(r, 'image_class') for r in raw]
  loaded = tf.saved_model.load(path, tags=['serve'])
  # The module's serving function returns one tensor: 'output_0'.
  served = loaded.signatures['serving_default'](
      examples=tf.constant(requests))
  assert list(served) == ['output_0']
  labels = [tf.train.Example.FromString(r).features.feature['image_class']
            .int64_list.value[0] for r in raw]
  predicted = tf.argmax(served['output_0'], axis=-1).numpy().tolist()
  assert sum(p == l for p, l in zip(predicted, labels)) >= 0.6 * len(labels)
