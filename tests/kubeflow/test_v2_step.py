"""kubeflow/v2_step: a KFP v2 step's inputs typed where the backend left
them blank, parsed by TFX's own v2 entrypoint."""

import json
import os
import re
import subprocess
import sys

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pipeline_pb2
import pytest
from tfx.dsl.components.base import base_executor
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor
from tfx.types import standard_artifacts

from tfx_tpu_trainer.kubeflow import v2_metrics
from tfx_tpu_trainer.kubeflow import v2_step

from tests.conftest import REPO_ROOT

_EXECUTOR = 'tfx_tpu_trainer.executor.Executor'


def test_step_command():
  tfx_command = ['python', '-m', v2_step.KFP_V2_ENTRYPOINT]
  assert v2_step.step_command(tfx_command) == [
      'python', '-m', 'tfx_tpu_trainer.kubeflow.v2_step']
  assert v2_step.step_command(
      tfx_command, v2_metrics.TRAINER_STEP_ENTRYPOINT) == [
          'python', '-m', 'tfx_tpu_trainer.kubeflow.v2_metrics']
  assert v2_step.step_command(['my-entrypoint']) is None
  assert v2_step.step_command(['python', '-m', 'other.module']) is None


def _backend_argv(input_type, invocation_inline=False):
  """The trainer step's arguments as a KFP v2 launcher substitutes them: the
  upstream Examples as the driver reads them from MLMD, with `input_type`."""
  executor_input = {'inputs': {'artifacts': {'examples': {'artifacts': [{
      'name': '12', 'type': input_type, 'uri': '/root/Transform/examples/5',
      'metadata': {'split_names': '["train", "eval"]', 'span': 0.0,
                   'display_name': 'transformed_examples'}}]}}},
                    'outputs': {'outputFile': '/root/t/output_metadata.json'}}
  # As the compiler writes it (the taxi spec's, shortened).
  inputs_spec = {'artifacts': {'examples': {'artifactType': {
      'instanceSchema': 'title: tfx.Examples\ntype: object\n'}}}}
  invocation = json.dumps(executor_input)
  return ['prog', '--executor_class_path', 'tfx_tpu_trainer.executor.Executor'
         ] + ([f'{v2_step.INVOCATION_FLAG}={invocation}']
              if invocation_inline else
              [v2_step.INVOCATION_FLAG, invocation]) + [
                  v2_step.INPUTS_SPEC_FLAG, json.dumps(inputs_spec),
                  '--direct_num_workers=1']


def _parsed_inputs(argv):
  """The inputs TFX's v2 entrypoint builds from `argv`."""
  args, beam_args = kubeflow_v2_run_executor._parse_flags(argv[1:])  # pylint: disable=protected-access
  assert beam_args == ['--direct_num_workers=1']
  executor_input = json_format.Parse(args.json_serialized_invocation_args,
                                     pipeline_pb2.ExecutorInput(),
                                     ignore_unknown_fields=True)
  return kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(
      executor_input.inputs.artifacts, {})


@pytest.mark.parametrize('inline', [False, True])
def test_input_types_the_kfp_v2_backend_leaves_blank_come_from_the_spec(
    inline):
  argv = _backend_argv({'instanceSchema': ''}, invocation_inline=inline)
  # What TFX's v2 entrypoint makes of the backend's blank schema.
  with pytest.raises(AttributeError, match="'NoneType' object has no "
                     "attribute 'get'"):
    _parsed_inputs(argv)
  typed = v2_step.typed_inputs(argv)
  assert len(typed) == len(argv)
  [examples] = _parsed_inputs(typed)['examples']
  assert isinstance(examples, standard_artifacts.Examples)
  assert examples.uri == '/root/Transform/examples/5'
  assert examples.split_names == '["train", "eval"]'
  assert examples.span == 0


@pytest.mark.parametrize('input_type', [
    {'instanceSchema': 'title: tfx.Examples\ntype: object\n'},
    {'schemaTitle': 'tfx.Examples'}])
