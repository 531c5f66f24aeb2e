"""What each Beam runner needs, checked on the options as Beam 2.59 parses them."""

import re
import shutil
import socket
from typing import Any, List, Optional, Sequence

from tfx_tpu_trainer.kubeflow import beam_args as beam_args_lib

__all__ = ['PORTABLE_RUNNERS', 'ENVIRONMENT_TYPES', 'ANSWER_TIMEOUT_SECS',
           'JOB_SERVER_COMMAND', 'WORKER_POOL_COMMAND',
           'JOB_SERVER_TIMEOUT_SECS', 'options', 'check',
           'check_services_answer', 'job_defaults', 'cluster_defaults']

# Beam's portable runners (runners/portability): FlinkRunner and SparkRunner
# are PortableRunners that can start their own Java job server.

PORTABLE_RUNNERS = ('PortableRunner', 'FlinkRunner', 'SparkRunner')
# What `Environment.from_options` accepts by name (it is case-sensitive).
ENVIRONMENT_TYPES = ('DOCKER', 'PROCESS', 'EXTERNAL', 'LOOPBACK')
# A path every worker of a cluster reaches: a filesystem Beam opens by scheme.
_SHARED_SCHEME = re.compile(r'^(gs|s3|hdfs|abfss?|wasbs?|az)://[^/]+', re.I)
_HOST_PORT = re.compile(r'^(dns:///)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+):'
                        r'(\d{1,5})$')
_LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]', '0.0.0.0')
_FLINK_MASTER = re.compile(r'^(https?://)?[A-Za-z0-9_.-]+(:\d{1,5})?/?$')
_SPARK_MASTER = re.compile(
    r'^(local(\[.+\])?|spark://[A-Za-z0-9_.,:-]+|k8s://\S+|yarn|mesos://\S+)$')
_JOB_SERVER = ('--beam-arg=--job_endpoint=HOST:PORT (the Beam job server '
               'your cluster runs, e.g. the Flink job server Service')
# How long a job server or worker pool named for a run here may take to
# answer (one on this machine answers in milliseconds).
ANSWER_TIMEOUT_SECS = 10.0
# Beam's own job server and worker pool, in Python (no Java, no Docker).
JOB_SERVER_COMMAND = ('python -m apache_beam.runners.portability.'
                      'local_job_service_main --port {port}')
WORKER_POOL_COMMAND = ('python -m apache_beam.runners.worker.'
                       'worker_pool_main --service_port={port}')
# Beam 2.59's portable runners make --job_server_timeout (default 60 s) the
# deadline of the job's state and message streams too, not only of its
# requests (portable_runner.py, JobServiceHandle.run): a Beam job that runs
# longer fails with DEADLINE_EXCEEDED ("Stream removed"). A day, unless given.
JOB_SERVER_TIMEOUT_SECS = 86400
_WORKERS = (
    'use --beam-arg=--environment_type=EXTERNAL with '
    '--beam-arg=--environment_config=localhost:50000 (a Beam worker pool '
    'beside each task manager, the Flink operator\'s sidecar), DOCKER with '
    'the pipeline image (the default here), or PROCESS')


