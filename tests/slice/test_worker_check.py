"""`tpu-check` for a slice, against worker entrypoints on localhost.

There is no TPU here: the hosts answer and list their (CPU) devices, the
TPU requirement then names every host without a TPU, and a host that does
not answer is named by the wait.
"""

import os
import re
import signal
import subprocess
import sys

import pytest

from tfx_tpu_trainer.slice import worker_check

from tests.conftest import REPO_ROOT
from tests.fixtures import slice_workers


@pytest.fixture
def local_slice(tmp_path):
  workers = slice_workers.LocalSlice(str(tmp_path), count=2,
                                     driver_timeout=120)
  try:
    workers.wait_until_serving()
    yield workers
  finally:
    workers.stop()


def test_every_host_answers_and_lists_its_devices(local_slice):
  lines = worker_check.check_slice(local_slice.addresses, wait_secs=60,
                                  require_tpu=False)
  assert lines[0] == f'worker 0 ({local_slice.addresses[0]}): 1 CPU'
  assert lines[1] == f'worker 1 ({local_slice.addresses[1]}): 1 CPU'
  assert lines[2].startswith('2 hosts answered in ')


def test_hosts_without_a_tpu_are_named(local_slice):
  with pytest.raises(worker_check.SliceCheckError) as raised:
    worker_check.check_slice(local_slice.addresses, wait_secs=60)
  for task, address in enumerate(local_slice.addresses):
    assert f'worker {task} ({address}): 1 CPU' in str(raised.value)


def _tpu_check(*args):
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'tpu-check'] + list(args),
      cwd=REPO_ROOT, capture_output=True, text=True)


def test_the_cli_names_the_host_that_did_not_answer(local_slice):
  absent = f'localhost:{slice_workers.free_ports(1)[0]}'
  result = _tpu_check('--timeout', '3', '--workers',
                      ','.join(local_slice.addresses[:1] + [absent]))
  assert result.returncode == 1
  # Whom it waits for and until when, before it waits.
  assert re.search(
      r'tpu-check: Waiting up to 3 s \(until \d\d:\d\d:\d\d; --timeout sets '
      r'it\) for the 2 TPU workers of the slice: worker 0 \(localhost:\d+\), '
      + re.escape(f'worker 1 ({absent}).'), result.stdout)
  assert re.search(r'tpu-check: TPU worker 0 \(localhost:\d+\) answered',
                   result.stdout)
  assert ('1 of the 2 TPU workers of the slice did not answer within 3 s: '
          f'worker 1 ({absent}): ConnectionRefusedError') in result.stderr
  assert result.stderr.rstrip().endswith('--timeout sets the wait.')
  assert 'TFX_TPU_TRAINER_WORKER_WAIT_SECS' not in result.stderr


def test_a_name_that_does_not_resolve_fails_at_once(local_slice):
  result = _tpu_check('--workers', 'tpu-workers-0.nowhere.invalid,' +
                      local_slice.addresses[0])
  assert result.returncode == 1
  assert ("worker 0 (tpu-workers-0.nowhere.invalid:8470): the name "
          "'tpu-workers-0.nowhere.invalid' does not resolve from here") in (
              result.stderr)
  assert 'Waiting up to' not in result.stdout  # Not the 900 s default wait.


def test_a_frozen_worker_is_named(local_slice):
  frozen = local_slice.processes[1].pid
  os.kill(frozen, signal.SIGSTOP)
  try:
    # Each probe of the stopped worker waits 10 s for its answer, longer
    # than the whole wait: it is named after that one probe.
    result = _tpu_check('--timeout', '5', '--workers',
                        ','.join(local_slice.addresses))
  finally:
    os.kill(frozen, signal.SIGCONT)
  assert result.returncode == 1
  assert (f'worker 1 ({local_slice.addresses[1]}): ') in result.stderr
  assert ('no answer within 10 s (the worker took the connection: is its '
          'process stopped or overloaded?)') in result.stderr
  assert f'worker 0 ({local_slice.addresses[0]}):' not in result.stderr


def test_hostnames_not_separated_by_commas_are_a_usage_error():
  result = subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'tpu-check'],
      cwd=REPO_ROOT, capture_output=True, text=True,
      env=dict(os.environ, TPU_WORKER_HOSTNAMES='h0;h1'))
  assert result.returncode == 2
  assert ("TPU_WORKER_HOSTNAMES: 'h0;h1' is not a worker address" in
          result.stderr)
  assert "Separate the hosts with commas, not ';'." in result.stderr
