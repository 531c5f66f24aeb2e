#!/usr/local/bin/python3
"""Beam's Python SDK container boot, in Python: `/opt/apache/beam/boot` of
images built on the LOCAL Beam SDK base only (scripts/build_image.sh).

It stands in for Beam's Go boot because Beam's SDK image cannot be pulled on
the machine that builds the local base (no registry is reachable there, and
the Go boot cannot be built without Go module sources). Where
apache/beam_python3.10_sdk:2.59.0 can be pulled, the image gets Beam's own
boot and this file is not used.

Written from Beam's sources (Apache License 2.0), whose steps it follows in
order, with their file names and pip arguments:
  sdks/python/container/boot.go     main, launchSDKProcess, setupVenv,
                                    installSetupPackages,
                                    processArtifactsInSetupOnlyMode
  sdks/python/container/piputil.go  pipInstallRequirements, pipInstallPackage,
                                    installExtraPackages, installSdk
  sdks/go/pkg/beam/artifact/materialize.go  Materialize (ResolveArtifacts,
                                    then GetArtifact of each replacement to
                                    SEMI_PERSIST_DIR/staged/STAGED_NAME)
The contract: https://s.apache.org/beam-fn-api-container-contract.

What it leaves out: the legacy artifact retrieval by retrieval token (no Beam
2.59 runner stages that way; it fails with a message), and boot's buffered
logger (each message goes to the logging service and to stderr at once).
"""

import argparse
import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

# Beam's names (boot.go's constants; "keep in sync with stager.py").
SDK_HARNESS_ENTRYPOINT = 'apache_beam.runners.worker.sdk_worker_main'
WORKFLOW_FILE = 'workflow.tar.gz'
REQUIREMENTS_FILE = 'requirements.txt'
SDK_SRC_FILE = 'dataflow_python_sdk.tar'
EXTRA_PACKAGES_FILE = 'extra_packages.txt'
SUBMISSION_DEPENDENCIES_FILE = 'submission_environment_dependencies.txt'
WORKER_POOL_ID_ENV = 'BEAM_PYTHON_WORKER_POOL_ID'
DEFAULT_ENVIRONMENT_ENV = 'RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT'
VENV_BASE_DIR = '/opt/apache/beam-venv'
BOOT = '/opt/apache/beam/boot'
FILE_TYPE_URN = 'beam:artifact:type:file:v1'
URL_TYPE_URN = 'beam:artifact:type:url:v1'
STAGING_TO_ROLE_URN = 'beam:artifact:role:staging_to:v1'
PIP_REQUIREMENTS_ROLE_URN = 'beam:artifact:role:pip_requirements_file:v1'
NO_ARTIFACTS_STAGED = '__no_artifacts_staged__'
PIP_FLAGS = ['--no-cache-dir', '--disable-pip-version-check']
RESTARTS = 4  # A worker process that fails this often fails the container.
UNRECOVERABLE_URL = ('https://beam.apache.org/documentation/sdks/'
                     'python-unrecoverable-errors/index.html'
                     '#pip-dependency-resolution-failures')


class BootError(Exception):
  """A step of the boot failed; the message says which and why."""


class Logger:
  """Messages to the runner's logging service (Fn API), and to stderr."""

  def __init__(self, endpoint='', worker_id=''):
    self._endpoint = endpoint
    self._worker_id = worker_id

  def log(self, severity, message):
    print(f'{time.strftime("%Y/%m/%d %H:%M:%S")} {message}', file=sys.stderr,
          flush=True)
    if not self._endpoint:
      return
    # Imported here: the worker pool mode needs none of Beam's modules.
    import grpc  # pylint: disable=g-import-not-at-top
    from apache_beam.portability.api import beam_fn_api_pb2  # pylint: disable=g-import-not-at-top
    from apache_beam.portability.api import beam_fn_api_pb2_grpc  # pylint: disable=g-import-not-at-top
    from google.protobuf import timestamp_pb2  # pylint: disable=g-import-not-at-top
    entry = beam_fn_api_pb2.LogEntry(
        severity=getattr(beam_fn_api_pb2.LogEntry.Severity, severity),
        message=message, log_location='boot',
        timestamp=timestamp_pb2.Timestamp(seconds=int(time.time())))
    try:
      with grpc.insecure_channel(self._endpoint) as channel:
        stub = beam_fn_api_pb2_grpc.BeamFnLoggingStub(channel)
        for _ in stub.Logging(
            iter([beam_fn_api_pb2.LogEntry.List(log_entries=[entry])]),
            metadata=[('worker_id', self._worker_id)], timeout=30):
          pass
    except grpc.RpcError as e:
      print(f'boot: the logging service at {self._endpoint} failed: '
            f'{e.code()}', file=sys.stderr, flush=True)

  def info(self, message):
    self.log('INFO', message)

  def warn(self, message):
    self.log('WARN', message)

  def error(self, message):
    self.log('ERROR', message)


