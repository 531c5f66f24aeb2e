"""The final metrics as a `system.Metrics` artifact (KFP v2, Vertex AI)."""

import json
import sys
import types as python_types
from typing import Any, Dict, List, Mapping, Optional, Sequence

import yaml

from tfx.types import artifact

from tfx_tpu_trainer import errors

__all__ = ['OUTPUT_KEY', 'KFP_V2_ARTIFACT_TYPE', 'SYSTEM_MODULE',
           'KFP_V2_ENTRYPOINT', 'TRAINER_STEP_ENTRYPOINT', 'INVOCATION_FLAG',
           'INPUTS_SPEC_FLAG', 'InputTypeError', 'Metrics',
           'install_system_module', 'record_metrics', 'declare_as_kfp_does',
           'trainer_step_command', 'typed_inputs', 'main']

OUTPUT_KEY = 'metrics'
# How kfp 2 declares an `Output[Metrics]` (kfp/dsl/types/artifact_types.py).
KFP_V2_ARTIFACT_TYPE = {'schemaTitle': 'system.Metrics',
                        'schemaVersion': '0.0.1'}
SYSTEM_MODULE = 'system'
KFP_V2_ENTRYPOINT = 'tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor'
# The step's entrypoint module (kubeflow/v2_metrics.py runs `main`).
TRAINER_STEP_ENTRYPOINT = 'tfx_tpu_trainer.kubeflow.v2_metrics'
# The flags of TFX's v2 entrypoint that carry the ExecutorInput and the
# compiled input definitions (kubeflow_v2_run_executor._parse_flags).
INVOCATION_FLAG = '--json_serialized_invocation_args'
INPUTS_SPEC_FLAG = '--json_serialized_inputs_spec_args'


class InputTypeError(errors.TPUTrainerError, ValueError):
  """An input artifact of the step has no type anywhere."""


class Metrics(artifact.Artifact):
  """Scalar metrics, one custom property each: KFP's `system.Metrics`."""
  TYPE_NAME = 'system.Metrics'


def install_system_module() -> None:
  """Makes `import system; system.Metrics` work in this process.

  What TFX's v2 entrypoint imports for an artifact titled `system.Metrics`.
  A module `system` that is already importable is left alone when it has
  `Metrics`; one without it is an error (two meanings of one name).

  Raises:
    ImportError: another module named `system` without `Metrics` is loaded.
  """
  existing = sys.modules.get(SYSTEM_MODULE)
  if existing is not None:
    if getattr(existing, 'Metrics', None) is not Metrics:
      raise ImportError(
          f'A module named {SYSTEM_MODULE!r} ({existing!r}) is already '
          'loaded; TFX\'s KFP v2 entrypoint would read the trainer\'s '
          "system.Metrics output from it. Rename that module.")
    return
  module = python_types.ModuleType(
      SYSTEM_MODULE, 'KFP v2 system artifact types (tfx_tpu_trainer).')
  module.Metrics = Metrics
  sys.modules[SYSTEM_MODULE] = module


def record_metrics(metrics: Mapping[str, Any],
                   output: Optional[artifact.Artifact]) -> None:
  """Sets each finite number of `metrics` as a custom property of `output`."""
  if output is None:
    return
  for name, value in metrics.items():
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if value != value or value in (float('inf'), float('-inf')):
      continue  # KFP shows numbers; NaN and infinity are left out.
    output.set_float_custom_property(name, float(value))


def declare_as_kfp_does(component: Dict[str, Any]) -> None:
  """Declares the `metrics` output of a compiled trainer as kfp 2 does.

  Args:
    component: the trainer's component spec in a pipeline spec (JSON),
      changed in place: its `metrics` artifact type becomes
      `KFP_V2_ARTIFACT_TYPE` (TFX writes an `instanceSchema` titled
      `system.Metrics`; TFX's v2 entrypoint reads either form,
      kubeflow_v2_entrypoint_utils._retrieve_class_path).
  """
  artifacts = component.get('outputDefinitions', {}).get('artifacts', {})
  if OUTPUT_KEY in artifacts:
    artifacts[OUTPUT_KEY]['artifactType'] = dict(KFP_V2_ARTIFACT_TYPE)