def options(values: Sequence[str]) -> Any:
  """Beam's `PipelineOptions` of `values`, as Beam's runners read them."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  return pipeline_options.PipelineOptions(list(values))


def _error(message: str) -> beam_args_lib.BeamArgError:
  return beam_args_lib.BeamArgError('--beam-arg: ' + message)


def check(values: Sequence[Any], on_cluster: bool = True,
          pipeline_root: Optional[str] = None) -> None:
  """Refuses a `--beam-arg` set its runner cannot run as given.

  `values` are already single, known options (`beam_args.validate`);
  placeholders (not strings) are skipped.

  Args:
    values: the Beam arguments, later ones replacing earlier ones.
    on_cluster: the data steps run in Kubeflow pods (compile), not here.
    pipeline_root: where the artifacts go; checked for a non-Direct runner.

  Raises:
    BeamArgError: naming the option and what to write instead.
  """
  values = [v for v in values if isinstance(v, str)]
  given = beam_args_lib.runner(values)
  if given is None:
    return
  runner = beam_args_lib.runner_class_name(given)
  if runner == beam_args_lib.DIRECT_RUNNER:
    return
  parsed = options(values)
  if runner == beam_args_lib.DATAFLOW_RUNNER:
    _check_dataflow(parsed, given)
  elif runner in PORTABLE_RUNNERS:
    _check_portable(parsed, runner, on_cluster)
  if on_cluster:
    _check_shared_paths(parsed, runner, pipeline_root)
  elif runner in PORTABLE_RUNNERS and pipeline_root is not None:
    _check_local_workers(parsed, runner, pipeline_root)


def _check_dataflow(parsed: Any, given: str) -> None:
  """Beam's own GoogleCloudOptions checks, without its default-bucket call."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  from apache_beam.options import pipeline_options_validator  # pylint: disable=g-import-not-at-top
  cloud = parsed.view_as(pipeline_options.GoogleCloudOptions)
  missing = [n for n in ('project', 'region') if getattr(cloud, n) is None]
  validator = pipeline_options_validator.PipelineOptionsValidator(parsed, None)
  temp_errors = validator.validate_gcs_path(cloud, 'temp_location')
  staging_errors = validator.validate_gcs_path(cloud, 'staging_location')
  if cloud.temp_location is None and cloud.staging_location is None:
    missing.append('temp_location')
  if missing:
    raise beam_args_lib.BeamArgError(
        f'--beam-arg=--runner={given} (the DataflowRunner) needs ' +
        ', '.join(f'--beam-arg=--{n}=...' for n in missing) + ' (and '
        'usually --beam-arg=--sdk_container_image=<the --image>, so the '
        'workers have TFX and this package).')
  if temp_errors and staging_errors:
    # Beam takes either one for both; with neither it would create a bucket.
    raise _error(
        f'the DataflowRunner needs a gs://BUCKET/PATH for --temp_location or '
        f'--staging_location (Beam: {" ".join(temp_errors + staging_errors)}'
        ').')
  errors = validator.validate_cloud_options(cloud)
  if errors:
    raise _error(f'the DataflowRunner: {" ".join(errors)}')


