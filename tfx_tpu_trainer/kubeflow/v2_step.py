"""`python -m tfx_tpu_trainer.kubeflow.v2_step`: a KFP v2 step of a compiled
spec, TFX's v2 entrypoint after input types the backend left blank."""

import json
import sys
from typing import Any, List, Mapping, Optional, Sequence

import yaml

from tfx_tpu_trainer.kubeflow import step_args
from tfx_tpu_trainer.publishing import secrets

__all__ = ['KFP_V2_ENTRYPOINT', 'STEP_ENTRYPOINT', 'EXECUTOR_CLASS_FLAG',
           'INVOCATION_FLAG', 'INPUTS_SPEC_FLAG', 'EXIT_BAD_INPUT',
           'InputTypeError', 'step_command', 'typed_inputs', 'run']

KFP_V2_ENTRYPOINT = 'tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor'
# This module, which compiled specs run in place of KFP_V2_ENTRYPOINT.
STEP_ENTRYPOINT = 'tfx_tpu_trainer.kubeflow.v2_step'
EXECUTOR_CLASS_FLAG = step_args.EXECUTOR_CLASS_FLAG
INVOCATION_FLAG = step_args.INVOCATION_FLAG
INPUTS_SPEC_FLAG = step_args.INPUTS_SPEC_FLAG
# The exit status of a step whose arguments TFX cannot read (argparse's).
EXIT_BAD_INPUT = 2


class InputTypeError(step_args.StepArgumentError):
  """An input artifact of the step has no type anywhere."""


def step_command(command: Sequence[str],
                 entrypoint: str = STEP_ENTRYPOINT) -> Optional[List[str]]:
  """`command` with TFX's v2 entrypoint replaced by `entrypoint`.

  Args:
    command: a container command TFX's v2 compiler wrote
      (`python -m <KFP_V2_ENTRYPOINT>`).
    entrypoint: the module to run instead (one that ends in `run`).

  Returns:
    The new command, or None if `command` does not run TFX's v2 entrypoint.
  """
  if list(command[-2:]) != ['-m', KFP_V2_ENTRYPOINT]:
    return None
  return list(command[:-1]) + [entrypoint]


def _flag_index(argv: Sequence[str], flag: str) -> Optional[int]:
  """The index in `argv` of `flag`'s value (`--flag value` or `--flag=v`)."""
  for i, arg in enumerate(argv):
    if arg == flag and i + 1 < len(argv):
      return i + 1
    if arg.startswith(flag + '='):
      return i
  return None


def _has_title(type_schema: Mapping[str, Any], key: str) -> bool:
  """Whether an artifact's type names its class (`key`: for the error)."""
  title = type_schema.get('schemaTitle', type_schema.get('schema_title'))
  if title:
    return True
  schema = type_schema.get('instanceSchema',
                           type_schema.get('instance_schema')) or ''
  try:
    loaded = yaml.safe_load(schema) if schema.strip() else None
  except yaml.YAMLError as e:
    problem = ' '.join(str(e).split())
    raise step_args.StepArgumentError(
        f'{INVOCATION_FLAG}: input artifact {key!r}: its instanceSchema is '
        f'not YAML ({problem}); {step_args.ADVICE}') from e
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
  Inputs that have a type (Vertex AI's `schemaTitle`) are left alone.

  Args:
    argv: the step's arguments as the launcher substituted them.

  Returns:
    A copy of `argv`, the ExecutorInput completed (unchanged if no type was
    missing).

  Raises:
    InputTypeError: an input artifact without a type whose key the compiled
      input definitions do not name either.
    StepArgumentError: an instanceSchema that is not YAML (the arguments'
      JSON is checked first: step_args.check_json).
  """
  argv = list(argv)
  invocation_at = _flag_index(argv, INVOCATION_FLAG)
  spec_at = _flag_index(argv, INPUTS_SPEC_FLAG)
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
      if _has_title(runtime_artifact.get('type') or {}, key):
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


def run(argv: Optional[Sequence[str]] = None) -> None:
  """Checks and types this process's arguments, then runs TFX's v2 entrypoint.

  Arguments TFX could not read (step_args) end the process with one line
  on stderr naming the argument, and exit status `EXIT_BAD_INPUT`.

  Args:
    argv: the arguments (default: sys.argv).
  """
  argv = list(sys.argv if argv is None else argv)
  # TFX logs the exec properties (a custom_config's token), Beam the args
  # it discards: every record, and an uncaught error, masked.
  secrets.mask_logs(uncaught=True)
  try:
    step_args.check_json(argv)
    argv = typed_inputs(argv)
    step_args.check_parsed(argv)
  except step_args.StepArgumentError as e:
    sys.stderr.write(f'{STEP_ENTRYPOINT}: {secrets.mask_text(str(e))}\n')
    sys.stderr.flush()
    sys.exit(EXIT_BAD_INPUT)
  sys.argv = argv
  # pylint: disable-next=g-import-not-at-top
  from absl import app
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor  # pylint: disable=g-import-not-at-top
  app.run(kubeflow_v2_run_executor.main,
          flags_parser=kubeflow_v2_run_executor._parse_flags)  # pylint: disable=protected-access


if __name__ == '__main__':
  run()
