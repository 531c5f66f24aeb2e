"""`tpu-check` for a slice, against worker entrypoints on localhost.

There is no TPU here: the hosts answer and list their (CPU) devices, the
TPU requirement then names every host without a TPU, and a host that does
not answer is named by the wait.
"""

import subprocess
import sys

import pytest

from tfx_tpu_trainer.tpu import slice_check

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
  lines = slice_check.check_slice(local_slice.addresses, wait_secs=60,
                                  require_tpu=False)
  assert lines[0] == f'worker 0 ({local_slice.addresses[0]}): 1 CPU'
  assert lines[1] == f'worker 1 ({local_slice.addresses[1]}): 1 CPU'
  assert lines[2].startswith('2 hosts answered in ')


def test_hosts_without_a_tpu_are_named(local_slice):
  with pytest.raises(slice_check.SliceCheckError) as raised:
    slice_check.check_slice(local_slice.addresses, wait_secs=60)
  for task, address in enumerate(local_slice.addresses):
    assert f'worker {task} ({address}): 1 CPU' in str(raised.value)


def test_the_cli_names_the_host_that_did_not_answer(local_slice):
  absent = f'localhost:{slice_workers.free_ports(1)[0]}'
  result = subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'tpu-check', '--timeout',
       '3', '--workers', ','.join(local_slice.addresses[:1] + [absent])],
      cwd=REPO_ROOT, capture_output=True, text=True)
  assert result.returncode == 1
  assert ('1 of the 2 TPU workers of the slice did not answer within 3 s: '
          f'worker 1 ({absent}): ConnectionRefusedError') in result.stderr
