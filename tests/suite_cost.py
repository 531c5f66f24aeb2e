"""The CPU seconds of each test and test file, printed at the end of a run.

Wall times (`--durations`) move with the machine's load; CPU seconds much
less. Each process of the run adds up, per test (its fixtures' setup and
teardown included), the CPU seconds of its own and of its finished child
processes (TensorFlow subprocesses, Beam workers, Kubeflow steps run as
processes); the xdist workers hand their figures to the controller. The
summary ranks the files and the tests and estimates the run's wall time on a
quiet machine: the CPU seconds (containers' included) shared out over the
cores the test processes can use, plus the longest file (a file stays in
one process under `--dist loadfile`). `--suite-cost-json=PATH` also writes
every test's figures.

The VM's speed moves too (the same files have taken 1.0-1.6x the CPU
seconds of another run on the same machine): the run's controller times a
fixed pure-Python loop at its start and end and prints both, so that two
runs' CPU seconds can be compared with the speed each ran at.

What a Docker daemon's containers used (the built-image steps) is read
from the daemon's cgroup, for the whole run: it counts every container on
the machine in that time, and nothing where the cgroup is elsewhere. Not
counted: processes a test leaves running or does not wait for.
"""

import collections
import json
import os
import time
from typing import Dict, Iterable, List, Optional, Tuple

import pytest

_WORKER_OUTPUT_KEY = 'tfx_tpu_trainer_suite_cost'
_SHOWN_FROM = 0.5  # CPU seconds: cheaper files and tests are not listed.
# Test id -> [CPU seconds, wall seconds].
TestCosts = Dict[str, List[float]]


# Docker's cgroup with the cgroupfs driver: cgroup v1 (nanoseconds), v2.
_DOCKER_CPU_V1 = '/sys/fs/cgroup/cpuacct/docker/cpuacct.usage'
_DOCKER_CPU_V2 = '/sys/fs/cgroup/docker/cpu.stat'


def _docker_cpu_seconds() -> Optional[float]:
  """CPU seconds of the Docker daemon's containers so far, if readable."""
  try:
    with open(_DOCKER_CPU_V1) as f:
      return int(f.read()) / 1e9
  except (OSError, ValueError):
    pass
  try:
    with open(_DOCKER_CPU_V2) as f:
      fields = dict(line.split() for line in f if line.strip())
    return int(fields['usage_usec']) / 1e6
  except (OSError, ValueError, KeyError):
    return None


def speed_probe(repeats: int = 3) -> float:
  """CPU seconds of a fixed pure-Python loop, the least of `repeats`."""
  best = float('inf')
  for _ in range(repeats):
    start = time.process_time()
    sum(i * i for i in range(10**7))
    best = min(best, time.process_time() - start)
  return best


def _cpu_seconds() -> float:
  """CPU seconds of this process and of its finished child processes."""
  times = os.times()
  return (times.user + times.system + times.children_user +
          times.children_system)


def by_file(tests: TestCosts) -> List[Tuple[str, float, float, int]]:
  """(file, CPU seconds, wall seconds, tests), the costliest file first."""
  files = collections.defaultdict(lambda: [0., 0., 0])
  for test_id, (cpu, wall) in tests.items():
    entry = files[test_id.split('::')[0]]
    entry[0] += cpu
    entry[1] += wall
    entry[2] += 1
  return sorted(((path, cpu, wall, count)
                 for path, (cpu, wall, count) in files.items()),
                key=lambda row: -row[1])


