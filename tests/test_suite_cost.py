"""The suite's cost report reads Docker's cgroup (v1, v2 or none) and times
the VM's speed."""

import pytest

from tests import suite_cost


def test_docker_cpu_from_cgroup_v1_nanoseconds(tmp_path, monkeypatch):
  usage = tmp_path / 'cpuacct.usage'
  usage.write_text('12500000000\n')
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V1', str(usage))
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V2', str(tmp_path / 'none'))
  assert suite_cost._docker_cpu_seconds() == 12.5  # pylint: disable=protected-access


def test_docker_cpu_from_cgroup_v2_microseconds(tmp_path, monkeypatch):
  stat = tmp_path / 'cpu.stat'
  stat.write_text('usage_usec 7250000\nuser_usec 7000000\n'
                  'system_usec 250000\n')
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V1', str(tmp_path / 'none'))
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V2', str(stat))
  assert suite_cost._docker_cpu_seconds() == 7.25  # pylint: disable=protected-access


def test_no_docker_cgroup_counts_nothing(tmp_path, monkeypatch):
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V1', str(tmp_path / 'none'))
  monkeypatch.setattr(suite_cost, '_DOCKER_CPU_V2', str(tmp_path / 'none'))
  assert suite_cost._docker_cpu_seconds() is None  # pylint: disable=protected-access


def test_speed_probe_is_the_least_cpu_time_of_its_repeats(monkeypatch):
  clock = iter([10.0, 10.7, 20.0, 20.5, 30.0, 30.9])
  monkeypatch.setattr(suite_cost.time, 'process_time', lambda: next(clock))
  assert suite_cost.speed_probe(repeats=3) == pytest.approx(0.5)
