"""`tpu-check` as the first step of a compiled pipeline (--tpu-check)."""

import dataclasses
import os
from typing import Any, Dict, List, Mapping, Sequence

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
    """Raises `tpu_check.TPUCheckError` naming the failed check.

    In a KFP v1 step the check's lines also go to the step's UI metadata
    (a markdown entry), whether it passed or not.
    """
    del input_dict, output_dict, exec_properties  # The check takes none.
    from tfx_tpu_trainer.publishing import step_outputs  # pylint: disable=g-import-not-at-top
    from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top
    results = with_step_advice(tpu_check.run_checks(), os.environ)
    for result in results:
      logging.info('tpu-check: %s', result.line())
    paths = step_outputs.kfp_v1_step_paths()
    if paths is not None:
      try:
        step_outputs.merge_ui_metadata(paths.ui_metadata_path,
                                       [ui_markdown(results)])
      except OSError as e:
        logging.warning('The tpu-check lines are not in the KFP UI (%s): %s',
                        paths.ui_metadata_path, e)
    failed = [r for r in results if not r.ok]
    if failed:
      raise tpu_check.TPUCheckError('tpu-check failed: ' + failed[0].line())


def step_advice(environ: Mapping[str, str]) -> str:
  """What to do when this step's pod has no TPU: it was compiled for one."""
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.slice import worker_group  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.tpu import runtimes  # pylint: disable=g-import-not-at-top
  accelerator = environ.get(runtimes.ACCELERATOR_ENV) or '<accelerator>'
  runtime = environ.get(runtimes.RUNTIME_ENV) or '<runtime>'
  label = scheduling.ACCELERATOR_LABEL
  resource = worker_group.TPU_RESOURCE
  return (
      f'this pipeline step was compiled to run on a TPU ({accelerator}, '
      f'{runtime} runtime: node selector {label}={accelerator}, '
      f'a {resource} limit) and its pod did not get one. In the cluster, '
      'look at the pod (`kubectl describe pod` of this step: its node, its '
      f'{resource} limit, its events), at the TPU node pool '
      f'(`kubectl get nodes -l {label}={accelerator}` with the '
      'topology it was compiled for), and that the step runs the TPU image '
      f'(--trainer-image, Dockerfile target tpu-{runtime})')


def with_step_advice(results: Sequence[Any],
                     environ: Mapping[str, str]) -> List[Any]:
  """The results, a failed `tpu` or `libtpu` check advised for the step.

  Outside a pipeline, `tpu-check` advises running it on a TPU or compiling
  with --tpu-check; inside the compiled step that advice is circular.
  """
  from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.tpu import runtimes  # pylint: disable=g-import-not-at-top
  runtime = environ.get(runtimes.RUNTIME_ENV) or '<runtime>'
  advice = {
      tpu_check.TPU_STEP: step_advice(environ),
      tpu_check.LIBTPU_STEP: (
          'this step\'s image is not a TPU image: compile with '
          f'--trainer-image naming the Dockerfile target tpu-{runtime}, '
          'which the TPU steps run'),
  }
  return [dataclasses.replace(r, advice=advice[r.step])
          if not r.ok and r.step in advice else r
          for r in results]


def ui_markdown(results: Sequence[Any]) -> Dict[str, str]:
  """A KFP v1 UI metadata entry: the check's lines as markdown."""
  failed = any(not r.ok for r in results)
  lines = ['# tpu-check: ' + ('FAILED' if failed else 'passed'), '']
  lines += [f'    {r.line()}' for r in results]
  return {'type': 'markdown', 'storage': 'inline',
          'source': '\n'.join(lines) + '\n'}


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
