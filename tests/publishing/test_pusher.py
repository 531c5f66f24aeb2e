"""Each push claims its own model version, even within one second."""

import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_tpu_trainer.publishing import pusher
from tfx_tpu_trainer.publishing import versions

from tests.conftest import REPO_ROOT
from tests.fixtures import full_disk


def _saved_model(model_uri, value):
  module = tf.Module()
  module.value = tf.Variable(float(value))
  module.read = tf.function(lambda: module.value, input_signature=[])
  path = path_utils.serving_model_dir(model_uri)
  tf.saved_model.save(module, path)
  return path


def _served_value(version_dir):
  loaded = tf.saved_model.load(version_dir)
  return float(loaded.read())


def _push(tmp_path, base, value):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / f'model{value}')
  _saved_model(model.uri, value)
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / f'blessing{value}')
  blessing.set_int_custom_property('blessed', 1)
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / f'pushed{value}')
  destination = ('{"filesystem": {"baseDirectory": "%s"}}' % base)
  pusher.Executor().Do({'model': [model], 'model_blessing': [blessing]},
                       {'pushed_model': [pushed]},
                       {'push_destination': destination})
  return pushed


def test_a_push_in_a_taken_second_gets_the_next_free_version(tmp_path):
  base = tmp_path / 'serving'
  now = int(time.time())
  # Another run pushed in this second (and, to be sure, the next 120).
  for version in range(now, now + 121):
    (base / str(version)).mkdir(parents=True)
    (base / str(version) / 'other-run').write_text('x')
  pushed = _push(tmp_path, str(base), 7)
  destination = pushed.get_string_custom_property('pushed_destination')
  version = int(os.path.basename(destination))
  assert version > now + 120
  assert pushed.get_string_custom_property('pushed_version') == str(version)
  assert pushed.get_int_custom_property('pushed') == 1
  assert _served_value(destination) == 7.0
  for taken in range(now, now + 121):
    assert os.listdir(base / str(taken)) == ['other-run']
  assert not [name for name in os.listdir(base)
              if name.startswith(versions.STAGING_PREFIX)]


_PUSH_AT_ONCE = (
    'import os, sys, time\n'
    'from tfx_tpu_trainer.publishing import versions\n'
    'model, base, go = sys.argv[1:]\n'
    'while not os.path.exists(go):\n'
    '  time.sleep(0.001)\n'
    'print(versions.push_new_version(model, base), flush=True)\n')


def test_two_runs_pushing_at_once_get_two_versions(tmp_path):
  base = str(tmp_path / 'serving')
  go = str(tmp_path / 'go')
  processes = []
  for value in (1, 2):
    model_path = _saved_model(str(tmp_path / f'model{value}'), value)
    processes.append((value, subprocess.Popen(
        [sys.executable, '-c', _PUSH_AT_ONCE, model_path, base, go],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)))
  time.sleep(0.5)  # Both import and wait; the test passes however long.
  open(go, 'w').close()
  pushed = {}
  for value, process in processes:
    out, _ = process.communicate()
    assert process.returncode == 0
    pushed[value] = out.strip().splitlines()[-1]
  assert pushed[1] != pushed[2]
  assert {_served_value(path) for path in pushed.values()} == {1.0, 2.0}
  assert _served_value(pushed[1]) == 1.0


def test_the_taxi_pipeline_pushes_with_this_executor():
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  taxi_pipeline = paths.taxi_pipeline()
  options = taxi_pipeline.TaxiPipelineOptions(
      pipeline_root='/tmp/root', data_root='/tmp/data',
      serving_model_dir='/tmp/serving',
      trainer_module_file=paths.TRAINER_MODULE_FILE,
      preprocessing_module_file=paths.PREPROCESSING_MODULE_FILE)
  pipeline = taxi_pipeline.create_pipeline(options)
  [component] = [c for c in pipeline.components if c.id == 'Pusher']
  assert component.executor_spec.executor_class is pusher.Executor


_PUSH = (
    'import sys\n'
    'from tfx_tpu_trainer.publishing import versions\n'
    'print(versions.push_new_version(*sys.argv[1:]), flush=True)\n')


def _staging(base):
  return sorted(name for name in os.listdir(base)
                if name.startswith(versions.STAGING_PREFIX))


