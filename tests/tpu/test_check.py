"""`tfx-tpu-trainer tpu-check`: on this machine (no TPU) it fails at once with
one line; each check names what it found or what to do; the round trip is the
trainer's own code, run here on CPU; a child that crashes or hangs is named
by the step it was in."""

import os
import stat
import subprocess
import sys

import pytest

from tfx_tpu_trainer.tpu import check as tpu_check
from tfx_tpu_trainer.tpu import runtimes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NO_TPU_ENV = {k: v for k, v in os.environ.items()
               if k not in tpu_check.TPU_NAME_ENVS}


def test_cli_without_a_tpu_fails_at_once_with_one_line_and_no_tensorflow():
  code = ('import sys\n'
          'from tfx_tpu_trainer_cli import main\n'
          'rc = main.main(["tpu-check"])\n'
          'print("tensorflow imported:", "tensorflow" in sys.modules)\n'
          'sys.exit(rc)\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=REPO,
                          env=_NO_TPU_ENV, capture_output=True, text=True,
                          check=False)
  assert result.returncode == 1
  assert result.stdout == 'tensorflow imported: False\n'
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(
      'tfx-tpu-trainer tpu-check: FAILED  tpu: no TPU on this machine (no '
      '/dev/accel*, no /dev/vfio/<n>, no TPU_NAME or '
      'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS); run it in the TPU image')
  assert '--tpu-check' in lines[0]


def test_run_checks_stops_at_the_first_failure(tmp_path):
  results = tpu_check.run_checks(environ={}, dev_dir=str(tmp_path))
  assert [(r.step, r.ok) for r in results] == [('tpu', False)]


def _pci(tmp_path, *devices):
  """A PCI device listing like /sys/bus/pci/devices: (vendor, device) each."""
  pci = tmp_path / 'pci'
  pci.mkdir()
  for i, (vendor, device) in enumerate(devices):
    folder = pci / f'0000:00:{i + 4:02x}.0'
    folder.mkdir()
    (folder / 'vendor').write_text(vendor + '\n')
    (folder / 'device').write_text(device + '\n')
  return str(pci)


VIRTIO = ('0x1af4', '0x1000')
NVIDIA = ('0x10de', '0x20b5')
GOOGLE_GVNIC = ('0x1ae0', '0x0042')  # Google's, but a network card.
V4_CHIP = ('0x1ae0', '0x005e')
V5E_CHIP = ('0x1ae0', '0x0063')


@pytest.mark.parametrize('files,pci,environ,ok', [
    (['accel0', 'accel1'], [V4_CHIP, V4_CHIP, VIRTIO], {}, True),  # v4
    (['vfio/0'], [V5E_CHIP], {}, True),                          # v5e
    (['vfio/vfio'], [VIRTIO], {}, False),   # the VFIO control file alone
    ([], [VIRTIO], {'TPU_NAME': 'my-tpu'}, True),
    ([], [VIRTIO], {'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS': 'grpc://10.0.0.2:8470'},
     True),
    ([], [VIRTIO], {}, False),
    ([], [V5E_CHIP], {}, True),  # On the bus, before its device files.
])
def test_tpu_present_from_the_pci_bus_or_a_name(tmp_path, files, pci, environ,
                                                ok):
  for name in files:
    path = tmp_path / 'dev' / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('')
  result = tpu_check.check_tpu_present(environ, str(tmp_path / 'dev'),
                                       _pci(tmp_path, *pci))
  assert result.ok is ok
  if ok:
    assert all(os.path.join(str(tmp_path / 'dev'), f) in result.detail
               for f in files)
    chips = [p for p in pci if p in (V4_CHIP, V5E_CHIP)]
    assert result.detail.count('(TPU v') == len(chips)


@pytest.mark.parametrize('other_device', [NVIDIA, GOOGLE_GVNIC])
def test_another_vfio_device_is_not_a_tpu(tmp_path, other_device):
  (tmp_path / 'dev' / 'vfio').mkdir(parents=True)
  (tmp_path / 'dev' / 'vfio' / '12').write_text('')
  result = tpu_check.check_tpu_present(
      {}, str(tmp_path / 'dev'), _pci(tmp_path, VIRTIO, other_device))
  assert not result.ok
  assert result.detail == (
      f'{tmp_path}/dev/vfio/12 but no TPU chip on the PCI bus '
      f'({tmp_path}/pci: no device of vendor 0x1ae0 with a TPU device id): '
      'another VFIO or accelerator device, not a TPU')