def _check_portable(parsed: Any, runner: str, on_cluster: bool) -> None:
  """The job server and the worker environment of a portable runner."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  portable = parsed.view_as(pipeline_options.PortableOptions)
  _check_job_server(parsed, runner, on_cluster)
  environment = portable.environment_type
  if environment is not None and not environment.startswith('beam:env:'):
    if environment not in ENVIRONMENT_TYPES:
      fix = (f'write {environment.upper()}'
             if environment.upper() in ENVIRONMENT_TYPES else
             'one of ' + ', '.join(ENVIRONMENT_TYPES))
      raise _error(
          f'--environment_type={environment}: Beam knows no such environment '
          f'(it reads the name as written): {fix}.')
  from apache_beam.options import pipeline_options_validator  # pylint: disable=g-import-not-at-top
  errors = pipeline_options_validator.PipelineOptionsValidator(
      parsed, None).validate_environment_options(portable)
  if errors:
    raise _error(f'--environment_type={environment}: {" ".join(errors)}')
  if environment == 'EXTERNAL':
    address = (portable.environment_config or
               portable.lookup_environment_option('external_service_address'))
    if not _HOST_PORT.match(address or ''):
      raise _error(
          f'--environment_type=EXTERNAL: the worker pool address {address!r} '
          'is not HOST:PORT (e.g. --beam-arg=--environment_config='
          'localhost:50000, a worker pool started by python -m '
          'apache_beam.runners.worker.worker_pool_main --service_port=50000).')
  if on_cluster and environment == 'LOOPBACK':
    # Without --environment_type a compile gives DOCKER (cluster_defaults),
    # not Beam's LOOPBACK default for [auto] / local[N] masters.
    raise _error(
        '--environment_type=LOOPBACK runs the Beam workers inside the step\'s '
        'pod, where the cluster\'s task managers cannot reach them: '
        f'{_WORKERS}.')


def _check_job_server(parsed: Any, runner: str, on_cluster: bool) -> None:
  """A job endpoint, or a way to the cluster Beam can take without Java."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import flink_runner  # pylint: disable=g-import-not-at-top
  flink = parsed.view_as(pipeline_options.FlinkRunnerOptions)
  spark = parsed.view_as(pipeline_options.SparkRunnerOptions)
  endpoint = parsed.view_as(pipeline_options.PortableOptions).job_endpoint
  if runner == 'FlinkRunner' and not _FLINK_MASTER.match(
      flink.flink_master.strip()) and (
          flink.flink_master not in flink_runner.MAGIC_HOST_NAMES):
    raise _error(
        f'--flink_master={flink.flink_master} is not [auto], [local] or '
        'http://HOST:PORT (the Flink JobManager\'s REST address).')
  if runner == 'SparkRunner' and not _SPARK_MASTER.match(
      spark.spark_master_url):
    raise _error(
        f'--spark_master_url={spark.spark_master_url} is not a Spark master '
        'URL (spark://HOST:PORT, local[N], k8s://..., yarn).')
  if endpoint == 'embed':
    if on_cluster:
      raise _error(
          '--job_endpoint=embed runs the job server and its work inside the '
          f'step\'s pod: give {_JOB_SERVER}), or drop --runner for the '
          'DirectRunner.')
    return
  if endpoint:
    match = _HOST_PORT.match(endpoint)
    if not match or not 0 < int(match.group(3)) < 65536:
      raise _error(
          f'--job_endpoint={endpoint} is not HOST:PORT (e.g. '
          'flink-beam-jobserver:8099).')
    if on_cluster and match.group(2) in _LOCAL_HOSTS:
      raise _error(
          f'--job_endpoint={endpoint}: no job server runs inside the step\'s '
          f'pod; give {_JOB_SERVER}).')
    return
  if runner == 'PortableRunner':
    raise _error(
        '--runner=PortableRunner needs ' + _JOB_SERVER + '; Beam: "You must '
        'specify a --job_endpoint when using --runner=PortableRunner").')
  if runner == 'FlinkRunner' and flink.flink_submit_uber_jar and (
      flink.flink_master not in flink_runner.MAGIC_HOST_NAMES):
    return  # Beam uploads a jar to the Flink REST API: no Java here.
  if runner == 'SparkRunner' and spark.spark_submit_uber_jar:
    if not spark.spark_rest_url:
      raise _error('--spark_submit_uber_jar needs --beam-arg=--spark_rest_url='
                   'http://HOST:6066 (Beam: "Option spark_rest_url must be '
                   'set.").')
    return
  if on_cluster or shutil.which('java') is None:
    where = ('the step\'s image has no Java' if on_cluster else
             'no java is on this machine\'s PATH')
    uber = ('--beam-arg=--flink_submit_uber_jar with --beam-arg='
            '--flink_master=http://JOBMANAGER:8081' if runner == 'FlinkRunner'
            else '--beam-arg=--spark_submit_uber_jar with --beam-arg='
            '--spark_rest_url=http://MASTER:6066')
    raise _error(
        f'--runner={runner} without --job_endpoint makes Beam start its Java '
        f'{runner[:-6]} job server here, and {where}: give {_JOB_SERVER}), '
        f'or {uber}.')