def _flags(argv):
  """boot.go's flags, as Go's flag package reads them (-x or --x)."""
  parser = argparse.ArgumentParser(prog=BOOT, allow_abbrev=False)
  for name in ('setup_only', 'worker_pool'):
    parser.add_argument(f'-{name}', f'--{name}', nargs='?', const='true',
                        default='false')
  for name in ('artifacts', 'id', 'logging_endpoint', 'artifact_endpoint',
               'provision_endpoint', 'control_endpoint'):
    parser.add_argument(f'-{name}', f'--{name}', default='')
  parser.add_argument('-semi_persist_dir', '--semi_persist_dir',
                      default='/tmp')
  flags = parser.parse_args(argv)
  for name in ('setup_only', 'worker_pool'):
    setattr(flags, name, getattr(flags, name).lower() in ('true', '1', 't'))
  return flags


def _python():
  """expansionx.GetPythonVersion: `python`, else `python3`, on PATH."""
  for name in ('python', 'python3'):
    if shutil.which(name):
      return name
  raise BootError('no python or python3 on PATH')


def _run(logger, argv, what):
  """Runs `argv`, its output to stderr; True when it exits 0."""
  logger.info(f'{what}: {" ".join(argv)}')
  return subprocess.run(argv, stdin=sys.stdin, stdout=sys.stderr,
                        stderr=sys.stderr, check=False).returncode == 0


def _pip(logger, args):
  return _run(logger, [_python(), '-m', 'pip', 'install'] + PIP_FLAGS + args,
              'pip')


def _pip_failed(returncode_ok):
  if not returncode_ok:
    raise BootError('pip failed to install the staged packages (its log is '
                    f'above); Beam on such failures: {UNRECOVERABLE_URL}')


def pip_install_requirements(logger, files, directory, name):
  """piputil.go: staged packages only (no deps), then the index for the rest."""
  if name not in files:
    return
  path = os.path.join(directory, name)
  if not _pip(logger, ['-r', path, '--no-index', '--no-deps', '--find-links',
                       directory]):
    logger.info('Not every requirement is among the staged packages: '
                'installing the rest from the package index.')
  _pip_failed(_pip(logger, ['-r', path, '--find-links', directory]))


def pip_install_package(logger, files, directory, name, force, optional,
                        extras=None):
  """piputil.go: a staged package; `force` reinstalls it but not its deps."""
  if name not in files:
    if optional:
      return
    raise BootError(f"package '{name}' not found")
  spec = os.path.join(directory, name)
  if extras:
    spec += '[' + ','.join(extras) + ']'
  if force:
    _pip_failed(_pip(logger, ['--upgrade', '--force-reinstall', '--no-deps',
                              spec]))
  _pip_failed(_pip(logger, [spec]))


def install_extra_packages(logger, files, directory):
  """Each line of extra_packages.txt, force-installed."""
  if EXTRA_PACKAGES_FILE not in files:
    return
  with open(os.path.join(directory, EXTRA_PACKAGES_FILE)) as f:
    packages = f.read().splitlines()
  for package in packages:
    logger.info(f'Installing extra package: {package}')
    try:
      pip_install_package(logger, files, directory, package, True, False)
    except BootError as e:
      raise BootError(f'failed to install extra package {package}: {e}') from e


def acceptable_wheel_specs():
  """setupAcceptableWheelSpecs: Beam wheels for this `python -V`."""
  version = subprocess.run(['python', '-V'], capture_output=True, text=True,
                           check=False)
  match = re.search(r'Python (\d)\.(\d+)', version.stdout + version.stderr)
  if not match:
    return []
  tag = match.group(1) + match.group(2)
  return [f'cp{tag}-cp{tag}-manylinux_2_17_x86_64.manylinux2014_x86_64.whl']


def install_sdk(logger, files, directory, specs):
  """installSdk: a staged Beam wheel, else the staged SDK tarball, if any."""
  wheel = next((f for f in files if f.startswith('apache_beam')
                and any(f.endswith(s) for s in specs)), '')
  if wheel:
    logger.info(f'Found Apache Beam SDK wheel: {wheel}')
    try:
      pip_install_package(logger, files, directory, wheel, '.dev' in wheel,
                          False, ['gcp'])
      return
    except BootError as e:
      logger.info(f'The staged Beam wheel did not install ({e}): trying '
                  'the staged SDK tarball, if any.')
  if not os.path.exists(os.path.join(directory, SDK_SRC_FILE)):
    return
  pip_install_package(logger, files, directory, SDK_SRC_FILE, False, False,
                      ['gcp'])


