"""TPUTrainer: the TFX Trainer component with the TPUEstimator executor."""

from tfx.components.trainer import component as trainer_component
from tfx.dsl.components.base import executor_spec

from tfx_tpu_trainer import executor


class TPUTrainer(trainer_component.Trainer):
  """Trains a TPUEstimator from a module's model_fn (see DESIGN.md).

  Takes exactly the Trainer's arguments (`examples`, `transform_graph`,
  `schema`, `base_model`, `hyperparameters`, `module_file`, `train_args`,
  `eval_args`, `custom_config`) and has its outputs (`model`, `model_run`).
  The module defines `model_fn(features, labels, mode, params)` returning a
  `TPUEstimatorSpec`; `custom_config` keys are documented in
  `tfx_tpu_trainer.config`.
  """

  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