def _check_shared_paths(parsed: Any, runner: str,
                        pipeline_root: Optional[str]) -> None:
  """The pipeline root and temp location are on a filesystem workers share."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  temp = parsed.view_as(pipeline_options.GoogleCloudOptions).temp_location
  for option, path in (('the pipeline root', pipeline_root),
                       ('--beam-arg=--temp_location', temp)):
    if isinstance(path, str) and path and not _SHARED_SCHEME.match(path):
      raise _error(
          f'{option} {path!r} is on the disk of one pod; the {runner}\'s '
          'workers write and read the data steps\' files there: use a '
          'filesystem every worker reaches (gs://BUCKET/PATH, s3://, '
          'hdfs://).')


def _environment(parsed: Any, runner: str) -> str:
  """The environment Beam starts the workers in, its defaults applied."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import flink_runner  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import spark_runner  # pylint: disable=g-import-not-at-top
  portable = parsed.view_as(pipeline_options.PortableOptions)
  if portable.environment_type:
    return portable.environment_type
  flink = parsed.view_as(pipeline_options.FlinkRunnerOptions)
  spark = parsed.view_as(pipeline_options.SparkRunnerOptions)
  if not portable.output_executable_path and (
      (runner == 'FlinkRunner' and
       flink.flink_master in flink_runner.MAGIC_HOST_NAMES) or
      (runner == 'SparkRunner' and
       re.match(spark_runner.LOCAL_MASTER_PATTERN, spark.spark_master_url))):
    return 'LOOPBACK'  # FlinkRunner/SparkRunner.default_environment.
  return 'DOCKER'


def _is_local(address: Optional[str]) -> bool:
  match = _HOST_PORT.match(address or '')
  return address == 'embed' or bool(match and match.group(2) in _LOCAL_HOSTS)