def install_setup_packages(logger, files, directory, requirements_files):
  """boot.go's installSetupPackages: SDK, requirements, extras, workflow."""
  logger.info('Installing setup packages ...')
  try:
    install_sdk(logger, files, directory, acceptable_wheel_specs())
  except BootError as e:
    raise BootError(f'failed to install SDK: {e}') from e
  if subprocess.run(['python', '-m', 'pip', 'show', 'apache-beam'],
                    capture_output=True, check=False).returncode != 0:
    raise BootError(
        'apache-beam is not installed in this image: install the Beam '
        'version the pipeline was submitted with in it.')
  for name in requirements_files:
    try:
      pip_install_requirements(logger, files, directory, name)
    except BootError as e:
      raise BootError(f'failed to install requirements: {e}') from e
  try:
    install_extra_packages(logger, files, directory)
  except BootError as e:
    raise BootError(f'failed to install extra packages: {e}') from e
  try:
    pip_install_package(logger, files, directory, WORKFLOW_FILE, False, True)
  except BootError as e:
    raise BootError(f'failed to install workflow: {e}') from e
  _run(logger, [_python(), '--version'], 'Using Python version')
  _run(logger, [_python(), '-m', 'pip', 'freeze'],
       'Logging runtime dependencies')
  submission = os.path.join(directory, SUBMISSION_DEPENDENCIES_FILE)
  if os.path.exists(submission):
    with open(submission) as f:
      logger.info('Logging submission environment dependencies:\n' + f.read())


_ids = itertools.count(1)


def _staged_name(artifact):
  """materialize.go's extractStagingToPath."""
  from apache_beam.portability.api import beam_runner_api_pb2  # pylint: disable=g-import-not-at-top
  if artifact.role_urn == STAGING_TO_ROLE_URN:
    return beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
        artifact.role_payload).staged_name
  if artifact.type_urn == FILE_TYPE_URN:
    path = beam_runner_api_pb2.ArtifactFilePayload.FromString(
        artifact.type_payload).path
    return f'{next(_ids)}-{os.path.basename(path)}'
  if artifact.type_urn == URL_TYPE_URN:
    url = beam_runner_api_pb2.ArtifactUrlPayload.FromString(
        artifact.type_payload).url
    return f'{next(_ids)}-{url.rstrip("/").rsplit("/", 1)[-1]}'
  raise BootError('failed to extract staging path for artifact type '
                  f'{artifact.type_urn} role {artifact.role_urn}')


def materialize(logger, endpoint, info, directory):
  """The job's staged files into `directory`: [(staged name, role urn)]."""
  import grpc  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_artifact_api_pb2  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_artifact_api_pb2_grpc  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_runner_api_pb2  # pylint: disable=g-import-not-at-top
  if not info.dependencies:
    if info.retrieval_token in ('', NO_ARTIFACTS_STAGED):
      return []
    raise BootError('the runner staged artifacts by retrieval token (legacy '
                    'artifact retrieval), which this boot does not read: '
                    'build the image on Beam\'s SDK image')
  with grpc.insecure_channel(endpoint) as channel:
    stub = beam_artifact_api_pb2_grpc.ArtifactRetrievalServiceStub(channel)
    resolution = stub.ResolveArtifacts(
        beam_artifact_api_pb2.ResolveArtifactsRequest(
            artifacts=info.dependencies))
    staged = []
    for dependency in resolution.replacements:
      name = _staged_name(dependency)
      request = beam_runner_api_pb2.ArtifactInformation(
          type_urn=dependency.type_urn, type_payload=dependency.type_payload,
          role_urn=STAGING_TO_ROLE_URN,
          role_payload=beam_runner_api_pb2.ArtifactStagingToRolePayload(
              staged_name=name).SerializeToString())
      path = os.path.join(directory, *name.split('/'))
      os.makedirs(os.path.dirname(path), exist_ok=True)
      for attempt in range(1, 5):  # MultiRetrieve: 3 retries.
        digest = hashlib.sha256()
        try:
          with open(path, 'wb') as f:
            for chunk in stub.GetArtifact(
                beam_artifact_api_pb2.GetArtifactRequest(artifact=request)):
              digest.update(chunk.data)
              f.write(chunk.data)
          break
        except grpc.RpcError as e:
          if attempt == 4:
            raise BootError(f'failed to retrieve {path} in 3 attempts: '
                            f'{e.code()} {e.details()}') from e
          time.sleep(attempt)
      os.chmod(path, 0o755)
      logger.info(f'Downloaded: {path} (sha256: {digest.hexdigest()}, size: '
                  f'{os.path.getsize(path)})')
      staged.append((name, dependency.role_urn))
  return staged


