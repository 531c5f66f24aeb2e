"""`--beam-arg`: each value is one option Beam accepts, the runner resolved
by Beam's own rule; the help shows a form argparse accepts; the Beam args
reach exactly the components that run Beam, in v1 and in v2."""

import json
import os
import re

import pytest
import yaml

from tfx_tpu_trainer.beam import pipeline_args
from tfx_tpu_trainer_cli import main as cli

from tests.fixtures import cli_exit

PIPELINE_ROOT = 'gs://test-bucket/tfx/taxi_tpu'
DATA_ROOT = 'gs://test-bucket/data/taxi'
DATAFLOW_NEEDS = (' needs --beam-arg=--region=..., --beam-arg=--temp_location'
                  '=... (and usually --beam-arg=--sdk_container_image=<the '
                  '--image>, so the workers have TFX and this package).')
# ExampleGen, StatisticsGen, Transform and Evaluator run Beam (their
# executors are BeamExecutorSpecs); SchemaGen, ExampleValidator, the
# trainer and Pusher do not.
BEAM_STEPS_V1 = {'csvexamplegen', 'statisticsgen', 'transform', 'evaluator'}
BEAM_EXECUTORS_V2 = {'CsvExampleGen_executor', 'StatisticsGen_executor',
                     'Transform_executor', 'Evaluator_executor'}


@pytest.mark.parametrize('argv,message', [
    (['--beam-arg=--runner=Dataflow', '--beam-arg=--project=p'],
     '--beam-arg=--runner=Dataflow (the DataflowRunner)' + DATAFLOW_NEEDS),
    (['--beam-arg=--runner=dataflowrunner', '--beam-arg=--project=p'],
     '--beam-arg=--runner=dataflowrunner (the DataflowRunner)' +
     DATAFLOW_NEEDS),
    (['--beam-arg=--runner=DirectRunner --project=p'],
     "--beam-arg '--runner=DirectRunner --project=p' holds more than one "
     'option; give one per --beam-arg (e.g. --beam-arg=--runner=DirectRunner '
     '--beam-arg=--project=p).'),
    (['--beam-arg=--runner=NoSuchRunner'],
     '--beam-arg=--runner=NoSuchRunner: Beam knows no such runner (Unexpected '
     'pipeline runner: NoSuchRunner. Valid values are DataflowRunner,'),
    (['--beam-arg', '--runner=DirectRunner'],
     'argument --beam-arg: expected one argument'),
])
def test_beam_arg_holes_exit_2_and_write_nothing(tmp_path, capsys, argv,
                                                 message):
  output_dir = tmp_path / 'out'
  code = cli_exit.exit_code(['compile', '--pipeline-root', PIPELINE_ROOT,
                     '--data-root', DATA_ROOT, '--output-dir',
                     str(output_dir)] + argv)
  assert code == 2
  assert message in capsys.readouterr().err
  assert not output_dir.exists()


def test_directrunner_in_any_case_keeps_the_multi_processing_defaults():
  for name in ('directrunner', 'direct', 'DirectRunner'):
    assert pipeline_args.merged([f'--runner={name}']) == [
        '--direct_running_mode=multi_processing', '--direct_num_workers=0',
        f'--runner={name}'], name
  assert pipeline_args.merged(['--runner=dataflow', '--project=p']) == [
      '--runner=dataflow', '--project=p']


def test_beam_args_defaults_and_overrides():
  assert pipeline_args.merged([]) == [
      '--direct_running_mode=multi_processing', '--direct_num_workers=0']
  assert pipeline_args.merged(
      ['--direct_running_mode=in_memory']) == [
          '--direct_num_workers=0', '--direct_running_mode=in_memory']
  assert pipeline_args.merged(
      ['--runner=DirectRunner', '--direct_num_workers=2']) == [
          '--direct_running_mode=multi_processing', '--runner=DirectRunner',
          '--direct_num_workers=2']
  assert pipeline_args.merged(
      ['--runner=FlinkRunner', '--flink_master=host:8081']) == [
          '--runner=FlinkRunner', '--flink_master=host:8081']


def test_a_later_argument_replaces_an_earlier_one_of_its_name():
  # As a local run merges them: the pipeline's own, then --beam-arg, no
  # cluster defaults.
  assert pipeline_args.merged(
      ['--direct_num_workers=2'],
      existing=['--direct_num_workers=1', '--runner=DirectRunner'],
      defaults=()) == ['--runner=DirectRunner', '--direct_num_workers=2']


def test_help_shows_the_form_argparse_accepts(capsys):
  assert cli_exit.exit_code(['compile', '--help']) == 0
  help_text = capsys.readouterr().out
  assert '--beam-arg --NAME=VALUE' not in help_text
  # Lines break between words only (never at a hyphen).
  joined = re.sub(r'\s+', ' ', help_text)
  assert 'written --beam-arg=--NAME=VALUE' in joined
  assert 'SchemaGen, ExampleValidator, the trainer and Pusher run none' in (
      joined)


def _compile(tmp_path, *argv):
  assert cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--output-dir', str(tmp_path), '--no-use-tpu',
                   '--beam-arg=--runner=directrunner'] + list(argv)) == 0
  return {f: os.path.join(tmp_path, f) for f in os.listdir(tmp_path)}


def test_v1_beam_args_reach_exactly_the_beam_components(tmp_path):
  from tfx_tpu_trainer.kubeflow import compiled_files  # pylint: disable=g-import-not-at-top
  (path,) = _compile(tmp_path).values()
  workflow = compiled_files.read_argo_workflow(path)
  with_args = set()
  for template in workflow['spec']['templates']:
    if 'container' not in template:
      continue
    args = template['container']['args']
    ir = json.loads(args[args.index('--tfx_ir') + 1])
    if '--runner=directrunner' in json.dumps(ir['deploymentConfig']):
      with_args.add(template['name'])
      # directrunner is the DirectRunner: the defaults stay.
      assert '--direct_running_mode=multi_processing' in json.dumps(
          ir['deploymentConfig'])
  assert with_args == BEAM_STEPS_V1


def test_v2_beam_args_reach_exactly_the_beam_components(tmp_path):
  files = _compile(tmp_path, '--runner', 'kubeflow_v2')
  spec_path = [p for p in files.values() if p.endswith('.yaml')][0]
  job_path = [p for p in files.values() if p.endswith('.json')][0]
  with open(spec_path) as f:
    spec = next(yaml.safe_load_all(f))
  with open(job_path) as f:
    job_spec = json.load(f)['pipelineSpec']
  for document in (spec, job_spec):
    executors = document['deploymentSpec']['executors']
    with_args = {name for name, e in executors.items()
                 if '--runner=directrunner' in e['container']['args']}
    assert with_args == BEAM_EXECUTORS_V2
    trainer_args = executors['TPUTrainer_executor']['container']['args']
    assert not any(a.startswith('--direct_') for a in trainer_args)