def test_input_types_given_are_left_alone(input_type):
  argv = _backend_argv(input_type)
  assert v2_step.typed_inputs(argv) == argv
  # Without the flags there is nothing to complete.
  assert v2_step.typed_inputs(['prog', '--other']) == ['prog', '--other']


def test_an_input_declared_nowhere_is_an_error():
  argv = _backend_argv({})
  spec_at = argv.index(v2_step.INPUTS_SPEC_FLAG) + 1
  argv[spec_at] = json.dumps({'artifacts': {}})
  with pytest.raises(v2_step.InputTypeError,
                     match="Input artifact 'examples' has no type in "
                     '--json_serialized_invocation_args'):
    v2_step.typed_inputs(argv)


def _step_argv(tmp_path, edit=None, executor_class=_EXECUTOR,
               inputs_spec=True):
  """A trainer step's arguments; `edit(executor_input)` spoils them."""
  executor_input = {
      'inputs': {'artifacts': {'examples': {'artifacts': [{
          'name': '12', 'uri': '/root/Transform/examples/5',
          'type': {'schemaTitle': 'tfx.Examples'},
          'metadata': {'split_names': '["train", "eval"]'}}]}},
                 'parameterValues': {'custom_config': '{}'}},
      'outputs': {'outputFile': str(tmp_path / 'task' / 'output.json')}}
  if edit:
    edit(executor_input)
  argv = ['prog', v2_step.EXECUTOR_CLASS_FLAG, executor_class,
          v2_step.INVOCATION_FLAG, json.dumps(executor_input)]
  if inputs_spec:
    argv += [v2_step.INPUTS_SPEC_FLAG, json.dumps({'artifacts': {
        'examples': {'artifactType': {'schemaTitle': 'tfx.Examples'}}}})]
  return argv + ['--direct_num_workers=1']


def _set(path, value):
  """An edit that sets executor_input[path...] = value."""
  def edit(executor_input):
    node = executor_input
    for key in path[:-1]:
      node = node[key]
    node[path[-1]] = value
  return edit


def _without(argv, flag, keep_flag=False):
  at = argv.index(flag)
  return argv[:at + 1] if keep_flag else argv[:at] + argv[at + 2:]


def _with_value(argv, flag, value):
  argv = list(argv)
  argv[argv.index(flag) + 1] = value
  return argv


_EXAMPLE = ['inputs', 'artifacts', 'examples', 'artifacts', 0]
_INVOCATION = v2_step.INVOCATION_FLAG
_SPEC = v2_step.INPUTS_SPEC_FLAG
_CLASS = v2_step.EXECUTOR_CLASS_FLAG

