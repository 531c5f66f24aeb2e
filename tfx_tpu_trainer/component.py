"""TPUTrainer: the TFX Trainer component with the TPUEstimator executor."""

import os
from typing import Any, List, Optional

from absl import logging
from tfx import types
from tfx.components.trainer import component as trainer_component
from tfx.components.util import udf_utils
from tfx.dsl.components.base import executor_spec
from tfx.types import component_spec
from tfx.types import standard_component_specs

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import executor
from tfx_tpu_trainer import user_module
from tfx_tpu_trainer.publishing import v2_metrics
from tfx_tpu_trainer.user_code import function_paths
from tfx_tpu_trainer.user_code import module_folder

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
  `schema`, `base_model`, `hyperparameters`, `module_file` or the import
  path of its `run_fn`/`trainer_fn`, `train_args`, `eval_args`,
  `custom_config`) and has its outputs (`model`, `model_run`),
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

  def __init__(self, *args, module_file=None, run_fn=None, trainer_fn=None,
               custom_config=None, **kwargs):
    _check_custom_config(custom_config)
    super().__init__(*args, module_file=module_file, run_fn=run_fn,
                     trainer_fn=trainer_fn, custom_config=custom_config,
                     **kwargs)
    # run_fn= / trainer_fn=: the function's import path, as the stock
    # Trainer takes it (user_code/function_paths.py).
    self.function_location = _locate_function(run_fn, trainer_fn)
    user_file = (os.path.abspath(module_file) if isinstance(module_file, str)
                 else None)
    if self.function_location is not None:
      user_file = self.function_location.file
    # TFX's Trainer.__init__ builds a TrainerSpec; the same values, with the
    # user's module file named, make this component's TPUTrainerSpec.
    # It also declares the `metrics` output (system.Metrics, KFP v2 UIs).
    self.spec = TPUTrainerSpec(
        **self.spec.inputs, **self.spec.outputs, **self.spec.exec_properties,
        **{user_module.USER_MODULE_FILE_KEY: user_file,
           v2_metrics.OUTPUT_KEY: types.Channel(type=v2_metrics.Metrics)})
    self.spec.migrate_output_channels(self)
    self._package_module_folders()
    location = self.function_location
    if (location is not None and not location.installed and
        udf_utils.should_package_user_modules()):
      # Packaged as TFX packages a module_file: a wheel under the pipeline
      # root when the pipeline is compiled or run locally.
      self._add_pip_dependency(function_paths.WheelDependency(self, location))

  def _package_module_folders(self) -> None:
    """The module_file's wheel holds the package folders beside it too.

    TFX's Trainer packages the .py files of the module's folder only
    (user_code/module_folder.py says why that is not enough).
    """
    # pylint: disable=protected-access
    self._pip_dependencies = [
        module_folder.ModuleFolderDependency(
            self, dependency.module_file_key, dependency.module_path_key)
        if type(dependency) is udf_utils.UserModuleFilePipDependency  # pylint: disable=unidiomatic-typecheck
        else dependency for dependency in self._pip_dependencies]
    # pylint: enable=protected-access

  def _validate_spec(self, spec):
    """Accepts the Trainer's own spec, which `__init__` then extends."""
    if type(spec) is standard_component_specs.TrainerSpec:  # pylint: disable=unidiomatic-typecheck
      return
    super()._validate_spec(spec)


def _check_custom_config(custom_config: Any) -> None:
  """Checks a dict `custom_config` as the executor will, when it is defined.

  So an unknown key or a bad value fails the pipeline's definition, not the
  trainer's step after the upstream components ran. The environment is not
  read (`TPU_NAME` is the step's, where it runs); a RuntimeParameter is
  checked by the executor once resolved.

  Raises:
    config_lib.ConfigError: naming the key and the accepted values.
  """
  if not isinstance(custom_config, dict):
    return
  try:
    config_lib.TrainerConfig.from_custom_config(custom_config, environ={})
  except config_lib.ConfigError as e:
    raise config_lib.ConfigError(f'TPUTrainer: {e}') from e


def _locate_function(run_fn: Any, trainer_fn: Any
                     ) -> Optional[function_paths.FunctionLocation]:
  """Where `run_fn=`/`trainer_fn=` leads, checked as the pipeline is built.

  None for a module_file, a RuntimeParameter, or a path that is not found
  here while TFX is told not to package user modules (the image holds it).

  Raises:
    function_paths.FunctionPathError: naming the argument and what to pass.
  """
  for argument, value in ((user_module.RUN_FN, run_fn),
                          (user_module.TRAINER_FN, trainer_fn)):
    if not isinstance(value, str) or not value:
      continue
    function_paths.parse(value, argument)
    try:
      return function_paths.locate(value, argument)
    except function_paths.FunctionPathError:
      if udf_utils.should_package_user_modules():
        raise
      logging.info('%s=%r is not found here; it is imported by name where '
                   'the trainer runs.', argument, value)
  return None


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
