"""`--beam-arg` sets for Flink, Spark, the portable runner and Dataflow,
checked at compile as Beam 2.59 parses them; valid sets compile unchanged."""

import json
import socket

import pytest

from tests.fixtures import beam_jobs
from tfx_tpu_trainer.kubeflow import beam_args
from tfx_tpu_trainer.kubeflow import beam_runners
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer_cli import main as cli

PIPELINE_ROOT = 'gs://test-bucket/tfx/taxi_tpu'
DATA_ROOT = 'gs://test-bucket/data/taxi'
FLINK = ('--beam-arg=--runner=FlinkRunner',
         '--beam-arg=--job_endpoint=flink-beam-jobserver:8099')
WORKER_POOL = ('--beam-arg=--environment_type=EXTERNAL',
               '--beam-arg=--environment_config=localhost:50000')
JOB_SERVER = ('--beam-arg=--job_endpoint=HOST:PORT (the Beam job server your '
              'cluster runs, e.g. the Flink job server Service')


def _compile(tmp_path, argv, pipeline_root=PIPELINE_ROOT):
  output_dir = tmp_path / 'out'
  try:
    code = cli.main(['compile', '--pipeline-root', pipeline_root,
                     '--data-root', DATA_ROOT, '--output-dir',
                     str(output_dir), '--no-use-tpu'] + list(argv))
  except SystemExit as e:
    code = e.code
  return code, output_dir