# (case, argv from tmp_path, the one line's text after the step's name).
_MALFORMED = [
    ('executor class missing', lambda t: _without(_step_argv(t), _CLASS),
     '--executor_class_path is missing'),
    ('executor class empty', lambda t: _step_argv(t, executor_class=''),
     '--executor_class_path is empty'),
    ('executor class not importable',
     lambda t: _step_argv(t, executor_class='no_such_module.Executor'),
     "--executor_class_path 'no_such_module.Executor' cannot be imported: "
     "ModuleNotFoundError: No module named 'no_such_module'"),
    ('executor class not an executor',
     lambda t: _step_argv(t,
                          executor_class='tfx_tpu_trainer.config.ConfigError'),
     "--executor_class_path 'tfx_tpu_trainer.config.ConfigError' is not a "
     r'TFX executor class \(a BaseExecutor subclass\)'),
    ('invocation missing', lambda t: _without(_step_argv(t), _INVOCATION),
     '--json_serialized_invocation_args is missing'),
    ('invocation without a value',
     lambda t: _without(_step_argv(t, inputs_spec=False), _INVOCATION,
                        keep_flag=True),
     '--json_serialized_invocation_args has no value'),
    ('invocation not JSON',
     lambda t: _with_value(_step_argv(t), _INVOCATION, '{"inputs": '),
     '--json_serialized_invocation_args is not JSON: Expecting value: line '
     r'1 column 12 \(char 11\)'),
    ('invocation a list',
     lambda t: _with_value(_step_argv(t), _INVOCATION, '[]'),
     r'--json_serialized_invocation_args is not a JSON object \(an '
     r'ExecutorInput\): it is a list'),
    ('inputs a list', lambda t: _step_argv(t, _set(['inputs'], [])),
     '--json_serialized_invocation_args: inputs is not a JSON object: it is '
     'a list'),
    ('artifacts of an input a string',
     lambda t: _step_argv(t, _set(['inputs', 'artifacts', 'examples'], 'x')),
     r"--json_serialized_invocation_args: inputs\.artifacts\['examples'\] "
     'is not a JSON object: it is a str'),
    ('artifact type a string',
     lambda t: _step_argv(t, _set(_EXAMPLE + ['type'], 'tfx.Examples')),
     r"--json_serialized_invocation_args: inputs\.artifacts\['examples'\]"
     r'\.artifacts\[0\]\.type is not a JSON object: it is a str'),
    ('metadata a string',
     lambda t: _step_argv(t, _set(_EXAMPLE + ['metadata'], 'x')),
     '--json_serialized_invocation_args is not an ExecutorInput: Failed to '
     'parse inputs field'),
    ('instance schema not YAML',
     lambda t: _step_argv(t, _set(_EXAMPLE + ['type'],
                                  {'instanceSchema': 'title: [unclosed'})),
     "--json_serialized_invocation_args: input artifact 'examples': its "
     'instanceSchema is not YAML'),
    ('type title unknown',
     lambda t: _step_argv(t, _set(_EXAMPLE + ['type'],
                                  {'schemaTitle': 'tfx.NoSuchType'})),
     "--json_serialized_invocation_args: input artifact 'examples': type "
     "'tfx.NoSuchType' names no artifact class"),
    ('no type anywhere',
     lambda t: _with_value(_step_argv(t, _set(_EXAMPLE + ['type'], {})),
                           _SPEC, '{}'),
     "Input artifact 'examples' has no type in "
     '--json_serialized_invocation_args and '
     '--json_serialized_inputs_spec_args does not declare it'),
    ('output file missing',
     lambda t: _step_argv(t, _set(['outputs'], {})),
     '--json_serialized_invocation_args: outputs.outputFile is missing'),
    ('driver output not JSON',
     lambda t: _step_argv(t),
     '--json_serialized_invocation_args: outputs.outputFile .*output.json '
     r"\(written by the step's driver\) is not an ExecutorOutput"),
    ('inputs spec not JSON',
     lambda t: _with_value(_step_argv(t), _SPEC, 'artifacts:'),
     '--json_serialized_inputs_spec_args is not JSON: Expecting value'),
    ('inputs spec artifacts a list',
     lambda t: _with_value(_step_argv(t), _SPEC, '{"artifacts": []}'),
     '--json_serialized_inputs_spec_args is not a ComponentInputsSpec: '
     'Failed to parse artifacts field'),
    ('parameter without a value',
     lambda t: _step_argv(t, _set(['inputs', 'parameters'],
                                  {'train_args': {}}), inputs_spec=False),
     "--json_serialized_invocation_args: exec property 'train_args' has no "
     'value'),
]


@pytest.mark.parametrize('case,argv_of,message', _MALFORMED,
                         ids=[case for case, _, _ in _MALFORMED])