class SuiteCost:
  """Adds up each test's CPU seconds; prints them by file and by test."""

  def __init__(self, files_shown: int, tests_shown: int, json_path: str):
    self._json_path = json_path
    self._files_shown = files_shown
    self._tests_shown = tests_shown
    self._tests: TestCosts = {}
    self._workers = 0
    self._worker_seconds = 0.0  # Of the xdist workers, start-up included.
    self._docker_at_start = _docker_cpu_seconds()
    self._probe_at_start: Optional[float] = None

  def pytest_sessionstart(self, session: pytest.Session):
    if not hasattr(session.config, 'workerinput'):  # Not an xdist worker.
      self._probe_at_start = speed_probe()

  @pytest.hookimpl(wrapper=True)
  def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
    del nextitem  # Unused.
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
      return (yield)
    finally:
      self._tests[item.nodeid] = [_cpu_seconds() - cpu,
                                  time.monotonic() - wall]

  def pytest_sessionfinish(self, session: pytest.Session):
    worker_output = getattr(session.config, 'workeroutput', None)
    if worker_output is not None:  # An xdist worker: hand the figures on.
      worker_output[_WORKER_OUTPUT_KEY] = json.dumps(
          {'tests': self._tests, 'process_seconds': _cpu_seconds()})

  @pytest.hookimpl(optionalhook=True)
  def pytest_testnodedown(self, node, error):
    del error  # Unused: a worker that died sends nothing.
    text = getattr(node, 'workeroutput', {}).get(_WORKER_OUTPUT_KEY)
    if text:
      figures = json.loads(text)
      self._workers += 1
      self._worker_seconds += figures['process_seconds']
      self._tests.update(figures['tests'])

  def pytest_terminal_summary(self, terminalreporter):
    if not self._tests:
      return
    write = terminalreporter.write_line
    files = by_file(self._tests)
    terminalreporter.section('CPU seconds by test file')
    for path, cpu, wall, count in files[:self._files_shown]:
      if cpu < _SHOWN_FROM:
        break
      write(f'{cpu:8.1f} s CPU {wall:8.1f} s wall {count:4d} tests  {path}')
    terminalreporter.section('CPU seconds by test')
    tests = sorted(self._tests.items(), key=lambda kv: -kv[1][0])
    for test_id, (cpu, wall) in tests[:self._tests_shown]:
      if cpu < _SHOWN_FROM:
        break
      write(f'{cpu:8.1f} s CPU {wall:8.1f} s wall  {test_id}')
    containers = self._container_seconds()
    write(self._estimate(files, containers))
    probes = []
    if self._probe_at_start is not None:
      probes = [self._probe_at_start, speed_probe()]
      write(f"The VM's speed: a fixed Python loop took {probes[0]:.2f} s of "
            f'CPU at the start, {probes[1]:.2f} s at the end (compare runs '
            'at the same speed; tests/suite_cost.py)')
    if self._json_path:
      with open(self._json_path, 'w') as f:
        json.dump({'tests': self._tests, 'workers': self._workers,
                   'worker_seconds': self._worker_seconds,
                   'container_seconds': containers,
                   'speed_probe': probes}, f, indent=1)

  def _container_seconds(self) -> float:
    now = _docker_cpu_seconds()
    if now is None or self._docker_at_start is None:
      return 0.0
    return now - self._docker_at_start

  def _estimate(self, files: Iterable[Tuple[str, float, float, int]],
                containers: float) -> str:
    """The totals and the quiet-machine estimate, as one line."""
    files = list(files)
    in_tests = sum(row[1] for row in files)
    processes = max(self._workers, 1)
    # With start-up and collection (each process imports TF, TFX and kfp).
    total = max(in_tests, self._worker_seconds if self._workers
                else _cpu_seconds())
    longest = files[0][1]
    cores = min(processes, os.cpu_count() or 1)
    estimate = (f'{total + containers:.0f} s' if cores == 1 else
                f'{(total + containers) / cores + longest:.0f} s (CPU / '
                f'{cores} + the longest file)')
    return (f'{len(self._tests)} tests in {len(files)} files: {in_tests:.0f} '
            f's CPU in tests, {total:.0f} s in the {processes} test '
            f'process(es) with start-up, {containers:.0f} s in Docker '
            f'containers; longest file {longest:.0f} s; on a quiet machine '
            f'with {cores} core(s) about {estimate}; load now '
            f'{os.getloadavg()[0]:.1f}')


def add_option(parser: pytest.Parser) -> None:
  """--suite-cost-json (from conftest's `pytest_addoption`)."""
  parser.addoption('--suite-cost-json', default='', metavar='PATH',
                   help="Write each test's CPU and wall seconds to PATH.")


def register(config: pytest.Config, files_shown: int = 25,
             tests_shown: int = 15) -> None:
  """Registers the plugin (from conftest's `pytest_configure`)."""
  config.pluginmanager.register(
      SuiteCost(files_shown, tests_shown,
                config.getoption('suite_cost_json')), 'suite_cost')