def _start_push_caught_copying(model_path, base):
  """A push process stopped while it copies; None if it finished first."""
  before = set(_staging(base))
  process = subprocess.Popen([sys.executable, '-c', _PUSH, model_path, base],
                             cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
  while process.poll() is None:
    dirs = [n for n in _staging(base)
            if n not in before and not n.endswith('.lock')]
    if dirs and os.listdir(os.path.join(base, dirs[0])):
      process.send_signal(signal.SIGSTOP)
      return process
    time.sleep(0.001)
  return None


def test_a_push_removes_what_killed_pushes_left_and_keeps_running_ones(
    tmp_path):
  model_path = _saved_model(str(tmp_path / 'model'), 3)
  for i in range(300):  # Enough files that a copy can be caught midway.
    (tmp_path / 'model' / 'Format-Serving' / 'assets').mkdir(exist_ok=True)
    (tmp_path / 'model' / 'Format-Serving' / 'assets' / f'f{i}').write_bytes(
        b'x' * 4096)
  base = str(tmp_path / 'serving')
  os.makedirs(base)
  running = None
  while running is None:  # Stays stopped mid-copy: a push still running.
    running = _start_push_caught_copying(model_path, base)
  killed = 0
  while killed < 3:
    process = _start_push_caught_copying(model_path, base)
    if process is not None:
      process.kill()
      process.wait()
      killed += 1
  # Each push removes what the pushes killed before it left: the last
  # killed one's and the stopped one's folder and lock remain.
  assert len(_staging(base)) == 2 * 2

  pushed = versions.push_new_version(model_path, base)
  assert _served_value(pushed) == 3.0
  # Only the stopped push's folder and lock remain: its lock is held.
  remaining = _staging(base)
  assert len(remaining) == 2 and remaining[1] == remaining[0] + '.lock'
  running.send_signal(signal.SIGCONT)
  assert running.wait() == 0
  assert not _staging(base)
  versions_pushed = [n for n in os.listdir(base) if n.isdigit()]
  assert len(versions_pushed) == 2


def test_stock_pushers_of_a_user_pipeline_each_get_their_own_version(
    tmp_path):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx.components.pusher import executor as stock_executor  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import executor_spec  # pylint: disable=g-import-not-at-top
  from tfx.types import channel as channel_types  # pylint: disable=g-import-not-at-top
  base = tmp_path / 'serving'

  def stock_pusher(name):
    return tfx.components.Pusher(
        model=channel_types.Channel(type=standard_artifacts.Model),
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=str(base)))).with_id(name)

  first, second = stock_pusher('FirstPusher'), stock_pusher('SecondPusher')
  second.executor_spec.add_extra_flags(['--flag'])
  custom = stock_pusher('CustomPusher')
  other = tfx.components.SchemaGen(
      statistics=channel_types.Channel(
          type=standard_artifacts.ExampleStatistics))
  custom.executor_spec = executor_spec.ExecutorClassSpec(pusher.Executor)
  assert first.executor_spec.executor_class is stock_executor.Executor
  assert pusher.own_versions_for_stock_pushers(
      [first, second, custom, other]) == ['FirstPusher', 'SecondPusher']
  assert second.executor_spec.extra_flags == ['--flag']
  # Both push in one second (taken ones around it), each its own model.
  now = int(time.time())
  for version in range(now, now + 121):
    (base / str(version)).mkdir(parents=True)
  destinations = []
  for node, value in ((first, 1), (second, 2)):
    assert node.executor_spec.executor_class is pusher.Executor
    model = standard_artifacts.Model()
    model.uri = str(tmp_path / f'model{value}')
    _saved_model(model.uri, value)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / f'pushed{value}')
    node.executor_spec.executor_class().Do(
        {'model': [model]}, {'pushed_model': [pushed]},
        {'push_destination': '{"filesystem": {"baseDirectory": "%s"}}' %
                             base})
    destinations.append(pushed.get_string_custom_property(
        'pushed_destination'))
  assert destinations[0] != destinations[1]
  assert [_served_value(d) for d in destinations] == [1.0, 2.0]


@pytest.mark.parametrize('left_before', [
    # A killed push's staging folder and its lock: the cleanup's lock of it
    # is the first write.
    'mkdir -p {base}/.push-0123abcd && touch {base}/.push-0123abcd.lock',
    'mkdir -p {base}/.push-0123abcd',  # Its lock file gone too.
    'mkdir -p {base}',  # Nothing left: the push's own lock is the first.
])
def test_a_read_only_serving_folder_is_the_push_s_one_clear_error(
    tmp_path, left_before):
  mount = tmp_path / 'read_only'
  mount.mkdir()
  if not full_disk.can_mount_tmpfs(str(mount)):
    pytest.skip('unshare -rm cannot mount a tmpfs here (no user namespaces)')
  base = str(mount / 'serving')
  model_path = _saved_model(str(tmp_path / 'model'), 5)
  result = full_disk.run_on_tmpfs(
      '1m', str(mount), ['push', model_path, base],
      read_only_after=left_before.format(base=base))
  assert result['error_type'] == 'PushError', result
  assert result['message'] == (
      f'Cannot push the model to {base}: the serving directory is not '
      'writable (Read-only file system). No version was published. Make it '
      'writable, or set the Pusher\'s push_destination to a directory this '
      'process can write, then run the pipeline again.'), result['message']
