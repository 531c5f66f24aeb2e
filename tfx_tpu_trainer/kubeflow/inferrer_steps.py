"""TPUBulkInferrer steps in a Kubeflow compile: their custom_config and checks."""

from typing import Any, Dict, List, Mapping, Optional, Tuple, Type

from tfx.types import standard_component_specs
from tfx.utils import json_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.bulk_inferrer import component as inferrer_component
from tfx_tpu_trainer.bulk_inferrer import executor as inferrer_executor
from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.kubeflow import beam_args as beam_args_lib
from tfx_tpu_trainer.kubeflow import scheduling

__all__ = ['MAX_BEAM_WORKERS', 'InferrerCompileError',
           'compiled_custom_config', 'inferrer_custom_configs',
           'beam_workers', 'beam_defaults', 'check_inferrer_beam_args']

# The most DirectRunner worker processes an inferrer step starts: each
# imports TensorFlow and parses examples; on a TPU host they all call the one
# process that holds the model (docs/guide/batch_inference.md), and a TPU host has
# up to 224 vCPUs (`ct5lp-hightpu-8t`), which `--direct_num_workers=0` would
# turn into as many processes.
MAX_BEAM_WORKERS = 8


class InferrerCompileError(errors.TPUTrainerError, ValueError):
  """A TPUBulkInferrer cannot be compiled as asked; nothing was written."""


def compiled_custom_config(component: Any, kind: str,
                           error: Type[Exception]) -> Dict[str, Any]:
  """A component's custom_config as a compile reads it (a dict, maybe empty).

  Raises:
    error: naming the `kind` and id of a component whose custom_config is
      not a dict (a runtime parameter is only known when the pipeline runs).
  """
  value = component.exec_properties.get(
      standard_component_specs.CUSTOM_CONFIG_KEY)
  if value is None:
    return {}
  if isinstance(value, str):
    return json_utils.loads(value) or {}
  raise error(
      f'{kind} {component.id!r}: custom_config is a {type(value).__name__} '
      '(a runtime parameter?); a compile needs a dict.')


def inferrer_custom_configs(pipeline: Any, use_tpu: bool,
                            tpu_name: Optional[str],
                            tpu_zone: Optional[str] = None,
                            tpu_project: Optional[str] = None,
                            on_a_slice: bool = False
                            ) -> Dict[str, Dict[str, Any]]:
  """Each TPUBulkInferrer's custom_config as compiled, by component id.

  On a TPU compile `use_tpu: true` and the TPU to resolve are added where the
  inferrer sets none, as for the trainers; off a TPU it is kept as given.

  Raises:
    InferrerCompileError: an inferrer sets `use_tpu: false` on a TPU
      compile, the compile asks for a multi-host slice, or the result is
      not a valid config.
  """
  configs = {}
  for inferrer in inferrer_component.tpu_bulk_inferrers(pipeline):
    config = compiled_custom_config(inferrer, 'TPUBulkInferrer',
                                    InferrerCompileError)
    if on_a_slice:
      raise InferrerCompileError(
          f'TPUBulkInferrer {inferrer.id!r}: a multi-host slice is for '
          'training (its hosts are created by the trainer step and gone '
          'after it); score on one host\'s TPU (a single-host topology) or '
          'compile without the inferrer.')
    if use_tpu:
      if config.get(inference_config.USE_TPU_KEY) is False:
        raise InferrerCompileError(
            f'TPUBulkInferrer {inferrer.id!r} sets custom_config[\'use_tpu\']='
            'False, but the compile schedules it on a TPU: drop the key, or '
            'compile without a TPU (--no-use-tpu).')
      config.setdefault(inference_config.USE_TPU_KEY, True)
      if inference_config.TPU_KEY not in config and tpu_name:
        config[inference_config.TPU_KEY] = config_lib.tpu_entry(
            tpu_name, tpu_zone, tpu_project)
    try:
      inference_config.InferenceConfig.from_custom_config(config, environ={})
    except config_lib.ConfigError as e:
      raise InferrerCompileError(
          f'TPUBulkInferrer {inferrer.id!r}: {e}') from e
    inferrer.exec_properties[inferrer_executor.CUSTOM_CONFIG_KEY] = json_utils.dumps(config)
    configs[inferrer.id] = config
  return configs


def beam_workers(cpu_request: Optional[str]) -> int:
  """An inferrer's DirectRunner workers: the CPUs its pod asks for, capped.

  Without a CPU request, `MAX_BEAM_WORKERS`.
  """
  if not cpu_request:
    return MAX_BEAM_WORKERS
  cores = int(scheduling.quantity_value(cpu_request))
  return max(1, min(cores, MAX_BEAM_WORKERS))


def beam_defaults(cpu_request: Optional[str]) -> Tuple[str, ...]:
  """The cluster's Beam defaults for an inferrer step (`beam_workers`)."""
  return tuple(
      f'--direct_num_workers={beam_workers(cpu_request)}'
      if beam_args_lib.name(arg) == 'direct_num_workers' else arg
      for arg in beam_args_lib.CLUSTER_DEFAULTS)


def check_inferrer_beam_args(pipeline: Any, inferrer_ids: List[str],
                             use_tpu: bool) -> None:
  """On a TPU, an inferrer's Beam runs in its own pod (the DirectRunner).

  Raises:
    InferrerCompileError: its Beam arguments name another runner, whose
      workers would have no TPU.
  """
  if not use_tpu:
    return
  for component in pipeline.components:
    if component.id not in inferrer_ids:
      continue
    args = [a for a in component.executor_spec.beam_pipeline_args
            if isinstance(a, str)]
    if not beam_args_lib.is_direct(args):
      raise InferrerCompileError(
          f'TPUBulkInferrer {component.id!r} would run Beam on '
          f'{beam_args_lib.runner(args)}, whose workers have no TPU: on a '
          'TPU it scores in its own pod with the DirectRunner. Give it '
          '`with_beam_pipeline_args([...DirectRunner...])`, or compile '
          'without a TPU to score on the cluster\'s runner.')
