"""TPUTrainer: the TFX Trainer component with the TPUEstimator executor."""

import os
from typing import List

from tfx import types
from tfx.components.trainer import component as trainer_component
from tfx.dsl.components.base import executor_spec
from tfx.types import component_spec
from tfx.types import standard_component_specs

from tfx_tpu_trainer import errors
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.publishing import v2_metrics

__all__ = ['TPUTrainerSpec', 'TPUTrainer', 'NoTPUTrainerError', 'tpu_trainers']


class TPUTrainerSpec(standard_component_specs.TrainerSpec):
  """The Trainer's spec plus the user's module file and a metrics output.

  `user_module_file` (`user_module.USER_MODULE_FILE_KEY`): the `module_file`
  as the user gave it, made absolute. TFX packages a module_file as a wheel
  and then hands the executor only `module_path` (`name@<wheel>`); errors
  name the user's file from this property (`user_module.module_name`).
  """

  PARAMETERS = {
      **standard_component_specs.TrainerSpec.PARAMETERS,
      user_module.USER_MODULE_FILE_KEY:
          component_spec.ExecutionParameter(type=str, optional=True),
  }
  OUTPUTS = {
      **standard_component_specs.TrainerSpec.OUTPUTS,
      v2_metrics.OUTPUT_KEY: component_spec.ChannelParameter(
          type=v2_metrics.Metrics),
  }


class TPUTrainer(trainer_component.Trainer):
  """Trains a TPUEstimator from a module's model_fn.

  Takes exactly the Trainer's arguments (`examples`, `transform_graph`,
  `schema`, `base_model`, `hyperparameters`, `module_file`, `train_args`,
  `eval_args`, `custom_config`) and has its outputs (`model`, `model_run`),
  plus `metrics`: the final evaluation as a `system.Metrics` artifact, which
  the KFP v2 and Vertex UIs show as the run's metrics
  (publishing/v2_metrics.py).
  The module defines `model_fn(features, labels, mode, params)` returning a
  `TPUEstimatorSpec`; `custom_config` keys are documented in
  `tfx_tpu_trainer.config`. Its spec is `TPUTrainerSpec`: the Trainer's exec
  properties and `user_module_file`, set from `module_file`.
  """

  SPEC_CLASS = TPUTrainerSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, *args, module_file=None, **kwargs):
    super().__init__(*args, module_file=module_file, **kwargs)
    # TFX's Trainer.__init__ builds a TrainerSpec; the same values, with the
    # user's module file named, make this component's TPUTrainerSpec.
    # It also declares the `metrics` output (system.Metrics, KFP v2 UIs).
    self.spec = TPUTrainerSpec(
        **self.spec.inputs, **self.spec.outputs, **self.spec.exec_properties,
        **{user_module.USER_MODULE_FILE_KEY: (
            os.path.abspath(module_file) if isinstance(module_file, str)
            else None),
           v2_metrics.OUTPUT_KEY: types.Channel(type=v2_metrics.Metrics)})
    self.spec.migrate_output_channels(self)

  def _validate_spec(self, spec):
    """Accepts the Trainer's own spec, which `__init__` then extends."""
    if type(spec) is standard_component_specs.TrainerSpec:  # pylint: disable=unidiomatic-typecheck
      return
    super()._validate_spec(spec)


class NoTPUTrainerError(errors.TPUTrainerError, ValueError):
  """The pipeline has no TPUTrainer to put the TPU scheduling on."""


def tpu_trainers(pipeline) -> List[TPUTrainer]:
  """The pipeline's TPUTrainers (subclasses too), in its order.

  Args:
    pipeline: a `tfx.dsl.Pipeline`.

  Raises:
    NoTPUTrainerError: naming the pipeline's components (and a stock Trainer
      to replace).
  """
  components = pipeline.components
  trainers = [c for c in components if isinstance(c, TPUTrainer)]
  if not trainers:
    stock = [c.id for c in components
             if isinstance(c, trainer_component.Trainer)]
    hint = (f' Its Trainer(s) {stock} are the stock tfx.components.Trainer: '
            'use tfx_tpu_trainer.TPUTrainer in their place (same arguments).'
            if stock else '')
    raise NoTPUTrainerError(
        f'Pipeline {pipeline.pipeline_info.pipeline_name!r} has no TPUTrainer '
        f'(components: {[c.id for c in components]}), so no step '
        f'would carry the TPU scheduling.{hint} A pipeline without one '
        'compiles with TFX\'s own KubeflowDagRunner / KubeflowV2DagRunner.')
  return trainers