@pytest.mark.parametrize('argv,message', [
    (['--beam-arg=--runner=PortableRunner'],
     '--runner=PortableRunner needs ' + JOB_SERVER + '; Beam: "You must '
     'specify a --job_endpoint when using --runner=PortableRunner").'),
    (['--beam-arg=--runner=portable'],
     '--runner=PortableRunner needs --beam-arg=--job_endpoint'),
    (['--beam-arg=--runner=FlinkRunner',
      '--beam-arg=--flink_master=http://flink-jobmanager:8081'],
     '--runner=FlinkRunner without --job_endpoint makes Beam start its Java '
     'Flink job server here, and the step\'s image has no Java: give ' +
     JOB_SERVER + '), or --beam-arg=--flink_submit_uber_jar with '
     '--beam-arg=--flink_master=http://JOBMANAGER:8081.'),
    (['--beam-arg=--runner=SparkRunner',
      '--beam-arg=--spark_master_url=spark://spark-master:7077'],
     '--runner=SparkRunner without --job_endpoint makes Beam start its Java '
     'Spark job server here'),
    (['--beam-arg=--runner=SparkRunner', '--beam-arg=--spark_submit_uber_jar'],
     '--spark_submit_uber_jar needs --beam-arg=--spark_rest_url=http://HOST:'
     '6066'),
    (list(FLINK) + ['--beam-arg=--flink_version=1.19'],
     "argument --flink_version: invalid choice: '1.19' (choose from '1.15', "
     "'1.16', '1.17', '1.18')"),
    (list(FLINK) + ['--beam-arg=--flink_master=flink jobmanager'],
     '--flink_master=flink jobmanager is not [auto], [local] or '
     'http://HOST:PORT'),
    (['--beam-arg=--runner=SparkRunner', '--beam-arg=--job_endpoint=js:8099',
      '--beam-arg=--spark_master_url=spark-master'],
     '--spark_master_url=spark-master is not a Spark master URL'),
    (['--beam-arg=--runner=PortableRunner', '--beam-arg=--job_endpoint=js'],
     '--job_endpoint=js is not HOST:PORT'),
    (['--beam-arg=--runner=PortableRunner',
      '--beam-arg=--job_endpoint=localhost:8099'],
     '--job_endpoint=localhost:8099: no job server runs inside the step\'s '
     'pod; give ' + JOB_SERVER),
    (['--beam-arg=--runner=PortableRunner', '--beam-arg=--job_endpoint=embed'],
     '--job_endpoint=embed runs the job server and its work inside the '
     'step\'s pod'),
    (list(FLINK) + ['--beam-arg=--environment_type=LOOPBACK'],
     '--environment_type=LOOPBACK runs the Beam workers inside the step\'s '
     'pod, where the cluster\'s task managers cannot reach them: use '
     '--beam-arg=--environment_type=EXTERNAL with --beam-arg='
     '--environment_config=localhost:50000'),
    (list(FLINK) + ['--beam-arg=--environment_type=EXTERNAL'],
     '--environment_type=EXTERNAL: Option external_service_address is '
     'required for environment type EXTERNAL.'),
    (list(FLINK) + ['--beam-arg=--environment_type=EXTERNAL',
                    '--beam-arg=--environment_config=worker-pool'],
     "the worker pool address 'worker-pool' is not HOST:PORT"),
    (list(FLINK) + ['--beam-arg=--environment_type=PROCESS'],
     '--environment_type=PROCESS: Option process_command is required for '
     'environment type PROCESS.'),
    (list(FLINK) + ['--beam-arg=--environment_type=docker'],
     '--environment_type=docker: Beam knows no such environment (it reads '
     'the name as written): write DOCKER.'),
    (list(FLINK) + ['--beam-arg=--environment_type=EXTERNAL',
                    '--beam-arg=--environment_config=localhost:50000',
                    '--beam-arg=--environment_option=external_service_address'
                    '=localhost:50000'],
     'Option environment_config is incompatible with option(s) '
     'external_service_address.'),
    (list(FLINK) + list(WORKER_POOL) + ['--beam-arg=--temp_location=/tmp/x'],
     "--beam-arg=--temp_location '/tmp/x' is on the disk of one pod; the "
     'FlinkRunner\'s workers write and read the data steps\' files there'),
    # Dataflow, as Beam's own GoogleCloudOptions checks read it.
    (['--beam-arg=--runner=DataflowRunner', '--beam-arg=--project=my-project',
      '--beam-arg=--region=us-central1',
      '--beam-arg=--temp-location=gs://my-bucket/tmp'],
     "--beam-arg '--temp-location=gs://my-bucket/tmp': Beam reads "
     '--temp_location (underscores) and would discard --temp-location: write '
     '--beam-arg=--temp_location=gs://my-bucket/tmp.'),
    (['--beam-arg=--runner=DataflowRunner', '--beam-arg=--project=my-project',
      '--beam-arg=--region=us-central1', '--beam-arg=--temp_location=/tmp/x'],
     'the DataflowRunner needs a gs://BUCKET/PATH for --temp_location or '
     '--staging_location (Beam: Invalid GCS path (/tmp/x), given for the '
     'option: temp_location.'),
    (['--beam-arg=--runner=DataflowRunner', '--beam-arg=--project=12345',
      '--beam-arg=--region=us-central1',
      '--beam-arg=--temp_location=gs://my-bucket/tmp'],
     'the DataflowRunner: Invalid Project ID (12345). Please make sure you '
     'specified the Project ID, not project number.'),
])
def test_refusals_name_the_option_and_the_fix(tmp_path, capsys, argv,
                                              message):
  code, output_dir = _compile(tmp_path, argv)
  assert code == 2
  assert message in capsys.readouterr().err
  assert not output_dir.exists()


def test_a_pipeline_root_on_the_pods_disk_is_refused_for_flink(tmp_path,
                                                                capsys):
  root = '/tfx/pipelines/taxi'
  code, output_dir = _compile(tmp_path, list(FLINK) + list(WORKER_POOL),
                              pipeline_root=root)
  assert code == 2
  assert (f"the pipeline root '{root}' is on the disk of one pod; the "
          'FlinkRunner\'s workers write and read the data steps\' files there: '
          'use a filesystem every worker reaches (gs://BUCKET/PATH, s3://, '
          'hdfs://).') in capsys.readouterr().err
  assert not output_dir.exists()


def _beam_args_of_steps(output_dir):
  """Component id -> the Beam args its compiled (v1) step runs with."""
  from tfx_tpu_trainer.kubeflow import compiled_files  # pylint: disable=g-import-not-at-top
  (name,) = [p.name for p in output_dir.iterdir()]
  workflow = compiled_files.read_argo_workflow(str(output_dir / name))
  steps = {}
  for template in workflow['spec']['templates']:
    if 'container' not in template:
      continue
    args = template['container']['args']
    ir = json.loads(args[args.index('--tfx_ir') + 1])
    config = json.dumps(ir['deploymentConfig'])
    if '--runner=' in config:
      steps[template['name']] = config
  return steps


