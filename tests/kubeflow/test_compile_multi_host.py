"""Multi-host slices compiled for KFP v1 and v2: the trainer step drives.

The trainer step stays a CPU pod carrying the worker group's spec; the
worker pods (one per host) get the TPU, the slice's selectors and the TPU
image. Vertex AI, the single-host `tpu_check` and local paths are refused.
"""

import json
import os

import pytest
import yaml
from tfx import v1 as tfx

from tfx_tpu_trainer.kubeflow import compiled_files
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.kubeflow import tpu_slices
from tfx_tpu_trainer.tpu import worker_group

TRAINER_IMAGE = 'gcr.io/p/tfx-tpu-trainer-tpu-{runtime}:1'
SPOT = scheduling.parse_toleration('cloud.google.com/gke-spot=true:NoSchedule')


def _pipeline(root='gs://bucket/root', name='slice', custom_config=None):
  from tfx_tpu_trainer import TPUTrainer  # pylint: disable=g-import-not-at-top
  with compiler.user_modules_not_packaged():
    example_gen = tfx.components.CsvExampleGen(input_base='gs://bucket/data')
    statistics_gen = tfx.components.StatisticsGen(
        examples=example_gen.outputs['examples'])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs['statistics'])
    trainer = TPUTrainer(module_file='/m.py',
                         examples=example_gen.outputs['examples'],
                         schema=schema_gen.outputs['schema'],
                         train_args=tfx.proto.TrainArgs(num_steps=1),
                         eval_args=tfx.proto.EvalArgs(num_steps=1),
                         custom_config=custom_config)
  return tfx.dsl.Pipeline(
      pipeline_name=name, pipeline_root=root,
      components=[example_gen, statistics_gen, schema_gen, trainer])


def _options(accelerator, topology, **kwargs):
  return compiler.KubeflowOptions(
      trainer_pod=scheduling.TrainerPod(
          tpu=tpu_slices.tpu_request(accelerator, topology),
          node_selector=(('cloud.google.com/gke-spot', 'true'),),
          tolerations=(SPOT,)),
      trainer_image=TRAINER_IMAGE, **kwargs)


def _spec(env):
  [text] = [e['value'] for e in env if e['name'] == worker_group.SPEC_ENV]
  return worker_group.WorkerGroupSpec.from_json(text)


def _check_group(spec, hosts, accelerator, topology, runtime):
  assert spec.hosts == hosts and spec.chips_per_host == 4
  assert spec.image == TRAINER_IMAGE.format(runtime=runtime)
  assert dict(spec.node_selector) == {
      'cloud.google.com/gke-tpu-accelerator': accelerator,
      'cloud.google.com/gke-tpu-topology': topology,
      'cloud.google.com/gke-spot': 'true'}
  assert [dict(t)['key'] for t in spec.tolerations] == [
      'google.com/tpu', 'cloud.google.com/gke-spot']
  assert dict(spec.env)['TFX_TPU_TRAINER_TPU_RUNTIME'] == runtime


def test_v1_v4_2x2x2_trainer_step_is_a_cpu_driver_of_two_worker_pods(
    tmp_path):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'slice.tar.gz'),
      _options('tpu-v4-podslice', '2x2x2'))
  step = compiled_files.argo_step(
      compiled_files.read_argo_workflow(result.path), 'TPUTrainer')
  # The driver: the pipeline image, no TPU, no TPU placement.
  assert step['container']['image'] == compiler.DEFAULT_IMAGE
  assert 'google.com/tpu' not in str(step['container'].get('resources'))
  assert not step.get('nodeSelector') and not step.get('tolerations')
  _check_group(_spec(step['container']['env']), 2, 'tpu-v4-podslice',
               '2x2x2', 'se')
  assert result.custom_config['use_tpu'] is True
  assert 'tpu' not in result.custom_config  # The workers are the TPU.
  assert 'it creates 2 worker pods' in result.trainer_summaries[0]
  # The driver finds its pod by its uncut name (KFP's downward API variable;
  # HOSTNAME is cut to 63 characters).
  assert {'name': worker_group.POD_NAME_ENV, 'valueFrom': {'fieldRef': {
      'fieldPath': 'metadata.name'}}} in step['container']['env']
  # A worker waits for the driver's first word as long as the driver waits
  # for its workers, and then its usual driver timeout.
  assert _spec(step['container']['env']).driver_start_timeout == (
      compiler.COMPILED_WORKER_WAIT_SECS + 600)


def test_v2_v5e_4x4_trainer_executor_is_a_cpu_driver_of_four_worker_pods(
    tmp_path):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'slice.kfp-v2-pipeline.yaml'),
      _options('tpu-v5-lite-podslice', '4x4', runner='kubeflow_v2',
               vertex_job=False))
  with open(result.path) as f:
    documents = list(yaml.safe_load_all(f))
  executor = compiled_files.trainer_executor_label(documents[0], 'TPUTrainer')
  container = compiled_files.container(documents[0], executor)
  assert container['image'] == compiler.DEFAULT_IMAGE
  assert 'accelerator' not in (container.get('resources') or {})
  # PJRT's variables go to the workers only: the driver has no libtpu.
  names = [e['name'] for e in container['env']]
  assert 'TF_PLUGGABLE_DEVICE_LIBRARY_PATH' not in names
  _check_group(_spec(container['env']), 4, 'tpu-v5-lite-podslice', '4x4',
               'pjrt')
  assert len(documents) == 1  # No node selector nor toleration on the driver.