def _check_local_workers(parsed: Any, runner: str, pipeline_root: str) -> None:
  """A local run's files are on this machine: its workers must be too."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  if _SHARED_SCHEME.match(pipeline_root):
    return
  portable = parsed.view_as(pipeline_options.PortableOptions)
  environment = _environment(parsed, runner)
  local = (
      environment == 'LOOPBACK' or
      (environment == 'EXTERNAL' and _is_local(
          portable.environment_config or
          portable.lookup_environment_option('external_service_address'))) or
      (environment == 'PROCESS' and _is_local(portable.job_endpoint)))
  if not local:
    given = ('' if portable.environment_type else
             ' (Beam\'s default for these options)')
    raise _error(
        f'--environment_type={environment}{given} starts the workers where '
        f'they cannot see this run\'s files under {pipeline_root} (a Docker '
        'container or another machine): for a local run use '
        '--beam-arg=--environment_type=LOOPBACK (workers in this process) or '
        'EXTERNAL with a worker pool on this machine '
        '(--beam-arg=--environment_config=localhost:PORT); for your cluster, '
        'compile the pipeline with a gs:// pipeline root.')


def check_services_answer(values: Sequence[Any],
                          timeout_secs: float = ANSWER_TIMEOUT_SECS) -> None:
  """For a run on this machine: the job server and worker pool answer now.

  Beam connects to `--job_endpoint` only when the first Beam component
  starts, and gives up after `--job_server_timeout` (60 s) with a
  `FutureTimeoutError` that says nothing; an EXTERNAL worker pool that is
  not running fails later still. Asked here, before any component. `values`
  are checked options (`beam_args.validate`); placeholders are skipped.

  Raises:
    BeamArgError: naming the address, the option and how to start one.
  """
  values = [v for v in values if isinstance(v, str)]
  given = beam_args_lib.runner(values)
  if given is None:
    return
  runner = beam_args_lib.runner_class_name(given)
  if runner not in PORTABLE_RUNNERS:
    return
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  portable = options(values).view_as(pipeline_options.PortableOptions)
  endpoint = portable.job_endpoint
  if endpoint and endpoint != 'embed':
    start = (f'Start Beam\'s own job server: {JOB_SERVER_COMMAND}' if
             runner == 'PortableRunner' else
             f'Start the {runner[:-6]} job server')
    _check_answers(endpoint, 'Beam job server', f'--job_endpoint={endpoint}',
                   f'{start} (docs/guide/your_pipeline.md, "Another Beam '
                   'runner for the local run"), or drop '
                   '--beam-arg=--runner for the DirectRunner', timeout_secs)
  if portable.environment_type == 'EXTERNAL':
    address = (portable.environment_config or
               portable.lookup_environment_option('external_service_address'))
    _check_answers(address, 'Beam worker pool',
                   f'--environment_config={address}',
                   f'Start one: {WORKER_POOL_COMMAND}', timeout_secs)


def _check_answers(address: str, what: str, option: str, fix: str,
                   timeout_secs: float) -> None:
  """A gRPC server answers at HOST:PORT `address` within `timeout_secs`."""
  match = _HOST_PORT.match(address or '')
  if not match:
    return  # Not HOST:PORT: `check` refuses it.
  host, port = match.group(2).strip('[]'), int(match.group(3))
  where = f'no {what} answers at {address} ({option})'
  try:
    with socket.create_connection((host, port), timeout=timeout_secs):
      pass
  except OSError as e:
    raise _error(f'{where}: {_reason(e)}. {fix.format(port=port)}.') from e
  import grpc  # pylint: disable=g-import-not-at-top
  channel = grpc.insecure_channel(address)
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout_secs)
  except grpc.FutureTimeoutError:
    raise _error(
        f'{where}: the port accepts connections, but no gRPC server '
        f'answered within {timeout_secs:g} s (another kind of server?). '
        f'{fix.format(port=port)}.') from None
  finally:
    channel.close()


def _reason(error: OSError) -> str:
  if isinstance(error, socket.gaierror):
    return f'the name does not resolve ({error.strerror})'
  if isinstance(error, ConnectionRefusedError):
    return 'the connection was refused (nothing listens on that port)'
  if isinstance(error, socket.timeout):
    return 'the connection timed out'
  return error.strerror or str(error)


def job_defaults(values: Sequence[Any]) -> List[str]:
  """What a portable runner's job needs to outlive a minute.

  `--job_server_timeout` (`JOB_SERVER_TIMEOUT_SECS`) unless `values` give
  one; nothing for other runners. Placeholders are skipped.
  """
  values = [v for v in values if isinstance(v, str)]
  given = beam_args_lib.runner(values)
  if given is None or (beam_args_lib.runner_class_name(given) not in
                       PORTABLE_RUNNERS):
    return []
  if any(beam_args_lib.name(v) == 'job_server_timeout' for v in values):
    return []
  return [f'--job_server_timeout={JOB_SERVER_TIMEOUT_SECS}']


def cluster_defaults(values: Sequence[Any], image: str) -> List[str]:
  """Beam args a portable runner gets on a cluster: workers in `image`.

  Beam's DOCKER default starts `apache/beam_python*_sdk`, without TFX or
  this package; the pipeline's image holds both and the Beam SDK boot.
  `--sdk_container_image` says the workers' image holds TFX: without it TFX
  stages an sdist of itself (`tfx_ephemeral`) that boot would pip-install
  on every worker (`dependency_utils.make_beam_dependency_flags`).
  """
  values = [v for v in values if isinstance(v, str)]
  given = beam_args_lib.runner(values)
  if given is None or (beam_args_lib.runner_class_name(given) not in
                       PORTABLE_RUNNERS):
    return []
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top
  parsed = options(values)
  portable = parsed.view_as(pipeline_options.PortableOptions)
  added = []
  if portable.environment_type is None:
    added = ['--environment_type=DOCKER', f'--environment_config={image}']
  elif portable.environment_type == 'DOCKER' and not (
      portable.environment_config or
      portable.lookup_environment_option('docker_container_image')):
    added = [f'--environment_config={image}']
  if parsed.view_as(pipeline_options.WorkerOptions).sdk_container_image is None:
    added.append(f'--sdk_container_image={image}')
  return added + job_defaults(values)
