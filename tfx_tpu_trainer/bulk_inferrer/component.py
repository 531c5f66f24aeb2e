"""TPUBulkInferrer: the stock BulkInferrer component with the TPU executor."""

import json
from typing import Any, Dict, List, Optional, Union

from tfx.components.bulk_inferrer import component as stock_component
from tfx.dsl.components.base import executor_spec
from tfx.orchestration import data_types
from tfx.types import component_spec
from tfx.types import standard_component_specs

from tfx_tpu_trainer.bulk_inferrer import executor
from tfx_tpu_trainer.bulk_inferrer import inference_config

__all__ = ['TPUBulkInferrer', 'tpu_bulk_inferrers']


class TPUBulkInferrerSpec(standard_component_specs.BulkInferrerSpec):
  """BulkInferrer's spec plus `custom_config` (JSON: use_tpu, tpu, batch_size)."""

  PARAMETERS = {
      **standard_component_specs.BulkInferrerSpec.PARAMETERS,
      executor.CUSTOM_CONFIG_KEY:
          component_spec.ExecutionParameter(type=str, optional=True),
  }


class TPUBulkInferrer(stock_component.BulkInferrer):
  """Scores examples with a model, on the TPU when there is one.

  A drop-in for `tfx.components.BulkInferrer`: the same inputs (`examples`,
  `model`, `model_blessing`), exec properties (`data_spec`, `model_spec`,
  `output_example_spec`) and outputs (`inference_result` of PredictionLogs,
  or `output_examples`). On a TPU it runs the model's `{serve, tpu}` graph,
  off a TPU its `{serve}` graph, in batches of `custom_config['batch_size']`
  (bulk_inferrer/inference_config.py has the keys).
  """

  SPEC_CLASS = TPUBulkInferrerSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self, *args,
               custom_config: Optional[Union[
                   Dict[str, Any], data_types.RuntimeParameter]] = None,
               **kwargs):
    super().__init__(*args, **kwargs)
    if isinstance(custom_config, dict):
      # Checked now, so a bad key fails the pipeline's definition.
      inference_config.InferenceConfig.from_custom_config(custom_config,
                                                          environ={})
      custom_config = json.dumps(custom_config, sort_keys=True)
    # BulkInferrer.__init__ builds a BulkInferrerSpec; the same values and
    # custom_config make this component's spec.
    self.spec = TPUBulkInferrerSpec(
        **self.spec.inputs, **self.spec.outputs, **self.spec.exec_properties,
        **{executor.CUSTOM_CONFIG_KEY: custom_config})
    self.spec.migrate_output_channels(self)

  def _validate_spec(self, spec):
    """Accepts the BulkInferrer's own spec, which `__init__` then extends."""
    if type(spec) is standard_component_specs.BulkInferrerSpec:  # pylint: disable=unidiomatic-typecheck
      return
    super()._validate_spec(spec)


def tpu_bulk_inferrers(pipeline) -> List[TPUBulkInferrer]:
  """The pipeline's TPUBulkInferrers (subclasses too), in its order.

  Args:
    pipeline: a `tfx.dsl.Pipeline`.
  """
  return [c for c in pipeline.components if isinstance(c, TPUBulkInferrer)]