def trainer_step_command(command: Sequence[str]) -> Optional[list]:
  """The trainer's v2 container command through `main`, or None if unknown.

  Args:
    command: the command TFX's v2 compiler wrote (`python -m <entrypoint>`).
  """
  if list(command[-2:]) != ['-m', KFP_V2_ENTRYPOINT]:
    return None
  return list(command[:-1]) + [TRAINER_STEP_ENTRYPOINT]


def _flag_value(argv: Sequence[str], flag: str) -> Optional[int]:
  """The index in `argv` of `flag`'s value (`--flag value` or `--flag=v`)."""
  for i, arg in enumerate(argv):
    if arg == flag and i + 1 < len(argv):
      return i + 1
    if arg.startswith(flag + '='):
      return i
  return None


def _has_title(type_schema: Mapping[str, Any]) -> bool:
  title = type_schema.get('schemaTitle', type_schema.get('schema_title'))
  if title:
    return True
  schema = type_schema.get('instanceSchema',
                           type_schema.get('instance_schema')) or ''
  loaded = yaml.safe_load(schema) if schema.strip() else None
  return isinstance(loaded, dict) and bool(loaded.get('title'))


def typed_inputs(argv: Sequence[str]) -> List[str]:
  """`argv` with each input artifact's type taken from the compiled spec
  where the ExecutorInput gives it without a schema title.

  A KFP v2 backend hands a task its upstream artifacts with an empty
  `instanceSchema` (backend/src/v2/metadata/client.go
  GetOutputArtifactsByExecutionId leaves the schema blank), which TFX's v2
  entrypoint cannot read (`yaml.safe_load('')` is None:
  tensorflow/tfx#7768). The input definitions compiled into the step's
  arguments (`--json_serialized_inputs_spec_args`) name every input's type.

  Args:
    argv: the step's arguments as the launcher substituted them.

  Returns:
    A copy of `argv`, the ExecutorInput completed (unchanged if no type was
    missing).

  Raises:
    InputTypeError: an input artifact without a type whose key the compiled
      input definitions do not name either.
  """
  argv = list(argv)
  invocation_at = _flag_value(argv, INVOCATION_FLAG)
  spec_at = _flag_value(argv, INPUTS_SPEC_FLAG)
  if invocation_at is None or spec_at is None:
    return argv

  def value(i):
    arg = argv[i]
    inline = arg.startswith((INVOCATION_FLAG + '=', INPUTS_SPEC_FLAG + '='))
    return arg.split('=', 1)[1] if inline else arg

  executor_input = json.loads(value(invocation_at))
  declared = json.loads(value(spec_at)).get('artifacts', {})
  changed = False
  for key, listed in executor_input.get('inputs', {}).get(
      'artifacts', {}).items():
    for runtime_artifact in listed.get('artifacts', []):
      if _has_title(runtime_artifact.get('type') or {}):
        continue
      artifact_type = declared.get(key, {}).get(
          'artifactType', declared.get(key, {}).get('artifact_type'))
      if not artifact_type:
        raise InputTypeError(
            f'Input artifact {key!r} has no type in {INVOCATION_FLAG} and '
            f'{INPUTS_SPEC_FLAG} does not declare it; compile the pipeline '
            'again with this image (tfx-tpu-trainer compile).')
      runtime_artifact['type'] = dict(artifact_type)
      changed = True
  if changed:
    completed = json.dumps(executor_input)
    inline = argv[invocation_at].startswith(INVOCATION_FLAG + '=')
    argv[invocation_at] = (f'{INVOCATION_FLAG}={completed}' if inline
                           else completed)
  return argv


def main() -> None:
  """The trainer's KFP v2 step: `system` module, input types from the
  compiled spec where the backend left them out, then TFX's v2 entrypoint."""
  install_system_module()
  sys.argv = typed_inputs(sys.argv)
  # pylint: disable-next=g-import-not-at-top
  from absl import app
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor  # pylint: disable=g-import-not-at-top
  app.run(kubeflow_v2_run_executor.main,
          flags_parser=kubeflow_v2_run_executor._parse_flags)  # pylint: disable=protected-access

