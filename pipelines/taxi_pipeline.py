"""The Chicago taxi pipeline with TPUTrainer: one factory for every runner."""

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from tfx_tpu_trainer import TPUBulkInferrer
from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer.publishing import pusher as pusher_lib

PIPELINE_NAME = 'taxi_tpu'

LABEL_KEY = 'big_tipper'
PREDICTION_KEY = 'probabilities'
# The default lower bound of BalancedAccuracy: above the 0.5 of a constant
# (majority-class) model.
MIN_BALANCED_ACCURACY = 0.55


@dataclasses.dataclass
class TaxiPipelineOptions:
  """What a taxi pipeline run varies."""
  pipeline_root: str
  data_root: str
  serving_model_dir: str
  # The module files are the runner's choice (the bundled ones:
  # tfx_tpu_trainer_cli/paths.py).
  trainer_module_file: str
  preprocessing_module_file: Optional[str] = None
  # Transform's `preprocessing_fn` as an import path (`module.function`),
  # instead of the module file: Beam workers in other processes import it by
  # name (a file loaded by path is `user_module_N`, which they cannot).
  preprocessing_fn: Optional[str] = None
  train_steps: int = 1000
  eval_steps: int = 100
  custom_config: Dict[str, Any] = dataclasses.field(default_factory=dict)
  min_accuracy: float = 0.5
  # BalancedAccuracy (the mean of the recalls of both classes, at 0.5) is
  # 0.5 for a model that always answers one class, whatever the classes'
  # rates: a model must do better than that to be blessed.
  min_balanced_accuracy: float = MIN_BALANCED_ACCURACY
  # What the Evaluator reads (tfx_tpu_trainer_cli/evaluator_keys.py decides
  # them for another trainer module): the label, the prediction (None:
  # TFMA's own search) and the model signatures that compute the label.
  eval_label_key: str = LABEL_KEY
  eval_prediction_key: Optional[str] = PREDICTION_KEY
  eval_preprocessing_function_names: Tuple[str, ...] = ()
  pipeline_name: str = PIPELINE_NAME
  metadata_connection_config: Optional[Any] = None
  beam_pipeline_args: List[str] = dataclasses.field(default_factory=list)
  enable_cache: bool = False
  # A TPUBulkInferrer after the Evaluator scores the eval split with the
  # blessed model (on the TPU when the trainer trains on one).
  bulk_infer: bool = False


def create_data_components(options: TaxiPipelineOptions) -> Dict[str, Any]:
  """ExampleGen, StatisticsGen, SchemaGen, ExampleValidator, Transform."""
  example_gen = tfx.components.CsvExampleGen(input_base=options.data_root)
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs['examples'])
  schema_gen = tfx.components.SchemaGen(
      statistics=statistics_gen.outputs['statistics'],
      infer_feature_shape=False)
  example_validator = tfx.components.ExampleValidator(
      statistics=statistics_gen.outputs['statistics'],
      schema=schema_gen.outputs['schema'])
  if options.preprocessing_fn:
    preprocessing = {'preprocessing_fn': options.preprocessing_fn}
  else:
    preprocessing = {'module_file': options.preprocessing_module_file}
  transform = tfx.components.Transform(
      examples=example_gen.outputs['examples'],
      schema=schema_gen.outputs['schema'],
      **preprocessing)
  return {
      'example_gen': example_gen,
      'statistics_gen': statistics_gen,
      'schema_gen': schema_gen,
      'example_validator': example_validator,
      'transform': transform,
  }


def eval_config(min_accuracy: float, label_key: str = LABEL_KEY,
                prediction_key: Optional[str] = PREDICTION_KEY,
                preprocessing_function_names: Sequence[str] = (),
                min_balanced_accuracy: float = MIN_BALANCED_ACCURACY
               ) -> tfma.EvalConfig:
  """TFMA over the `serve` signature.

  Blesses a model whose binary accuracy is at least `min_accuracy` and whose
  balanced accuracy is at least `min_balanced_accuracy`: a model that always
  answers the majority class has the majority rate as its accuracy (0.775 on
  the taxi data) but a balanced accuracy of 0.5.
  """
  return tfma.EvalConfig(
      model_specs=[
          tfma.ModelSpec(
              signature_name='serving_default',
              label_key=label_key,
              prediction_key=prediction_key or '',
              preprocessing_function_names=list(
                  preprocessing_function_names))
      ],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[
          tfma.MetricsSpec(metrics=[
              tfma.MetricConfig(class_name='ExampleCount'),
              tfma.MetricConfig(class_name='AUC'),
              tfma.MetricConfig(
                  class_name='BinaryAccuracy',
                  threshold=tfma.MetricThreshold(
                      value_threshold=tfma.GenericValueThreshold(
                          lower_bound={'value': min_accuracy}))),
              tfma.MetricConfig(
                  class_name='BalancedAccuracy',
                  threshold=tfma.MetricThreshold(
                      value_threshold=tfma.GenericValueThreshold(
                          lower_bound={'value': min_balanced_accuracy}))),
          ])
      ])


# The trainer's custom_config keys the inferrer takes too: where it runs.
INFERRER_KEYS = ('use_tpu', 'tpu')


def create_bulk_inferrer(examples: Any, model: Any,
                         blessing: Any,
                         trainer_config: Dict[str, Any]) -> TPUBulkInferrer:
  """Scores the eval split with the blessed model, where the trainer ran."""
  return TPUBulkInferrer(
      examples=examples, model=model, model_blessing=blessing,
      data_spec=tfx.proto.DataSpec(example_splits=['eval']),
      custom_config={k: v for k, v in trainer_config.items()
                     if k in INFERRER_KEYS})


def create_pipeline(options: TaxiPipelineOptions) -> tfx.dsl.Pipeline:
  """Data components, TPUTrainer, Evaluator, Pusher (and TPUBulkInferrer)."""
  data = create_data_components(options)
  trainer = TPUTrainer(
      module_file=options.trainer_module_file,
      examples=data['transform'].outputs['transformed_examples'],
      transform_graph=data['transform'].outputs['transform_graph'],
      schema=data['schema_gen'].outputs['schema'],
      train_args=tfx.proto.TrainArgs(num_steps=options.train_steps),
      eval_args=tfx.proto.EvalArgs(num_steps=options.eval_steps),
      custom_config=options.custom_config)
  evaluator = tfx.components.Evaluator(
      examples=data['example_gen'].outputs['examples'],
      model=trainer.outputs['model'],
      eval_config=eval_config(options.min_accuracy, options.eval_label_key,
                              options.eval_prediction_key,
                              options.eval_preprocessing_function_names,
                              options.min_balanced_accuracy))
  # Each push claims its own model version (publishing/pusher.py).
  pusher = tfx.components.Pusher(
      model=trainer.outputs['model'],
      model_blessing=evaluator.outputs['blessing'],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=options.serving_model_dir)),
      custom_executor_spec=executor_spec.ExecutorClassSpec(
          pusher_lib.Executor))
  components = list(data.values()) + [trainer, evaluator, pusher]
  if options.bulk_infer:
    components.append(create_bulk_inferrer(
        data['example_gen'].outputs['examples'], trainer.outputs['model'],
        evaluator.outputs['blessing'], options.custom_config))
  return tfx.dsl.Pipeline(
      pipeline_name=options.pipeline_name,
      pipeline_root=options.pipeline_root,
      components=components,
      enable_cache=options.enable_cache,
      metadata_connection_config=options.metadata_connection_config,
      beam_pipeline_args=options.beam_pipeline_args)
