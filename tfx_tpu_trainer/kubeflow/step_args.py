"""A KFP v2 step's arguments checked as TFX's v2 entrypoint reads them, each
fault one `StepArgumentError` line naming the argument."""

import json
from typing import Any, Dict, List, Optional, Sequence

from tfx_tpu_trainer import errors

__all__ = ['EXECUTOR_CLASS_FLAG', 'INVOCATION_FLAG', 'INPUTS_SPEC_FLAG',
           'ADVICE', 'StepArgumentError', 'flag_value', 'check_json',
           'check_parsed']

# The flags of TFX's v2 entrypoint (kubeflow_v2_run_executor._parse_flags):
# the executor, the ExecutorInput, and the compiled input definitions.
EXECUTOR_CLASS_FLAG = '--executor_class_path'
INVOCATION_FLAG = '--json_serialized_invocation_args'
INPUTS_SPEC_FLAG = '--json_serialized_inputs_spec_args'
ADVICE = ('the KFP launcher writes it from the compiled pipeline spec: '
          'compile the pipeline again with this image (tfx-tpu-trainer '
          'compile).')


class StepArgumentError(errors.TPUTrainerError, ValueError):
  """An argument of the step is missing or is not what TFX reads."""


def flag_value(argv: Sequence[str], flag: str) -> Optional[str]:
  """The value of `flag` (`--flag value` or `--flag=value`), None if absent.

  Raises:
    StepArgumentError: the flag is the last argument, with no value.
  """
  for i, arg in enumerate(argv):
    if arg == flag:
      if i + 1 >= len(argv):
        raise StepArgumentError(f'{flag} has no value; {ADVICE}')
      return argv[i + 1]
    if arg.startswith(flag + '='):
      return arg.split('=', 1)[1]
  return None


def _json_object(argv: Sequence[str], flag: str,
                 message: str) -> Optional[Dict[str, Any]]:
  """The JSON object `flag` holds (None if the flag is absent)."""
  text = flag_value(argv, flag)
  if text is None:
    return None
  try:
    value = json.loads(text)
  except ValueError as e:
    raise StepArgumentError(f'{flag} is not JSON: {e}; {ADVICE}') from e
  if not isinstance(value, dict):
    raise StepArgumentError(
        f'{flag} is not a JSON object (an {message}): it is a '
        f'{type(value).__name__}; {ADVICE}')
  return value