def setup_venv(logger, worker_id):
  """boot.go's setupVenv: a venv that sees the image's packages."""
  directory = os.path.join(VENV_BASE_DIR, f'beam-venv-worker-{worker_id}')
  logger.info(f'Initializing temporary Python venv in {directory}')
  if os.path.exists(directory):
    logger.info('Cleaning up previous venv ...')
    shutil.rmtree(directory)
  os.makedirs(directory, mode=0o750)
  subprocess.run([_python(), '-m', 'venv', '--system-site-packages',
                  directory], check=True)
  os.environ['VIRTUAL_ENV'] = directory
  os.environ['PATH'] = os.path.join(directory, 'bin') + ':' + os.environ.get(
      'PATH', '')
  return directory


def _descriptor(url):
  from apache_beam.portability.api import endpoints_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  return text_format.MessageToString(
      endpoints_pb2.ApiServiceDescriptor(url=url), as_one_line=True)


class Workers:
  """The SDK harness processes, one a worker id, restarted as boot does."""

  def __init__(self, logger):
    self._logger = logger
    self._lock = threading.Lock()
    self._pids = []
    self._canceled = False
    self.failed = False

  def cancel(self, signum, _):
    self._logger.info(f'Received signal: {signal.Signals(signum).name}')
    with self._lock:
      self._canceled = True
      pids = list(self._pids)
    for pid in pids:
      try:
        os.killpg(pid, signal.SIGTERM)
      except ProcessLookupError:
        continue
      threading.Timer(5, self._kill, (pid,)).start()

  def _kill(self, pid):
    try:
      os.killpg(pid, signal.SIGKILL)
      self._logger.warn(f'Worker process {pid} did not respond, killed it.')
    except ProcessLookupError:
      pass

  def run(self, worker_id):
    argv = ['python', '-m', SDK_HARNESS_ENTRYPOINT]
    failures = 0
    while True:
      with self._lock:
        if self._canceled:
          return
        self._logger.info(f'Executing Python (worker {worker_id}): '
                          f'{" ".join(argv)}')
        process = subprocess.Popen(argv, env=dict(os.environ,
                                                  WORKER_ID=worker_id),
                                   start_new_session=True)
        self._pids.append(process.pid)
      if process.wait() == 0:
        self._logger.info(f'Python (worker {worker_id}) exited.')
        return
      failures += 1
      if failures < RESTARTS:
        self._logger.warn(f'Python (worker {worker_id}) exited {failures} '
                          f'times: exit status {process.returncode}\n'
                          'restarting SDK process')
      else:
        self._logger.error(f'Python (worker {worker_id}) exited {failures} '
                           f'times: exit status {process.returncode}\nout of '
                           'retries, failing container')
        self.failed = True
        return


