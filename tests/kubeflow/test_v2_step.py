"""kubeflow/v2_step: a KFP v2 step's inputs typed where the backend left
them blank, parsed by TFX's own v2 entrypoint."""

import json

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pipeline_pb2
import pytest
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor
from tfx.types import standard_artifacts

from tfx_tpu_trainer.kubeflow import v2_metrics
from tfx_tpu_trainer.kubeflow import v2_step


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