def _parsed(value: Dict[str, Any], message: Any, flag: str) -> Any:
  """`value` parsed into the proto `message` as TFX parses it."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  try:
    return json_format.ParseDict(value, message, ignore_unknown_fields=True)
  except json_format.ParseError as e:
    raise StepArgumentError(
        f'{flag} is not a{"n" if message.DESCRIPTOR.name[0] in "AEIOU" else ""}'
        f' {message.DESCRIPTOR.name}: {errors.first_line(e).rstrip(".")}; '
        f'{ADVICE}'
    ) from e


def _object(value: Any, where: str) -> Dict[str, Any]:
  """`value` if a JSON object (absent: an empty one), else the error."""
  if value is None:
    return {}
  if not isinstance(value, dict):
    raise StepArgumentError(
        f'{INVOCATION_FLAG}: {where} is not a JSON object: it is a '
        f'{type(value).__name__}; {ADVICE}')
  return value


def _check_artifact_lists(artifacts: Any, where: str) -> None:
  """`{key: {artifacts: [{type: {...}, ...}]}}`, as TFX's v2 entrypoint
  walks it (protobuf's JSON parser skips a list or string given for a
  message, which the walk would then trip on)."""
  for key, listed in _object(artifacts, where).items():
    listed = _object(listed, f'{where}[{key!r}]')
    runtime_artifacts = listed.get('artifacts', [])
    if not isinstance(runtime_artifacts, list):
      raise StepArgumentError(
          f'{INVOCATION_FLAG}: {where}[{key!r}].artifacts is not a JSON list: '
          f'it is a {type(runtime_artifacts).__name__}; {ADVICE}')
    for index, runtime_artifact in enumerate(runtime_artifacts):
      at = f'{where}[{key!r}].artifacts[{index}]'
      _object(_object(runtime_artifact, at).get('type'), f'{at}.type')


def _check_shape(invocation: Dict[str, Any]) -> None:
  """The objects and lists of an ExecutorInput are objects and lists."""
  for part in ('inputs', 'outputs'):
    section = _object(invocation.get(part), part)
    _check_artifact_lists(section.get('artifacts'), f'{part}.artifacts')
  inputs = _object(invocation.get('inputs'), 'inputs')
  for field in ('parameterValues', 'parameters'):
    _object(inputs.get(field), f'inputs.{field}')


def check_json(argv: Sequence[str]) -> None:
  """The flags are there and hold an ExecutorInput and a ComponentInputsSpec.

  Needs no TFX: the cheap checks, before TensorFlow loads.

  Raises:
    StepArgumentError: naming the flag and what is wrong.
  """
  from kfp.pipeline_spec import pipeline_spec_pb2  # pylint: disable=g-import-not-at-top
  executor_class = flag_value(argv, EXECUTOR_CLASS_FLAG)
  if executor_class is None:
    raise StepArgumentError(f'{EXECUTOR_CLASS_FLAG} is missing; {ADVICE}')
  if not executor_class:
    raise StepArgumentError(f'{EXECUTOR_CLASS_FLAG} is empty; {ADVICE}')
  invocation = _json_object(argv, INVOCATION_FLAG, 'ExecutorInput')
  if invocation is None:
    raise StepArgumentError(f'{INVOCATION_FLAG} is missing; {ADVICE}')
  _check_shape(invocation)
  executor_input = _parsed(invocation, pipeline_spec_pb2.ExecutorInput(),
                           INVOCATION_FLAG)
  if not executor_input.outputs.output_file:
    raise StepArgumentError(
        f'{INVOCATION_FLAG}: outputs.outputFile is missing (where the step '
        f'writes its ExecutorOutput); {ADVICE}')
  spec = _json_object(argv, INPUTS_SPEC_FLAG, 'ComponentInputsSpec')
  if spec is not None:
    _parsed(spec, pipeline_spec_pb2.ComponentInputsSpec(), INPUTS_SPEC_FLAG)


def check_parsed(argv: Sequence[str]) -> None:
  """What TFX's entrypoint builds from the (typed) arguments builds.

  Its own functions, run on the arguments before it runs them: each input
  and output artifact's class, the exec properties, the driver's output
  file, the executor class.

  Raises:
    StepArgumentError: naming the flag, the artifact or property, and why.
  """
  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format
  from kfp.pipeline_spec import pipeline_spec_pb2
  from tfx.dsl.io import fileio
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as entrypoint_utils
  # pylint: enable=g-import-not-at-top
  executor_input = _parsed(json.loads(flag_value(argv, INVOCATION_FLAG)),
                           pipeline_spec_pb2.ExecutorInput(), INVOCATION_FLAG)
  for direction, artifacts in (('input', executor_input.inputs.artifacts),
                               ('output', executor_input.outputs.artifacts)):
    for key, listed in artifacts.items():
      try:
        entrypoint_utils.parse_raw_artifact_dict({key: listed})
      except Exception as e:  # pylint: disable=broad-except
        raise StepArgumentError(
            f'{INVOCATION_FLAG}: {direction} artifact {key!r}: '
            f'{_artifact_reason(listed, e)}; {ADVICE}') from e
  output_file = executor_input.outputs.output_file
  if fileio.exists(output_file):
    with fileio.open(output_file, 'rb') as f:
      text = f.read()
    try:
      json_format.Parse(text, pipeline_spec_pb2.ExecutorOutput(),
                        ignore_unknown_fields=True)
    except (ValueError, json_format.ParseError) as e:
      raise StepArgumentError(
          f'{INVOCATION_FLAG}: outputs.outputFile {output_file} (written by '
          "the step's driver) is not an ExecutorOutput: "
          f'{errors.first_line(e).rstrip(".")}; remove it or run the driver '
          'again.'
      ) from e
  _check_exec_properties(argv, executor_input)
  _check_executor_class(flag_value(argv, EXECUTOR_CLASS_FLAG))


def _artifact_reason(listed: Any, error: Exception) -> str:
  """Why TFX could not build an artifact: its type, or TFX's own words."""
  for runtime_artifact in listed.artifacts:
    kind = runtime_artifact.type.WhichOneof('kind')
    title = (runtime_artifact.type.schema_title if kind == 'schema_title'
             else None)
    if title is not None and isinstance(error, ImportError):
      return (f'type {title!r} names no artifact class TFX knows '
              f'({errors.first_line(error)})')
  return errors.first_line(error)


def _check_exec_properties(argv: Sequence[str], executor_input: Any) -> None:
  from kfp.pipeline_spec import pipeline_spec_pb2  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as entrypoint_utils  # pylint: disable=g-import-not-at-top
  spec_text = flag_value(argv, INPUTS_SPEC_FLAG)
  spec = (_parsed(json.loads(spec_text),
                  pipeline_spec_pb2.ComponentInputsSpec(), INPUTS_SPEC_FLAG)
          if spec_text else None)
  values = executor_input.inputs.parameter_values
  legacy = executor_input.inputs.parameters
  for name in sorted(values if spec else legacy):
    try:
      entrypoint_utils.parse_execution_properties(
          {name: values[name]} if spec else {},
          {} if spec else {name: legacy[name]}, spec)
    except Exception as e:  # pylint: disable=broad-except
      empty = not (values[name] if spec else legacy[name]).ListFields()
      reason = 'has no value' if empty else errors.first_line(e)
      raise StepArgumentError(
          f'{INVOCATION_FLAG}: exec property {name!r} {reason}; {ADVICE}'
      ) from e


def _check_executor_class(path: str) -> None:
  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_executor
  from tfx.utils import import_utils
  # pylint: enable=g-import-not-at-top
  try:
    executor_class = import_utils.import_class_by_path(path)
  except ImportError as e:
    cause = e.__cause__ or e
    raise StepArgumentError(
        f'{EXECUTOR_CLASS_FLAG} {path!r} cannot be imported: '
        f'{type(cause).__name__}: {errors.first_line(cause)}; {ADVICE}'
    ) from e
  if not (isinstance(executor_class, type) and
          issubclass(executor_class, base_executor.BaseExecutor)):
    raise StepArgumentError(
        f'{EXECUTOR_CLASS_FLAG} {path!r} is not a TFX executor class (a '
        f'BaseExecutor subclass); {ADVICE}')
