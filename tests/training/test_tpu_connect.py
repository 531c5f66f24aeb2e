"""A TPU named by address is asked before training, for a bounded time.

Real endpoints on this machine: a closed port, an HTTP/2 server answering
404 to every request (what a web server at the TPU's address answers), and
a TensorFlow server without a TPU; TensorFlow's own gRPC session asks them.
"""

import os
import socket
import subprocess
import sys
import threading

import pytest

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.training import tpu_connect

from_custom_config = config_lib.TrainerConfig.from_custom_config

_PREFACE = b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'
_HEADERS, _SETTINGS = 1, 4
_END_STREAM, _END_HEADERS, _ACK = 0x1, 0x4, 0x1
# HPACK: the static table's entry 13 is `:status: 404`.
_STATUS_404 = bytes([0x80 | 13])


def _frame(kind, flags, stream, payload=b''):
  return (len(payload).to_bytes(3, 'big') + bytes([kind, flags]) +
          stream.to_bytes(4, 'big') + payload)


def _read(connection, size):
  data = b''
  while len(data) < size:
    chunk = connection.recv(size - len(data))
    if not chunk:
      raise EOFError
    data += chunk
  return data


def _answer_404(connection):
  """One HTTP/2 connection: every request's answer is status 404."""
  with connection:
    try:
      _read(connection, len(_PREFACE))
      connection.sendall(_frame(_SETTINGS, 0, 0))
      while True:
        header = _read(connection, 9)
        length = int.from_bytes(header[:3], 'big')
        kind, flags = header[3], header[4]
        stream = int.from_bytes(header[5:9], 'big') & 0x7fffffff
        _read(connection, length)
        if kind == _SETTINGS and not flags & _ACK:
          connection.sendall(_frame(_SETTINGS, _ACK, 0))
        elif kind == _HEADERS:
          connection.sendall(_frame(_HEADERS, _END_STREAM | _END_HEADERS,
                                    stream, _STATUS_404))
    except (EOFError, OSError):
      pass


@pytest.fixture
def http2_404_address():
  """grpc://127.0.0.1:PORT of an HTTP/2 server that answers 404."""
  server = socket.create_server(('127.0.0.1', 0))
  stop = threading.Event()

  def serve():
    server.settimeout(0.2)
    while not stop.is_set():
      try:
        connection, _ = server.accept()
      except socket.timeout:
        continue
      connection.settimeout(None)
      threading.Thread(target=_answer_404, args=(connection,),
                       daemon=True).start()

  thread = threading.Thread(target=serve, daemon=True)
  thread.start()
  yield f'grpc://127.0.0.1:{server.getsockname()[1]}'
  stop.set()
  thread.join()
  server.close()


@pytest.fixture
def closed_port_address():
  """grpc://127.0.0.1:PORT where nothing listens."""
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  return f'grpc://127.0.0.1:{port}'


def _tpu_from_environment(monkeypatch, address, wait_secs=1):
  monkeypatch.setenv('TPU_NAME', address)
  config = from_custom_config({'tpu_wait_secs': wait_secs})
  assert config.use_tpu  # TPU_NAME switches the run to the TPU.
  return config


@pytest.mark.parametrize('endpoint', ['closed_port_address',
                                      'http2_404_address'])
def test_a_tpu_address_that_does_not_answer_is_named(request, monkeypatch,
                                                     endpoint):
  address = request.getfixturevalue(endpoint)
  config = _tpu_from_environment(monkeypatch, address)
  with pytest.raises(tpu_connect.TPUUnreachableError) as raised:
    tpu_connect.wait_for_tpu(config)
  message = str(raised.value)
  assert message.startswith(
      f'TPU {address} did not answer within '

      "custom_config['tpu_wait_secs']=1 s ("), message
  assert 'so training did not start' in message
  assert f'The TPU comes from TPU_NAME={address} in the environment.' in (
      message)
  assert 'Check that the TPU is READY' in message
  assert ("unset TPU_NAME or set custom_config['use_tpu']=False "
          '(`run --no-use-tpu`)') in message
  assert isinstance(raised.value, ConnectionError)


def test_a_tpu_named_in_custom_config_says_so(closed_port_address):
  config = from_custom_config({'tpu': closed_port_address,
                               'tpu_wait_secs': 1}, environ={})
  with pytest.raises(tpu_connect.TPUUnreachableError) as raised:
    tpu_connect.wait_for_tpu(config)
  assert "The TPU comes from custom_config['tpu']." in str(raised.value)
  assert 'unset TPU_NAME' not in str(raised.value)


_TF_SERVER = '''
import sys
import tensorflow as tf
server = tf.distribute.Server.create_local_server()
print(server.target, flush=True)
sys.stdin.read()
'''


def test_a_tensorflow_server_without_a_tpu_is_named(monkeypatch):
  server = subprocess.Popen([sys.executable, '-c', _TF_SERVER],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
  try:
    address = server.stdout.readline().strip()
    assert address.startswith('grpc://'), address
    config = _tpu_from_environment(monkeypatch, address, wait_secs=120)
    with pytest.raises(tpu_connect.TPUUnreachableError) as raised:
      tpu_connect.wait_for_tpu(config)
  finally:
    server.stdin.close()
    server.wait()
  assert str(raised.value).startswith(
      f'TPU {address} answers, but lists no TPU device')


@pytest.mark.parametrize('custom_config,environ', [
    ({}, {}),  # No TPU.
    ({'use_tpu': False}, {'TPU_NAME': 'grpc://127.0.0.1:1'}),
    ({'tpu': 'local'}, {}),  # A TPU VM's own chips: checked where used.
])
def test_nothing_is_asked_without_a_remote_tpu(custom_config, environ):
  config = from_custom_config(custom_config, environ=environ)
  assert tpu_connect.wait_for_tpu(config) is None


@pytest.mark.parametrize('value', [0, -5, 1.5, 'soon', True])
def test_tpu_wait_secs_must_be_a_positive_integer(value):
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['tpu_wait_secs'\] must be a "
                     'positive integer'):
    from_custom_config({'tpu_wait_secs': value}, environ={})


@pytest.mark.slow
def test_the_trainer_fails_before_training_naming_the_address(
    taxi_artifacts, tmp_path, monkeypatch, closed_port_address):
  from tfx_tpu_trainer import executor  # pylint: disable=g-import-not-at-top
  from tests.conftest import TEST_MODULES_DIR  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pipeline_outputs  # pylint: disable=g-import-not-at-top
  monkeypatch.setenv('TPU_NAME', closed_port_address)
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path),
      os.path.join(TEST_MODULES_DIR, 'linear_module.py'),
      custom_config={'tpu_wait_secs': 1}, train_steps=10, eval_steps=2)
  with pytest.raises(tpu_connect.TPUUnreachableError) as raised:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert str(raised.value).startswith(
      f'TPU {closed_port_address} did not answer within '
      "custom_config['tpu_wait_secs']=1 s")
  # Nothing was built or written: no checkpoint, no model.
  for uri in (run.model.uri, run.model_run.uri):
    assert not os.path.exists(uri) or not os.listdir(uri), uri
