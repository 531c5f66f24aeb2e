"""`tpu-check` as the first step of a compiled pipeline (--tpu-check)."""

from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.dsl.context_managers import dsl_context_registry
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import base_executor
from tfx.dsl.components.base import executor_spec
from tfx.types import component_spec

COMPONENT_ID = 'TPUCheck'


class TPUCheckExecutor(base_executor.BaseExecutor):
  """Runs every check of `tfx-tpu-trainer tpu-check`; raises at the first."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Raises `tpu_check.TPUCheckError` naming the failed check."""
    del input_dict, output_dict, exec_properties  # The check takes none.
    from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top
    for result in tpu_check.check_or_raise():
      logging.info('tpu-check: %s', result.line())


class TPUCheckSpec(component_spec.ComponentSpec):
  """No parameters, inputs or outputs."""
  PARAMETERS = {}
  INPUTS = {}
  OUTPUTS = {}


class TPUCheck(base_component.BaseComponent):
  """The TPU check as a pipeline step."""
  SPEC_CLASS = TPUCheckSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(TPUCheckExecutor)

  def __init__(self):
    super().__init__(spec=TPUCheckSpec())


def add_first(pipeline, component_id: str = COMPONENT_ID) -> TPUCheck:
  """Adds a `TPUCheck` upstream of every component of `pipeline`.

  Args:
    pipeline: a `tfx.dsl.Pipeline`, changed in place.
    component_id: the step's id.

  Returns:
    The check component.
  """
  # Built inside the pipeline's registry, where KFP v2's step builder looks
  # every node up.
  with dsl_context_registry.use_registry(pipeline.dsl_context_registry):
    check = TPUCheck().with_id(component_id)
  components = list(pipeline.components)
  for component in components:
    component.add_upstream_node(check)
  # Setting the components prepends the pipeline's Beam args to every Beam
  # component again; each keeps the ones it had.
  beam_specs = [(c.executor_spec, list(c.executor_spec.beam_pipeline_args))
                for c in components
                if isinstance(getattr(c, 'executor_spec', None),
                              executor_spec.BeamExecutorSpec)]
  pipeline.components = [check] + components
  for spec, beam_args in beam_specs:
    spec.beam_pipeline_args = beam_args
  return check


# The names that pipelines compiled before the rename to TPU carry as class
# paths (their serialized component, spec and executor); kept for them.
TpuCheck = TPUCheck
TpuCheckSpec = TPUCheckSpec
TpuCheckExecutor = TPUCheckExecutor
