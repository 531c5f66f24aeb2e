"""TPUTrainer: the TFX Trainer component with the TPUEstimator executor."""

import os

from tfx import types
from tfx.components.trainer import component as trainer_component
from tfx.components.util import udf_utils
from tfx.dsl.components.base import executor_spec

from tfx_tpu_trainer import executor
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.kubeflow import v2_metrics


class TPUTrainer(trainer_component.Trainer):
  """Trains a TPUEstimator from a module's model_fn (see DESIGN.md).

  Takes exactly the Trainer's arguments (`examples`, `transform_graph`,
  `schema`, `base_model`, `hyperparameters`, `module_file`, `train_args`,
  `eval_args`, `custom_config`) and has its outputs (`model`, `model_run`),
  plus `metrics`: the final evaluation as a `system.Metrics` artifact, which
  the KFP v2 and Vertex UIs show as the run's metrics (kubeflow/v2_metrics.py).
  The module defines `model_fn(features, labels, mode, params)` returning a
  `TPUEstimatorSpec`; `custom_config` keys are documented in
  `tfx_tpu_trainer.config`.
  """

  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, *args, module_file=None, custom_config=None, **kwargs):
    # TFX packages a module_file as a wheel and passes the executor only
    # `name@wheel`; keep the user's path so that errors name it.
    if (isinstance(module_file, str) and
        udf_utils.should_package_user_modules() and
        (custom_config is None or isinstance(custom_config, dict))):
      custom_config = dict(custom_config or {})
      custom_config[user_module.MODULE_FILE_NAME_KEY] = os.path.abspath(
          module_file)
    super().__init__(*args, module_file=module_file,
                     custom_config=custom_config, **kwargs)
    # Trainer builds its own TrainerSpec; the compilers read node.outputs.
    self.spec.outputs[v2_metrics.OUTPUT_KEY] = types.Channel(
        type=v2_metrics.Metrics).as_output_channel(self,
                                                   v2_metrics.OUTPUT_KEY)