def test_device_files_without_a_readable_pci_bus_are_unsure(tmp_path):
  (tmp_path / 'dev').mkdir()
  (tmp_path / 'dev' / 'accel0').write_text('')
  result = tpu_check.check_tpu_present({}, str(tmp_path / 'dev'),
                                       str(tmp_path / 'no-sysfs'))
  assert result.ok
  assert result.detail == (
      f'{tmp_path}/dev/accel0 (unsure: {tmp_path}/no-sysfs is not readable, '
      'so the devices are not known to be TPU chips)')


def test_libtpu_found_by_variable_with_the_image_version(tmp_path):
  library = tmp_path / 'libtpu.so'
  library.write_bytes(b'\x7fELF')
  result = tpu_check.check_libtpu({
      'TPU_LIBRARY_PATH': str(library),
      runtimes.LIBTPU_VERSION_ENV: '1.9.0'})
  assert result.ok
  assert result.detail == f'{library}, version 1.9.0'


def test_libtpu_missing_says_this_is_not_the_tpu_image(tmp_path):
  result = tpu_check.check_libtpu(
      {'TPU_LIBRARY_PATH': str(tmp_path / 'missing.so')})
  if os.path.exists(runtimes.LIBTPU_PATH):
    pytest.skip(f'{runtimes.LIBTPU_PATH} exists on this machine')
  assert not result.ok
  assert result.detail.startswith('no libtpu.so (TF_PLUGGABLE_DEVICE_LIBRARY'
                                  '_PATH, TPU_LIBRARY_PATH unset or missing')
  assert result.advice.startswith('this is not the TPU image: run it in the '
                                  'TPU image (Dockerfile targets tpu-se / '
                                  'tpu-pjrt)')


@pytest.mark.parametrize('environ,ok,text', [
    ({runtimes.ACCELERATOR_ENV: 'tpu-v4-podslice',
      runtimes.RUNTIME_ENV: 'se'}, True,
     'se on tpu-v4-podslice (TPU v4)'),
    (dict(runtimes.PJRT_ENV, **{runtimes.ACCELERATOR_ENV: 'tpu-v5p-slice',
                                runtimes.RUNTIME_ENV: 'pjrt'}), True,
     'pjrt on tpu-v5p-slice (TPU v5p); reported broken: '
     'https://github.com/tensorflow/tensorflow/issues/90807'),
    ({runtimes.ACCELERATOR_ENV: 'tpu-v5-lite-podslice'}, False,
     'tpu-runtime se is not supported on TPU v5e (tpu-v5-lite-podslice): '
     'TensorFlow 2.15 runs v5e with pjrt only'),
    ({runtimes.RUNTIME_ENV: 'pjrt'}, False,
     'the step asks for the pjrt runtime (TFX_TPU_TRAINER_TPU_RUNTIME) but '
     'the process runs se'),
    ({}, True, 'se'),
])
def test_runtime_check(environ, ok, text):
  result = tpu_check.check_runtime(environ)
  assert result.ok is ok
  assert result.detail.startswith(text), result.detail
  if environ.get(runtimes.RUNTIME_ENV) == 'pjrt' and not ok:
    assert result.advice.startswith('use the Dockerfile target tpu-pjrt as '
                                    'the trainer image (PJRT needs '
                                    'NEXT_PLUGGABLE_DEVICE_USE_C_API=true')


def _fake_python(tmp_path, body):
  """A stand-in for the child interpreter (no TPU runtime runs here)."""
  script = tmp_path / 'python'
  script.write_text('#!/bin/sh\n' + body)
  script.chmod(script.stat().st_mode | stat.S_IEXEC)
  return str(script)


def test_a_child_that_segfaults_is_named_by_its_step(tmp_path):
  python = _fake_python(tmp_path, (
      'echo \'{"event": "start", "step": "tpu system"}\'\n'
      'echo "E tpu_transfer_manager_interface.cc:28] Unable to retrieve '
      'registered TPU platform." >&2\n'
      'kill -SEGV $$\n'))
  results = tpu_check.run_child_steps('local', 60, python=python)
  assert len(results) == 1 and not results[0].ok
  assert results[0].step == 'tpu system'
  assert results[0].detail.startswith(
      'the process died of SIGSEGV; last output: E tpu_transfer_manager_'
      'interface.cc:28] Unable to retrieve registered TPU platform.')
  assert results[0].advice.startswith('the TPU runtime could not start')