def launch_sdk_process(flags):
  """boot.go's launchSDKProcess."""
  import grpc  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_provision_api_pb2  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_provision_api_pb2_grpc  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  with grpc.insecure_channel(flags.provision_endpoint) as channel:
    try:
      info = beam_provision_api_pb2_grpc.ProvisionServiceStub(
          channel).GetProvisionInfo(
              beam_provision_api_pb2.GetProvisionInfoRequest(),
              metadata=[('worker_id', flags.id)], timeout=120).info
    except grpc.RpcError as e:
      raise BootError('Failed to obtain provisioning information: '
                      f'{e.code()} {e.details()}') from e
  # TODO(BEAM-8201) in boot.go: the provision info's endpoints win.
  logging_endpoint = info.logging_endpoint.url or flags.logging_endpoint
  artifact_endpoint = info.artifact_endpoint.url or flags.artifact_endpoint
  control_endpoint = info.control_endpoint.url or flags.control_endpoint
  for value, what in ((logging_endpoint, 'logging'),
                      (artifact_endpoint, 'artifact'),
                      (control_endpoint, 'control')):
    if not value:
      raise BootError(f'No {what} endpoint provided.')
  logger = Logger(logging_endpoint, flags.id)
  logger.info(f'Initializing python harness: {" ".join(sys.argv)}')
  options = json_format.MessageToJson(info.pipeline_options, indent=None)

  workers = Workers(logger)
  for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, workers.cancel)
  venv = ''
  try:
    if not os.environ.get(DEFAULT_ENVIRONMENT_ENV):
      try:
        venv = setup_venv(logger, flags.id)
      except (OSError, subprocess.CalledProcessError) as e:
        raise BootError(
            f'could not make the worker\'s venv under {VENV_BASE_DIR} ({e}): '
            'give the image\'s user that folder, or set '
            f'{DEFAULT_ENVIRONMENT_ENV}=1 (an ENV line of the image) to run '
            'the SDK in the image\'s own environment.') from e
    directory = os.path.join(flags.semi_persist_dir, 'staged')
    try:
      staged = materialize(logger, artifact_endpoint, info, directory)
    except BootError as e:
      logger.error(f'failed to retrieve staged files: {e}')
      if SUBMISSION_DEPENDENCIES_FILE not in str(e):
        raise
      staged = []
    requirements_files = [REQUIREMENTS_FILE]
    for name, role in staged:
      logger.info(f'Found artifact: {name}')
      if role == PIP_REQUIREMENTS_ROLE_URN:
        requirements_files.append(name)
    try:
      install_setup_packages(logger, [n for n, _ in staged], directory,
                             requirements_files)
    except BootError as e:
      logger.error(f'failed to install required packages: {e}')
      raise

    os.environ.update({
        'PIPELINE_OPTIONS': options,
        'SEMI_PERSISTENT_DIRECTORY': flags.semi_persist_dir,
        'LOGGING_API_SERVICE_DESCRIPTOR': _descriptor(logging_endpoint),
        'CONTROL_API_SERVICE_DESCRIPTOR': _descriptor(control_endpoint),
        'RUNNER_CAPABILITIES': ' '.join(info.runner_capabilities),
    })
    if info.HasField('status_endpoint'):
      os.environ['STATUS_API_SERVICE_DESCRIPTOR'] = text_format.MessageToString(
          info.status_endpoint, as_one_line=True)
    for key, env in (('job_name', 'JOB_NAME'), ('job_id', 'JOB_ID')):
      if key in info.metadata:
        os.environ[env] = info.metadata[key]
    threads = [threading.Thread(target=workers.run, args=(worker_id,))
               for worker_id in [flags.id] + list(info.sibling_worker_ids)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    if workers.failed:
      raise BootError('an SDK worker process failed (log above)')
  finally:
    if venv:
      shutil.rmtree(venv, ignore_errors=True)
      logger.info(f'Cleaned up temporary venv for worker {flags.id}.')


def setup_only(flags):
  """processArtifactsInSetupOnlyMode: install the listed files, no worker."""
  from apache_beam.portability.api import beam_runner_api_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  if not flags.artifacts:
    raise BootError('No --artifacts provided along with --setup_only flag.')
  with open(flags.artifacts) as f:
    infos = json.load(f)
  files = []
  for text in infos:
    artifact = json_format.Parse(text, beam_runner_api_pb2.ArtifactInformation())
    if artifact.type_urn != FILE_TYPE_URN:
      raise BootError('Expect file artifact type in setup only mode, found '
                      f'{artifact.type_urn}.')
    files.append(beam_runner_api_pb2.ArtifactFilePayload.FromString(
        artifact.type_payload).path)
  install_setup_packages(Logger(), files, os.path.dirname(flags.artifacts),
                         [REQUIREMENTS_FILE])


def main(argv):
  flags = _flags(argv)
  try:
    if flags.setup_only:
      setup_only(flags)
      return 0
    if flags.worker_pool:
      os.environ[WORKER_POOL_ID_ENV] = str(os.getpid())
      args = ['-m', 'apache_beam.runners.worker.worker_pool_main',
              '--service_port=50000', f'--container_executable={BOOT}']
      Logger().info(f'Starting worker pool {os.getpid()}: python '
                    f'{" ".join(args)}')
      if subprocess.run([_python()] + args, check=False).returncode != 0:
        raise BootError('Python SDK worker pool exited with error')
      Logger().info('Python SDK worker pool exited.')
      return 0
    if not flags.id:
      raise BootError('No id provided.')
    if not flags.provision_endpoint:
      raise BootError('No provision endpoint provided.')
    launch_sdk_process(flags)
    return 0
  except BootError as e:
    print(f'{time.strftime("%Y/%m/%d %H:%M:%S")} {e}', file=sys.stderr,
          flush=True)
    return 1


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
