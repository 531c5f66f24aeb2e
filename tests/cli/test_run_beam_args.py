"""`run --beam-arg`: the local run's data steps on the user's Beam engine,
checked up front by the compile's checks, for a run on this machine."""

import os

import pytest

from tests.fixtures import cli_exit


PORTABLE = ('--beam-arg=--runner=PortableRunner',
            '--beam-arg=--job_endpoint=localhost:8099')


@pytest.mark.parametrize('argv,message', [
    (['--beam-arg=--runner=PortableRunner'],
     '--runner=PortableRunner needs --beam-arg=--job_endpoint=HOST:PORT'),
    (list(PORTABLE) + ['--beam-arg=--environment_type=EXTERNAL'],
     'Option external_service_address is required for environment type '
     'EXTERNAL.'),
    (list(PORTABLE) + ['--beam-arg=--environment-type=LOOPBACK'],
     "Beam reads --environment_type (underscores) and would discard "
     '--environment-type: write --beam-arg=--environment_type=LOOPBACK.'),
    # Beam's DOCKER default: containers that cannot see the local outputs.
    (list(PORTABLE),
     '--environment_type=DOCKER (Beam\'s default for these options) starts '
     'the workers where they cannot see this run\'s files under '),
    (list(PORTABLE) + ['--beam-arg=--environment_type=EXTERNAL',
                       '--beam-arg=--environment_config=pool.example:50000'],
     'for a local run use --beam-arg=--environment_type=LOOPBACK'),
    (['--beam-arg=--runner=FlinkRunner',
      '--beam-arg=--flink_version=1.14'],
     "argument --flink_version: invalid choice: '1.14'"),
])
def test_run_refuses_a_beam_set_it_cannot_run_before_any_component(
    tmp_path, capsys, argv, message):
  output_root = tmp_path / 'out'
  code = cli_exit.exit_code(['run', '--output-root', str(output_root)] + argv)
  assert code == 2
  err = capsys.readouterr().err
  assert 'tfx-tpu-trainer run: error: --beam-arg' in err, err
  assert message in err, err
  assert not os.path.exists(output_root / 'pipelines')


def test_run_beam_args_are_merged_after_the_pipeline_s_own(tmp_path):
  from tfx_tpu_trainer_cli import run  # pylint: disable=g-import-not-at-top
  values = [v.split('=', 1)[1] for v in PORTABLE] + [
      '--environment_type=LOOPBACK']
  # The job may outlive Beam's 60 s job_server_timeout (beam_runners.py).
  timeout = ['--job_server_timeout=86400']
  assert run._beam_args(values, str(tmp_path), ask_services=False) == values + timeout  # pylint: disable=protected-access
  # A later value replaces an earlier one of the same name.
  assert run._beam_args(values, str(tmp_path), existing=[  # pylint: disable=protected-access
      '--runner=DirectRunner', '--direct_num_workers=2'],
                        ask_services=False) == [
          '--direct_num_workers=2'] + values + timeout
  # One given is kept.
  given = values + ['--job_server_timeout=600']
  assert run._beam_args(given, str(tmp_path), ask_services=False) == given  # pylint: disable=protected-access