def test_a_malformed_executor_input_is_one_line_naming_the_argument(
    tmp_path, capfd, case, argv_of, message):
  argv = argv_of(tmp_path)
  if case == 'driver output not JSON':
    (tmp_path / 'task').mkdir()
    (tmp_path / 'task' / 'output.json').write_text('{"parameterValues": ')
  with pytest.raises(SystemExit) as exit_info:
    v2_step.run(argv)
  assert exit_info.value.code == v2_step.EXIT_BAD_INPUT
  lines = capfd.readouterr().err.strip().splitlines()
  assert lines and re.match(rf'{v2_step.STEP_ENTRYPOINT}: {message}',
                            lines[-1]), lines
  assert 'Traceback' not in '\n'.join(lines)
  assert len([line for line in lines
              if line.startswith(v2_step.STEP_ENTRYPOINT)]) == 1


def test_the_step_process_prints_one_line_and_exits(tmp_path):
  argv = _with_value(_step_argv(tmp_path), _INVOCATION, '{"inputs": ')
  process = subprocess.run(
      [sys.executable, '-m', v2_step.STEP_ENTRYPOINT, *argv[1:]],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)
  assert process.returncode == v2_step.EXIT_BAD_INPUT, process.stderr
  assert process.stderr.strip().splitlines() == [
      f'{v2_step.STEP_ENTRYPOINT}: --json_serialized_invocation_args is not '
      'JSON: Expecting value: line 1 column 12 (char 11); the KFP launcher '
      'writes it from the compiled pipeline spec: compile the pipeline again '
      'with this image (tfx-tpu-trainer compile).'], process.stderr


class WritingExecutor(base_executor.BaseExecutor):
  """Writes its exec properties into its `out` artifact (a valid step)."""

  def Do(self, input_dict, output_dict, exec_properties):
    [out] = output_dict['out']
    os.makedirs(out.uri, exist_ok=True)
    with open(os.path.join(out.uri, 'exec_properties.json'), 'w') as f:
      json.dump({'properties': exec_properties,
                 'examples': input_dict['examples'][0].uri}, f)


def _with_output(executor_input, tmp_path):
  executor_input['outputs']['artifacts'] = {'out': {'artifacts': [{
      'name': 'out', 'type': {'schemaTitle': 'tfx.Examples'},
      'uri': str(tmp_path / 'out')}]}}


def test_a_valid_step_runs_its_executor(tmp_path):
  argv = _step_argv(tmp_path, lambda e: _with_output(e, tmp_path),
                    executor_class=f'{__name__}.WritingExecutor')
  process = subprocess.run(
      [sys.executable, '-m', v2_step.STEP_ENTRYPOINT, *argv[1:]],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)
  assert process.returncode == 0, process.stderr[-3000:]
  written = json.loads((tmp_path / 'out' / 'exec_properties.json').read_text())
  assert written == {'properties': {'custom_config': '{}'},
                     'examples': '/root/Transform/examples/5'}
  assert (tmp_path / 'task' / 'output.json').exists()


def test_the_step_log_masks_a_token_in_exec_properties(tmp_path):
  # TFX's v2 entrypoint logs the exec properties (custom_config's JSON)
  # before the executor runs; Beam logs the args it discards.
  def edit(executor_input):
    _with_output(executor_input, tmp_path)
    executor_input['inputs']['parameterValues']['custom_config'] = (
        '{"params": {"api_token": "TOKEN-VALUE"}}')
  argv = _step_argv(tmp_path, edit,
                    executor_class=f'{__name__}.WritingExecutor')
  process = subprocess.run(
      [sys.executable, '-m', v2_step.STEP_ENTRYPOINT, *argv[1:],
       '--some_token=BEAM-TOKEN'],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)
  assert process.returncode == 0, process.stderr[-3000:]
  output = process.stdout + process.stderr
  assert 'exec_properties' in output, output[-3000:]
  assert 'TOKEN-VALUE' not in output and 'BEAM-TOKEN' not in output, output
  assert '\\"api_token\\": \\"***\\"' in output or '"api_token": "***"' in output
  # The executor itself gets the real value.
  written = json.loads((tmp_path / 'out' / 'exec_properties.json').read_text())
  assert 'TOKEN-VALUE' in written['properties']['custom_config']
