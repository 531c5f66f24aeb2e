"""scripts/beam_boot.py, the local base's boot: boot.go's flags and refusals,
and a Beam job's worker started by it (Beam's worker pool, embedded job
server), here without Docker; test_beam_docker_worker.py runs it in the
image."""

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.fixtures import beam_jobs

BOOT = os.path.join(REPO_ROOT, 'scripts', 'beam_boot.py')
_spec = importlib.util.spec_from_file_location('beam_boot', BOOT)
beam_boot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(beam_boot)


@pytest.mark.parametrize('argv,message', [
    ([], 'No id provided.'),
    (['--id=1', '--logging_endpoint=localhost:1'],
     'No provision endpoint provided.'),
    (['-setup_only'], 'No --artifacts provided along with --setup_only flag.'),
])
def test_boot_refuses_what_boot_go_refuses(capsys, argv, message):
  assert beam_boot.main(argv) == 1
  assert message in capsys.readouterr().err


def test_flags_are_read_as_go_reads_them():
  flags = beam_boot._flags(['-id=7', '--provision_endpoint', 'h:1',  # pylint: disable=protected-access
                            '--worker_pool=false', '-setup_only=true'])
  assert (flags.id, flags.provision_endpoint, flags.worker_pool,
          flags.setup_only, flags.semi_persist_dir) == ('7', 'h:1', False,
                                                        True, '/tmp')


def test_an_unreachable_provision_service_is_named():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    port = s.getsockname()[1]
  argv = ['--id=1', f'--provision_endpoint=localhost:{port}']
  flags = beam_boot._flags(argv)  # pylint: disable=protected-access
  with pytest.raises(beam_boot.BootError,
                     match='Failed to obtain provisioning information'):
    beam_boot.launch_sdk_process(flags)


@pytest.mark.slow
def test_a_beam_job_runs_on_a_worker_the_boot_started(tmp_path):
  """Beam's worker pool starts the boot per worker, as the image's
  `--worker_pool` does; the boot fetches the staged files and starts the
  SDK harness, which runs the job."""
  boot = tmp_path / 'boot.sh'
  boot.write_text(
      '#!/bin/sh\n'
      # In the default environment: a venv of this machine's python would
      # not see the packages of the test's virtualenv.
      'export RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1\n'
      f'export PATH="{os.path.dirname(sys.executable)}:$PATH"\n'
      f'exec "{sys.executable}" "{BOOT}" "$@" '
      f'--semi_persist_dir="{tmp_path}"\n')
  boot.chmod(0o755)
  with socket.socket() as s:
    s.bind(('localhost', 0))
    port = s.getsockname()[1]
  log_path = tmp_path / 'pool.log'
  with open(log_path, 'w') as log:
    pool = subprocess.Popen(
        [sys.executable, '-m', 'apache_beam.runners.worker.worker_pool_main',
         f'--service_port={port}', f'--container_executable={boot}'],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    while True:
      assert pool.poll() is None, log_path.read_text()
      try:
        socket.create_connection(('localhost', port)).close()
        break
      except OSError:
        time.sleep(0.5)
    beam_jobs.run_on_worker_pool(f'localhost:{port}')
  finally:
    pool.terminate()
    pool.wait()
  log = log_path.read_text()
  assert 'Initializing python harness' in log, log
  assert 'Found artifact: submission_environment_dependencies.txt' in log, log
  assert os.path.isfile(tmp_path / 'staged' /
                        'submission_environment_dependencies.txt')
  assert re.search(r'Executing Python \(worker worker_\d+\)', log), log