def test_vertex_job_and_tpu_check_are_refused_for_a_slice(tmp_path):
  with pytest.raises(compiler.CompileError, match='Vertex AI'):
    compiler.compile_pipeline(
        _pipeline(), str(tmp_path / 's.kfp-v2-pipeline.yaml'),
        _options('tpu-v4-podslice', '2x2x2', runner='kubeflow_v2'))
  with pytest.raises(compiler.CompileError, match='tpu_check checks the TPU '
                     'of one host'):
    compiler.compile_pipeline(
        _pipeline(), str(tmp_path / 's.tar.gz'),
        _options('tpu-v4-podslice', '2x2x2', tpu_check=True))
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('mode', ['PER_HOST_V1', 'PER_SHARD_V1'])
def test_input_modes_that_cannot_evaluate_on_a_slice_are_refused(tmp_path,
                                                                 mode):
  with pytest.raises(compiler.CompileError) as raised:
    compiler.compile_pipeline(
        _pipeline(custom_config={'per_host_input': mode}),
        str(tmp_path / 's.tar.gz'), _options('tpu-v4-podslice', '2x2x2'))
  assert str(raised.value) == (
      f"TPUTrainer 'TPUTrainer': custom_config['per_host_input']={mode!r} "
      'cannot evaluate on a TPU slice of 2 hosts: TPUEstimator evaluates on '
      "several hosts only with ['PER_HOST_V2', 'BROADCAST'] and would stop "
      "at the first evaluation, after training. Use 'PER_HOST_V2' (the "
      'default).')
  assert not os.listdir(tmp_path)


def test_local_pipeline_root_is_refused_for_a_slice_naming_it(tmp_path):
  with pytest.raises(compiler.CompileError) as raised:
    compiler.compile_pipeline(
        _pipeline(root='/local/root'), str(tmp_path / 's.tar.gz'),
        _options('tpu-v4-podslice', '2x2x2'))
  assert "the pipeline root (examples, model_run, checkpoints) '/local/root' "\
      'is a local path' in str(raised.value)
  assert not os.listdir(tmp_path)


@pytest.mark.parametrize('accelerator,topology,chips,message', [
    ('tpu-v4-podslice', '2x2x3', None, "'2x2x3' is not a multi-host topology"),
    ('tpu-v5-lite-podslice', '4x4', 16, 'leave --chips out'),
    ('tpu-v6e-slice', '4x4', None, 'has no multi-host slices'),
])
def test_bad_multi_host_requests_are_named(accelerator, topology, chips,
                                           message):
  with pytest.raises(scheduling.TPUSchedulingError, match=message):
    tpu_slices.tpu_request(accelerator, topology, chips)


def test_single_host_topologies_stay_single_host_requests():
  request = tpu_slices.tpu_request('tpu-v5-lite-podslice', '2x4')
  assert isinstance(request, scheduling.TPUVMScheduling)
  assert request.chips == 8
  assert tpu_slices.tpu_slice('tpu-v5p-slice', '2x2x4').hosts == 4


@pytest.mark.parametrize('argv,hosts', [
    (['--topology', '2x2x2'], 2),
    (['--accelerator', 'tpu-v5-lite-podslice', '--topology', '4x4'], 4),
    (['--topology', '2x2x2', '--runner', 'kubeflow_v2', '--no-vertex-job'], 2),
    (['--accelerator', 'tpu-v5-lite-podslice', '--topology', '4x4',
      '--runner', 'kubeflow_v2', '--no-vertex-job'], 4),
])
def test_the_bundled_pipeline_compiles_a_slice_from_the_command_line(
    tmp_path, capsys, argv, hosts):
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  assert cli.main(['compile', '--pipeline-root', 'gs://b/root', '--data-root',
                   'gs://b/data', '--output-dir', str(tmp_path)] + argv) == 0
  out = capsys.readouterr().out
  assert f'no TPU on this driver; it creates {hosts} worker pods' in out
  assert tpu_slices.RBAC_MANIFEST in out


def test_the_command_line_refuses_a_local_root_for_a_slice(tmp_path, capsys):
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  assert cli.main(['compile', '--pipeline-root', str(tmp_path / 'root'),
                   '--data-root', 'gs://b/data', '--output-dir',
                   str(tmp_path / 'out'), '--topology', '2x2x2']) == 2
  assert 'is a local path, but the worker pods of a multi-host slice' in (
      capsys.readouterr().err)
  assert not (tmp_path / 'out').exists() or not os.listdir(tmp_path / 'out')


def test_the_command_line_names_its_own_flag_for_a_slice_check(tmp_path,
                                                               capsys):
  from tfx_tpu_trainer_cli import main as cli  # pylint: disable=g-import-not-at-top
  assert cli.main(['compile', '--pipeline-root', 'gs://b/root', '--data-root',
                   'gs://b/data', '--output-dir', str(tmp_path / 'out'),
                   '--topology', '2x2x2', '--tpu-check']) == 2
  err = capsys.readouterr().err
  assert ('tfx-tpu-trainer compile: error: --tpu-check checks the TPU of one '
          'host; a multi-host slice has no pipeline step on its hosts (the '
          'trainer creates them). Compile without --tpu-check.') in err, err
  assert 'tpu_check' not in err
