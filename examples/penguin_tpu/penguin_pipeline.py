"""TFX's penguin pipeline with TPUTrainer, as a pipeline factory.

    tfx-tpu-trainer run --pipeline penguin_pipeline.py:create_pipeline
    tfx-tpu-trainer compile --pipeline penguin_pipeline.py:create_pipeline \
        --image gcr.io/P/tfx-tpu-trainer:1 ...

`create_pipeline()` takes no required arguments (what `--pipeline` calls);
where things are comes from the environment, so one file serves the local
run and the cluster compile:

  PENGUIN_DATA_ROOT      a directory of CSV files with the columns
                         culmen_length_mm, culmen_depth_mm, flipper_length_mm,
                         body_mass_g, species (required)
  PENGUIN_PIPELINE_ROOT  default ./penguin_output/pipeline_root
  PENGUIN_SERVING_DIR    default <pipeline root>/serving_model
  PENGUIN_TRAIN_STEPS    default 500
  PENGUIN_MODULE_FILE    default penguin_tpu_module.py beside this file; for
                         module files baked into an image (compile
                         --module-files-in-image), their path in the image
"""

import os

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from tfx_tpu_trainer import TPUTrainer

PIPELINE_NAME = 'penguin-tpu'  # kubeflow_v2 takes lower case, digits and -.
MODULE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'penguin_tpu_module.py')


def _env(name: str, default: str = None) -> str:
  value = os.environ.get(name, default)
  if value is None:
    raise ValueError(f'Set {name} (see the docstring of {__file__}).')
  return value


def create_pipeline(data_root: str = None, pipeline_root: str = None,
                    serving_model_dir: str = None,
                    train_steps: int = None) -> tfx.dsl.Pipeline:
  """ExampleGen ... Transform, TPUTrainer, Evaluator, Pusher."""
  data_root = data_root or _env('PENGUIN_DATA_ROOT')
  pipeline_root = pipeline_root or _env(
      'PENGUIN_PIPELINE_ROOT',
      os.path.abspath(os.path.join('penguin_output', 'pipeline_root')))
  serving_model_dir = serving_model_dir or _env(
      'PENGUIN_SERVING_DIR', os.path.join(pipeline_root, 'serving_model'))
  train_steps = train_steps or int(_env('PENGUIN_TRAIN_STEPS', '500'))
  module_file = _env('PENGUIN_MODULE_FILE', MODULE_FILE)

  example_gen = tfx.components.CsvExampleGen(input_base=data_root)
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
      train_args=tfx.proto.TrainArgs(num_steps=train_steps),
      eval_args=tfx.proto.EvalArgs(num_steps=5),
      custom_config={'train_batch_size': 32, 'eval_batch_size': 32})
  # The {serve} model's transform_features signature gives TFMA the
  # transformed label species_xf; the prediction is the Keras output name.
  eval_config = tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(
          signature_name='serving_default', label_key='species_xf',
          prediction_key='probabilities',
          preprocessing_function_names=['transform_features'])],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(metrics=[
          tfma.MetricConfig(class_name='ExampleCount'),
          tfma.MetricConfig(
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
              base_directory=serving_model_dir)))
  return tfx.dsl.Pipeline(
      pipeline_name=PIPELINE_NAME,
      pipeline_root=pipeline_root,
      components=[example_gen, statistics_gen, schema_gen, transform,
                  trainer, evaluator, pusher])