@pytest.mark.parametrize('argv,added', [
    # The Flink operator's worker pool sidecar.
    (list(FLINK) + list(WORKER_POOL), []),
    (list(FLINK) + ['--beam-arg=--environment_type=PROCESS',
                    '--beam-arg=--environment_option=process_command='
                    '/opt/apache/beam/boot'], []),
    # No environment: DOCKER with the pipeline's image, not Beam's SDK image.
    (['--beam-arg=--runner=SparkRunner', '--beam-arg=--job_endpoint='
      'spark-beam-jobserver.spark:8099'],
     ['--environment_type=DOCKER',
      f'--environment_config={compiler.DEFAULT_IMAGE}']),
    (['--beam-arg=--runner=PortableRunner', '--beam-arg=--job_endpoint='
      '10.0.0.7:8099', '--beam-arg=--environment_type=DOCKER'],
     [f'--environment_config={compiler.DEFAULT_IMAGE}']),
    (['--beam-arg=--runner=FlinkRunner', '--beam-arg=--flink_submit_uber_jar',
      '--beam-arg=--flink_master=http://flink-jobmanager:8081',
      '--beam-arg=--flink_version=1.17'] + list(WORKER_POOL), []),
    # Beam takes the staging location for the temp location too.
    (['--beam-arg=--runner=DataflowRunner', '--beam-arg=--project=my-project',
      '--beam-arg=--region=us-central1',
      '--beam-arg=--staging_location=gs://my-bucket/staging'], []),
])
def test_valid_sets_compile_unchanged(tmp_path, argv, added):
  code, output_dir = _compile(tmp_path, argv)
  assert code == 0
  given = [a.split('=', 1)[1] for a in argv]
  if 'Dataflow' not in argv[0]:  # The workers' image holds TFX.
    added = added + [f'--sdk_container_image={compiler.DEFAULT_IMAGE}']
  steps = _beam_args_of_steps(output_dir)
  assert set(steps) == {'csvexamplegen', 'statisticsgen', 'transform',
                        'evaluator'}
  for config in steps.values():
    for arg in given + added:
      assert json.dumps(arg)[1:-1] in config
    assert '--direct_running_mode' not in config
    if not any(a.startswith('--environment_config') for a in added):
      assert '--environment_config=' + compiler.DEFAULT_IMAGE not in config


def test_the_check_reads_options_as_beam_parses_them():
  # `--job-server-timeout` is Beam's own second spelling; a flag whose dest
  # differs from its name is a Beam option too.
  assert beam_args.validate(['--job-server-timeout=5',
                             '--no_direct_runner_use_stacked_bundle']) == [
                                 '--job-server-timeout=5',
                                 '--no_direct_runner_use_stacked_bundle']
  parsed = beam_runners.options(['--temp-location=gs://b/t'])
  assert parsed.get_all_options(drop_default=True) == {}


def test_a_local_run_may_loop_back_and_use_localhost():
  values = ['--runner=PortableRunner', '--job_endpoint=localhost:8099',
            '--environment_type=LOOPBACK']
  assert beam_args.validate(values, on_cluster=False) == values
  with pytest.raises(beam_args.BeamArgError, match='LOOPBACK|localhost'):
    beam_args.validate(values)
  embed = ['--runner=PortableRunner', '--job_endpoint=embed']
  assert beam_args.validate(embed, on_cluster=False) == embed


def _portable(endpoint, *more):
  return ['--runner=PortableRunner', f'--job_endpoint={endpoint}',
          '--environment_type=LOOPBACK', *more]