def test_a_round_trip_failure_points_at_the_runtime(tmp_path):
  python = _fake_python(tmp_path, (
      'echo \'{"event": "start", "step": "tpu system"}\'\n'
      'echo \'{"event": "end", "step": "tpu system", "ok": true, "seconds": '
      '2.5, "result": {"master": "grpc://localhost:8470", "mesh_shape": '
      '[2, 2, 1, 2], "hosts": 1, "devices_per_host": 4, "devices": 4}}\'\n'
      'echo \'{"event": "start", "step": "round trip"}\'\n'
      'echo \'{"event": "end", "step": "round trip", "ok": false, "seconds": '
      '9.0, "detail": "InternalError: No TPU platform registered"}\'\n'
      'exit 1\n'))
  results = tpu_check.run_child_steps('local', 60, python=python)
  assert [(r.step, r.ok) for r in results] == [('tpu system', True),
                                               ('round trip', False)]
  assert results[0].detail == (
      "initialised from a TF1 session on 'grpc://localhost:8470': 4 TPU "
      'devices, 1 host(s), mesh 2x2x1x2')
  assert results[1].line() == (
      'FAILED  round trip: InternalError: No TPU platform registered; the TPU '
      'starts but TPUEstimator does not run on it with this runtime: on v4 '
      'use the StreamExecutor runtime (tpu-se); see '
      'https://github.com/tensorflow/tensorflow/issues/90807 and '
      'docs/guide/tpu_slices.md, "TPU runtimes"')


def test_a_child_that_hangs_is_killed_and_named(tmp_path):
  python = _fake_python(tmp_path, (
      'echo \'{"event": "start", "step": "tpu system"}\'\n'
      'exec sleep 600\n'))
  results = tpu_check.run_child_steps('local', 1, python=python)
  assert [(r.step, r.ok) for r in results] == [('tpu system', False)]
  assert results[0].detail == 'did not finish in 1 s (killed)'


@pytest.mark.slow
def test_the_real_child_on_this_machine_fails_to_start_the_tpu_system():
  results = tpu_check.run_child_steps('local', tpu_check.DEFAULT_TIMEOUT_SECS)
  assert [(r.step, r.ok) for r in results] == [('tpu system', False)]
  assert results[0].advice.startswith('the TPU runtime could not start')


@pytest.mark.slow
def test_round_trip_is_the_trainers_path_on_cpu(tmp_path):
  timings = {}
  result = tpu_check.round_trip(str(tmp_path), use_tpu=False, timings=timings)
  assert result['tag_sets'] == [['serve'], ['serve', 'tpu']]
  assert result['metrics']['global_step'] == tpu_check.ROUND_TRIP_TRAIN_STEPS
  # y is linear in x: 20 steps of gradient descent get below the 1.39 of
  # predicting 0 (E[y^2] for x uniform in [0, 1)^4 and these weights).
  assert result['metrics']['mse'] < 1.0
  assert result['predicted_examples'] == 2 * tpu_check.ROUND_TRIP_BATCH_SIZE
  assert set(timings) == {'build', 'train and evaluate', 'predict', 'export'}
  assert os.path.isdir(tmp_path / 'serving_model')


@pytest.mark.slow
def test_with_tensorflow_imported_the_tf_steps_run_in_process(tmp_path):
  import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  (tmp_path / 'dev').mkdir()
  (tmp_path / 'dev' / 'accel0').write_text('')
  library = tmp_path / 'libtpu.so'
  library.write_bytes(b'\x7fELF')
  results = tpu_check.run_checks(
      environ={'TPU_LIBRARY_PATH': str(library),
               runtimes.ACCELERATOR_ENV: 'tpu-v4-podslice',
               runtimes.RUNTIME_ENV: 'se'},
      dev_dir=str(tmp_path / 'dev'), pci_dir=_pci(tmp_path, V4_CHIP))
  # No TPU behind the device file: the TF1 session cannot start it.
  assert [(r.step, r.ok) for r in results] == [
      ('tpu', True), ('libtpu', True), ('runtime', True),
      ('tpu system', False)]
  assert results[-1].advice.startswith('the TPU runtime could not start')


