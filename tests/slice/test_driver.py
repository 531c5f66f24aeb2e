"""The driver of a multi-host slice: workers, resolver, RunConfig, refusals."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.slice import driver
from tfx_tpu_trainer.training import estimator_builder

from tests.conftest import REPO_ROOT
from tests.fixtures import slice_workers

from_custom_config = config_lib.TrainerConfig.from_custom_config
WORKERS = ['trainer-workers-0.trainer-workers', 'trainer-workers-1.trainer-workers:8471']


def test_tpu_workers_are_parsed_with_the_default_port():
  config = from_custom_config({'tpu_workers': WORKERS}, environ={})
  assert config.tpu_workers == ('trainer-workers-0.trainer-workers:8470',
                                'trainer-workers-1.trainer-workers:8471')
  assert config.use_tpu  # A slice is a TPU unless use_tpu says otherwise.
  assert driver.worker_addresses(config, environ={}) == config.tpu_workers


@pytest.mark.parametrize('value,message', [
    ([], 'must be a non-empty list of worker addresses'),
    ('h0,h1', 'must be a non-empty list of worker addresses'),
    (['h0', 'h0:8470'], 'names h0:8470 more than once'),
    (['h 0'], "'h 0' is not a worker address"),
    (['h0:99999'], "'h0:99999' is not a worker address"),
    ([7], '7 is not a string'),
])
def test_bad_tpu_workers_are_named(value, message):
  with pytest.raises(config_lib.ConfigError) as raised:
    from_custom_config({'tpu_workers': value}, environ={})
  assert "custom_config['tpu_workers']" in str(raised.value)
  assert message in str(raised.value)


def test_gke_hostnames_make_a_slice_only_with_several_hosts():
  config = from_custom_config({}, environ={'TPU_WORKER_HOSTNAMES': 'h0,h1'})
  assert config.use_tpu
  assert driver.worker_addresses(
      config, {'TPU_WORKER_HOSTNAMES': 'h0,h1'}) == ('h0:8470', 'h1:8470')
  single = from_custom_config({}, environ={'TPU_WORKER_HOSTNAMES': 'h0'})
  assert driver.worker_addresses(single, {'TPU_WORKER_HOSTNAMES': 'h0'}) == ()
  with pytest.raises(driver.SliceError, match='TPU_WORKER_HOSTNAMES'):
    driver.worker_addresses(single, {'TPU_WORKER_HOSTNAMES': 'h0,h 1'})


@pytest.mark.parametrize('hostnames,separator', [
    ('h0;h1', ';'), ('h0 h1', ' '), ('h0|h1:8471', '|')])
def test_hosts_not_separated_by_commas_are_not_one_host(hostnames, separator):
  environ = {'TPU_WORKER_HOSTNAMES': hostnames}
  config = from_custom_config({}, environ=environ)
  with pytest.raises(driver.SliceError) as raised:
    driver.worker_addresses(config, environ)
  assert f"TPU_WORKER_HOSTNAMES: '{hostnames}' is not a worker address" in (
      str(raised.value))
  assert f'Separate the hosts with commas, not {separator!r}.' in str(
      raised.value)


@pytest.mark.parametrize('port', ['\u00b2', '\u0668\u0664\u0667\u0660'])
def test_a_non_ascii_port_is_a_config_error(port):
  with pytest.raises(config_lib.ConfigError) as raised:
    from_custom_config({'tpu_workers': [f'h0:{port}']}, environ={})
  assert f"'h0:{port}' is not a worker address" in str(raised.value)


@pytest.mark.parametrize('name', [driver.WAIT_SECS_ENV,
                                  driver.LOST_SECS_ENV])
@pytest.mark.parametrize('value', ['nan', 'inf', '-1', 'soon'])
def test_waits_are_positive_finite_seconds(name, value):
  read = (driver.wait_secs if name == driver.WAIT_SECS_ENV
          else driver.lost_secs)
  with pytest.raises(driver.SliceError) as raised:
    read({name: value})
  assert f"{name}='{value}' is not a positive, finite number" in str(
      raised.value)


def test_tensorflow_resolves_the_grpc_list_to_worker_0_and_every_worker():
  addresses = ('h0.svc:8470', 'h1.svc:8470', 'h2.svc:8470', 'h3.svc:8470')
  resolver = driver.resolver_for(addresses)
  # tensorflow/python/tpu/client/client.py parses the list, no Cloud API.
  assert resolver.master() == 'grpc://h0.svc:8470'
  assert resolver.cluster_spec().as_dict() == {'worker': list(addresses)}


def test_run_config_of_a_tpu_slice_names_every_worker():
  config = from_custom_config({'tpu_workers': WORKERS, 'use_tpu': True},
                              environ={})
  run_config = estimator_builder.build_run_config(config, '/tmp/model')
  assert run_config.master == 'grpc://trainer-workers-0.trainer-workers:8470'
  assert run_config.evaluation_master == run_config.master
  cluster = tf.train.ClusterSpec(run_config.session_config.cluster_def)
  assert cluster.as_dict() == {'worker': list(config.tpu_workers)}
  assert run_config.device_fn is None  # TPUEstimator places the TPU graph.
  assert run_config.tpu_config.per_host_input_for_training == (
      tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2)


def test_off_tpu_the_variables_spread_over_every_worker():
  config = from_custom_config({'tpu_workers': WORKERS, 'use_tpu': False},
                              environ={})
  run_config = estimator_builder.build_run_config(config, '/tmp/model')
  with tf.Graph().as_default(), tf.compat.v1.device(run_config.device_fn):
    variables = [tf.compat.v1.get_variable(f'v{i}', [1]) for i in range(4)]
    ops = tf.constant(1.0)
  assert [v.device for v in variables] == [
      '/job:worker/task:0', '/job:worker/task:1', '/job:worker/task:0',
      '/job:worker/task:1']
  assert ops.device == '/job:worker/task:0'


@pytest.mark.parametrize('what,path', [
    ('train data', '/data/Split-train/*'),
    ("custom_config['checkpoint_dir']", '/mnt/checkpoints'),
    ('the model_run artifact', 'file:///pipeline/model_run/1'),
])
def test_local_paths_of_a_remote_slice_are_refused_naming_them(what, path):
  config = from_custom_config({'tpu_workers': WORKERS}, environ={})
  paths = {'train data': ['gs://b/train/*'],
           "custom_config['checkpoint_dir']": ['gs://b/checkpoints'],
           'the model_run artifact': ['gs://b/model_run/1']}
  driver.check_driver(config, paths, environ={})  # All on gs://: fine.
  paths[what] = [path]
  with pytest.raises(driver.SliceError) as raised:
    driver.check_driver(config, paths, environ={})
  message = str(raised.value)
  assert f'{what} {path!r} is a local path' in message
  assert 'gs://' in message and '2-host slice' in message


def test_local_paths_are_kept_when_every_worker_runs_here():
  config = from_custom_config(
      {'tpu_workers': ['localhost:1234', '127.0.0.1:1235']}, environ={})
  driver.check_driver(config, {'train data': ['/data/train/*']},
                         environ={})


def test_a_tf_config_cluster_beside_a_slice_is_refused():
  config = from_custom_config({'tpu_workers': WORKERS}, environ={})
  environ = {'TF_CONFIG': json.dumps(
      {'cluster': {'chief': ['c:1'], 'worker': ['w:1']},
       'task': {'type': 'chief', 'index': 0}})}
  with pytest.raises(driver.SliceError, match='driver of a slice is one'):
    driver.check_driver(config, {}, environ=environ)


def test_the_wait_names_the_worker_that_did_not_answer(tmp_path,
                                                       monkeypatch):
  workers = slice_workers.LocalSlice(str(tmp_path), count=1)
  absent = f'localhost:{slice_workers.free_ports(1)[0]}'
  monkeypatch.setenv(driver.WAIT_SECS_ENV, '3')
  try:
    workers.wait_until_serving()
    with pytest.raises(driver.SliceError) as raised:
      with driver.driving(workers.addresses + [absent], str(tmp_path)):
        pass
    # The worker that answered was told the driver is done, and ended.
    assert workers.wait() == [0]
  finally:
    workers.stop()
  message = str(raised.value)
  assert '1 of the 2 TPU workers of the slice did not answer' in message
  assert f'worker 1 ({absent})' in message
  assert f'worker 0 ({workers.addresses[0]})' not in message
  assert 'python -m tfx_tpu_trainer.slice.worker' in message
  assert f'{driver.WAIT_SECS_ENV} sets the wait.' in message


def test_one_worker_named_twice_is_refused(tmp_path):
  # localhost:P and 127.0.0.1:P are different strings for one server; a
  # slice of them fails in training and then hangs in its session's close.
  workers = slice_workers.LocalSlice(str(tmp_path), count=1)
  port = workers.ports[0]
  try:
    workers.wait_until_serving()
    with pytest.raises(driver.SliceError) as raised:
      with driver.driving([f'localhost:{port}', f'127.0.0.1:{port}'],
                             str(tmp_path)):
        pass
    assert workers.wait() == [0]  # Told the driver is done.
  finally:
    workers.stop()
  assert (f'worker 0 (localhost:{port}) and worker 1 (127.0.0.1:{port}) are '
          'one worker process') in str(raised.value)


def test_the_wait_says_whom_it_waits_for_and_until_when(tmp_path):
  workers = slice_workers.LocalSlice(str(tmp_path), count=1)
  lines = []
  try:
    workers.wait_until_serving()
    links = [driver.WorkerLink(0, workers.addresses[0])]
    driver.wait_for_workers(links, 600, wait_set_by='--timeout',
                               report=lines.append)
    links[0].send(driver.DONE)
    links[0].close()
    assert workers.wait() == [0]
  finally:
    workers.stop()
  assert re.fullmatch(
      r'Waiting up to 600 s \(until \d\d:\d\d:\d\d; --timeout sets it\) '
      r'for the 1 TPU workers of the slice: worker 0 \(localhost:\d+\)\.',
      lines[0])
  assert re.fullmatch(r'TPU worker 0 \(localhost:\d+\) answered after '
                      r'[\d.]+ s\.', lines[1])


def _worker(args, env=None):
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer.slice.worker'] + args,
      cwd=REPO_ROOT, capture_output=True, text=True,
      env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize('args,env,message', [
    (['--port', '0'], {}, "argument --port: '0' is not a port"),
    (['--driver-timeout', '-5'], {},
     "argument --driver-timeout: '-5' is not a positive, finite number"),
    (['--driver-timeout', 'nan'], {},
     "argument --driver-timeout: 'nan' is not a positive, finite number"),
    (['--driver-start-timeout', 'inf'], {},
     "argument --driver-start-timeout: 'inf' is not a positive, finite"),
    (['--port', '\u00b2'], {}, "argument --port: '\u00b2' is not a port"),
    ([], {'TPU_WORKER_ID': '\u00b9'},
     "TPU_WORKER_ID='\u00b9' is not a task index"),
    (['--task-index', '-1'], {}, '--task-index -1 is negative'),
    ([], {'JOB_COMPLETION_INDEX': 'x'},
     "JOB_COMPLETION_INDEX='x' is not a task index"),
])
def test_bad_worker_arguments_exit_2_naming_them(args, env, message):
  result = _worker(args, env)
  assert result.returncode == 2
  assert message in result.stderr


def test_a_worker_whose_driver_never_comes_ends(tmp_path):
  port = slice_workers.free_ports(1)[0]
  result = _worker(['--port', str(port), '--driver-start-timeout', '1'],
                   {'JOB_COMPLETION_INDEX': '3'})
  assert result.returncode == 3
  assert 'TPU worker 3 serving at' in result.stderr
  assert ('no driver came within 1 s of this worker\'s start '
          '(--driver-start-timeout 1)') in result.stderr


def test_the_driver_timeout_counts_from_the_drivers_last_word(tmp_path):
  workers = slice_workers.LocalSlice(str(tmp_path), count=1,
                                     driver_timeout=1)
  try:
    workers.wait_until_serving()
    time.sleep(2)  # A driver that reaches its trainer late.
    link = driver.WorkerLink(0, workers.addresses[0])
    assert link.send(driver.ALIVE) is None  # The worker still serves.
    link.close()
    # Then 1 s without a word: the driver is gone.
    assert workers.wait() == [3]
  finally:
    workers.stop()
  log = workers.log(0)
  assert 'the driver is here' in log
  assert 'no word from the driver for' in log
  assert '(--driver-timeout 1): the driver is gone' in log


@pytest.mark.parametrize('error,described', [
    # What a session on the same server named twice raised here.
    (tf.errors.InvalidArgumentError(
        None, None, 'Graph execution error:\n\n/job:worker/replica:0/task:1/'
        'device:CPU:0 unknown device.\nAdditional GRPC error information from '
        'remote target /job:worker/replica:0/task:1 while calling '
        '/tensorflow.WorkerService/RegisterGraph:\n:{"created":"@1796440424"}'),
     'InvalidArgumentError: /job:worker/replica:0/task:1/device:CPU:0 unknown '
     'device.'),
    # What a probe of a stopped worker raised here.
    (tf.errors.DeadlineExceededError(
        None, None, 'Graph execution error:\n\nDeadline Exceeded'),
     'DeadlineExceededError: no answer within 10 s (the worker took the '
     'connection: is its process stopped or overloaded?)'),
    (tf.errors.UnavailableError(
        None, None, "Graph execution error:\n\nDetected at node 'x' defined "
        'at (most recent call last):\n  File "a.py", line 1, in <module>\n'
        "    x = read()\nNode: 'x'\nfailed to connect to all addresses"),
     'UnavailableError: failed to connect to all addresses'),
])
def test_worker_errors_say_what_happened(error, described):
  assert driver.describe_error(error) == described


def test_the_earlier_worker_command_runs_the_same_worker():
  """Hosts set up with `python -m tfx_tpu_trainer.tpu.worker` keep working."""
  earlier = subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer.tpu.worker', '--port', '0'],
      cwd=REPO_ROOT, capture_output=True, text=True)
  assert earlier.returncode == 2
  assert "argument --port: '0' is not a port" in earlier.stderr