def test_a_job_server_that_is_not_there_is_named_with_how_to_start_one():
  port = beam_jobs.free_port()  # Nothing listens on it.
  with pytest.raises(beam_args.BeamArgError) as e:
    beam_runners.check_services_answer(_portable(f'localhost:{port}'))
  assert str(e.value) == (
      f'--beam-arg: no Beam job server answers at localhost:{port} '
      f'(--job_endpoint=localhost:{port}): the connection was refused '
      '(nothing listens on that port). Start Beam\'s own job server: python '
      '-m apache_beam.runners.portability.local_job_service_main --port '
      f'{port} (docs/guide/your_pipeline.md, "Another Beam runner for the '
      'local run"), or drop --beam-arg=--runner for the DirectRunner.')


def test_a_job_server_name_that_does_not_resolve_is_named():
  with pytest.raises(beam_args.BeamArgError,
                     match=r'no Beam job server answers at '
                     r'no-such-host\.invalid:8099 .*: the name does not '
                     'resolve'):
    beam_runners.check_services_answer(_portable('no-such-host.invalid:8099'))


def test_a_port_that_is_no_grpc_server_is_named():
  with socket.socket() as listener:  # Accepts, and never speaks HTTP/2.
    listener.bind(('localhost', 0))
    listener.listen()
    port = listener.getsockname()[1]
    with pytest.raises(beam_args.BeamArgError,
                       match=f'no Beam job server answers at localhost:{port}'
                       r'.*: the port accepts connections, but no gRPC '
                       'server answered within 1 s'):
      beam_runners.check_services_answer(_portable(f'localhost:{port}'),
                                         timeout_secs=1)


def test_a_running_job_server_and_worker_pool_answer(tmp_path):
  pool_port = beam_jobs.free_port()
  with beam_jobs.job_server(str(tmp_path)) as endpoint:
    external = ['--runner=PortableRunner', f'--job_endpoint={endpoint}',
                '--environment_type=EXTERNAL',
                f'--environment_config=localhost:{pool_port}']
    with pytest.raises(beam_args.BeamArgError,
                       match='no Beam worker pool answers at '
                       f'localhost:{pool_port}.*Start one: python -m '
                       'apache_beam.runners.worker.worker_pool_main '
                       f'--service_port={pool_port}'):
      beam_runners.check_services_answer(external)
    pool_log = str(tmp_path / 'pool.log')
    with beam_jobs.started([beam_jobs.WORKER_POOL_MODULE,
                            f'--service_port={pool_port}'], str(tmp_path),
                           pool_log) as pool:
      beam_jobs.wait(pool, beam_jobs.accepts(pool_port), pool_log)
      beam_runners.check_services_answer(_portable(endpoint))
      beam_runners.check_services_answer(external)


@pytest.mark.parametrize('values', [
    [], ['--direct_num_workers=2'], ['--runner=DirectRunner'],
    ['--runner=PortableRunner', '--job_endpoint=embed'],
    ['--runner=DataflowRunner', '--project=p', '--region=r',
     '--temp_location=gs://b/t']])
def test_nothing_to_ask_without_a_job_server_of_its_own(values):
  beam_runners.check_services_answer(values)


@pytest.mark.parametrize('values,added', [
    (['--runner=PortableRunner', '--job_endpoint=localhost:8099'],
     ['--job_server_timeout=86400']),
    (['--runner=FlinkRunner', '--job_endpoint=flink:8099'],
     ['--job_server_timeout=86400']),
    (['--runner=PortableRunner', '--job_endpoint=embed'],
     ['--job_server_timeout=86400']),
    (['--runner=PortableRunner', '--job_endpoint=js:8099',
      '--job-server-timeout=600'], []),
    (['--runner=DirectRunner'], []),
    (['--runner=DataflowRunner'], []),
    ([], []),
])
def test_a_portable_job_may_outlive_beam_s_minute(values, added):
  """Beam 2.59 puts --job_server_timeout (60 s) on the job's state stream:
  a job on a job server that runs longer fails with DEADLINE_EXCEEDED."""
  assert beam_runners.job_defaults(values) == added


def test_a_compiled_flink_step_may_outlive_beam_s_minute(tmp_path):
  code, output_dir = _compile(tmp_path, FLINK + WORKER_POOL)
  assert code == 0
  for config in _beam_args_of_steps(output_dir).values():
    assert '--job_server_timeout=86400' in config