def test_the_compiled_check_step_says_its_pod_got_no_tpu_and_leaves_ui_lines(
    tmp_path, monkeypatch):
  from tfx_tpu_trainer.publishing import step_outputs  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.kubeflow import tpu_check_step  # pylint: disable=g-import-not-at-top
  for name in tpu_check.TPU_NAME_ENVS:
    monkeypatch.delenv(name, raising=False)
  # As the compiled v5e step runs it: TFX's v1 entrypoint, the runtime env.
  monkeypatch.setenv(runtimes.ACCELERATOR_ENV, 'tpu-v5-lite-podslice')
  monkeypatch.setenv(runtimes.RUNTIME_ENV, 'pjrt')
  ui_path = tmp_path / 'mlpipeline-ui-metadata.json'
  monkeypatch.setattr(step_outputs, '_main_module_name',
                      lambda: step_outputs.TFX_V1_ENTRYPOINT)
  monkeypatch.setattr(sys, 'argv', ['entrypoint', '--metadata_ui_path',
                                    str(ui_path)])
  with pytest.raises(tpu_check.TPUCheckError) as e:
    tpu_check_step.TPUCheckExecutor().Do({}, {}, {})
  message = str(e.value)
  assert message.startswith('tpu-check failed: FAILED  tpu: no TPU on this '
                            'machine')
  assert ('; this pipeline step was compiled to run on a TPU '
          '(tpu-v5-lite-podslice, pjrt runtime: node selector '
          'cloud.google.com/gke-tpu-accelerator=tpu-v5-lite-podslice, a '
          'google.com/tpu limit) and its pod did not get one.') in message
  assert 'kubectl get nodes -l cloud.google.com/gke-tpu-accelerator=' in (
      message)
  assert '--tpu-check' not in message  # Not the advice of the CLI.
  [entry] = step_outputs.read_ui_outputs(str(ui_path))
  assert entry['type'] == 'markdown' and entry['storage'] == 'inline'
  assert entry['source'].startswith('# tpu-check: FAILED\n\n    FAILED  tpu: ')


@pytest.mark.slow
def test_inference_check_scores_the_round_trip_export_in_padded_batches(
    tmp_path):
  """On CPU: the {serve} graph, through the TPUBulkInferrer's handler."""
  tpu_check.round_trip(str(tmp_path), use_tpu=False)
  timings = {}
  result = tpu_check.inference_check(str(tmp_path), use_tpu=False,
                                     timings=timings)
  assert result['tags'] == ['serve']
  assert result['examples'] == tpu_check.INFERENCE_EXAMPLES
  assert tpu_check.INFERENCE_EXAMPLES % result['batch_size'] != 0
  assert result['examples_per_second'] > 0
  assert set(timings) == {'load', 'first batch', 'other batches'}


def test_an_inference_result_is_described_with_its_timings(tmp_path):
  python = _fake_python(tmp_path, ''.join(
      f'echo \'{{"event": "start", "step": "{step}"}}\'\n'
      f'echo \'{{"event": "end", "step": "{step}", "ok": true, '
      f'"seconds": 1.0, "result": {result}, "timings": {timings}}}\'\n'
      for step, result, timings in (
          ('tpu system', '{"master": "", "mesh_shape": [2, 2, 1, 2], '
           '"hosts": 1, "devices": 4}', '{}'),
          ('round trip', '{"metrics": {}, "tag_sets": []}', '{}'),
          ('inference', '{"tags": ["serve", "tpu"], "batch_size": 128, '
           '"examples": 300, "examples_per_second": 5000.0}',
           '{"load": 3.0, "first batch": 20.0, "other batches": 0.03}'))))
  results = tpu_check.run_child_steps('local', 60, python=python)
  assert [(r.step, r.ok) for r in results] == [
      ('tpu system', True), ('round trip', True), ('inference', True)]
  assert results[2].detail == (
      '300 examples in batches of 128 (the last padded) through the '
      '{serve, tpu} graph: load 3.00 s, first batch 20.00 s, other batches '
      '0.03 s; 5000 examples/s after the first batch')
