"""TPUBulkInferrer steps compiled like the trainer: TPU, image, runtime env,
custom_config, for KFP v1, KFP v2 and Vertex AI; other steps untouched."""

import json
import tarfile

import pytest
import yaml
from tfx import v1 as tfx

from tfx_tpu_trainer.kubeflow import compiled_files
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.kubeflow import tpu_slices
from tfx_tpu_trainer.tpu import runtimes

V4 = 'tpu-v4-podslice'
TRAINER_IMAGE = 'gcr.io/p/tfx-tpu-trainer-tpu-{runtime}:1'
TPU_STEPS = ('TPUTrainer', 'TPUBulkInferrer')


def _pipeline(inferrer_config=None, beam_args=('--runner=DirectRunner',),
              root='/root'):
  """ExampleGen -> TPUTrainer -> TPUBulkInferrer (and a stock Evaluator)."""
  import tfx_tpu_trainer  # pylint: disable=g-import-not-at-top
  with compiler.user_modules_not_packaged():
    example_gen = tfx.components.CsvExampleGen(input_base='/data')
    trainer = tfx_tpu_trainer.TPUTrainer(
        module_file='/m.py', examples=example_gen.outputs['examples'],
        train_args=tfx.proto.TrainArgs(num_steps=1),
        eval_args=tfx.proto.EvalArgs(num_steps=1))
    inferrer = tfx_tpu_trainer.TPUBulkInferrer(
        examples=example_gen.outputs['examples'],
        model=trainer.outputs['model'],
        data_spec=tfx.proto.DataSpec(example_splits=['eval']),
        custom_config=inferrer_config)
  return tfx.dsl.Pipeline(
      pipeline_name='bulk-infer', pipeline_root=root,
      components=[example_gen, trainer, inferrer],
      beam_pipeline_args=list(beam_args))


def _options(**kwargs):
  kwargs.setdefault('trainer_pod', scheduling.TrainerPod(
      tpu=scheduling.tpu_vm(V4, '2x2x1')))
  kwargs.setdefault('trainer_image', TRAINER_IMAGE)
  return compiler.KubeflowOptions(**kwargs)


def _env(container):
  return {e['name']: e.get('value') for e in container.get('env') or []}


def test_v1_the_inferrer_step_is_scheduled_like_the_trainer(tmp_path):
  result = compiler.compile_pipeline(
      _pipeline({'batch_size': 64}), str(tmp_path / 'p.tar.gz'), _options())
  assert result.inferrer_ids == ('TPUBulkInferrer',)
  assert result.inferrer_custom_configs['TPUBulkInferrer'] == {
      'batch_size': 64, 'use_tpu': True, 'tpu': {'name': 'local'}}
  (summary,) = result.inferrer_summaries
  assert 'google.com/tpu: 4' in summary or "'google.com/tpu': '4'" in summary
  with tarfile.open(result.path) as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  steps = {t['name']: t for t in workflow['spec']['templates']
           if 'container' in t}
  choice = runtimes.choose(V4)
  for name, step in steps.items():
    on_tpu = name in ('tputrainer', 'tpubulkinferrer')
    limits = (step['container'].get('resources') or {}).get('limits') or {}
    assert (limits == {'google.com/tpu': '4'}) is on_tpu, name
    assert (step['container']['image'] == result.trainer_image) is on_tpu
    runtime_env = {k: v for k, v in _env(step['container']).items()
                   if k in runtimes.STEP_ENV_NAMES}
    assert (runtime_env == choice.env) is on_tpu, name
    assert (step.get('nodeSelector', {}).get(
        'cloud.google.com/gke-tpu-topology') == '2x2x1') is on_tpu, name
  args = ' '.join(steps['tpubulkinferrer']['container']['args'])
  assert 'tfx_tpu_trainer.bulk_inferrer.executor.Executor' in args
  assert '\\"use_tpu\\": true' in args


def test_v2_and_vertex_the_inferrer_executor_gets_the_tpu(tmp_path):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'p.yaml'),
      _options(runner='kubeflow_v2', vertex_job=False))
  with open(result.path) as f:
    spec, platform = yaml.safe_load_all(f)
  labels = {task: compiled_files.trainer_executor_label(spec, task)
            for task in spec['root']['dag']['tasks']}
  tpu_executors = {labels[i] for i in TPU_STEPS}
  assert set(platform['platforms']['kubernetes']['deploymentSpec'][
      'executors']) == tpu_executors
  for label, executor in spec['deploymentSpec']['executors'].items():
    container = executor['container']
    assert (container['image'] == result.trainer_image) is (
        label in tpu_executors), label
    assert ('accelerator' in (container.get('resources') or {})) is (
        label in tpu_executors), label
    # The inferrer too types the inputs a KFP v2 backend leaves blank.
    assert container['command'][-2:] == ['-m', (
        'tfx_tpu_trainer.kubeflow.v2_metrics' if label == labels['TPUTrainer']
        else 'tfx_tpu_trainer.kubeflow.v2_step')], label
  # Vertex AI: without a TPU the job is written, the inferrer on CPU.
  cpu = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'cpu' / 'p.yaml'),
      compiler.KubeflowOptions(runner='kubeflow_v2'))
  assert cpu.inferrer_custom_configs['TPUBulkInferrer'] == {}
  with open(cpu.paths[1]) as f:
    job = json.load(f)
  executor = compiled_files.trainer_executor_label(job['pipelineSpec'],
                                                   'TPUBulkInferrer')
  assert 'accelerator' not in (compiled_files.container(
      job['pipelineSpec'], executor).get('resources') or {})


@pytest.mark.parametrize('pipeline_kwargs, options_kwargs, message', [
    (dict(inferrer_config={'use_tpu': False}), {},
     "TPUBulkInferrer 'TPUBulkInferrer' sets custom_config['use_tpu']=False, "
     'but the compile schedules it on a TPU'),
    (dict(beam_args=('--runner=PortableRunner',
                     '--job_endpoint=jobserver:8099'),
          root='gs://bucket/root'), {},
     "TPUBulkInferrer 'TPUBulkInferrer' would run Beam on PortableRunner, whose "
     'workers have no TPU'),
    ({}, dict(trainer_pod=scheduling.TrainerPod(
        tpu=tpu_slices.tpu_slice(V4, '2x2x2')), trainer_image=None),
     'a multi-host slice is for training'),
])
def test_an_inferrer_that_cannot_run_on_the_tpu_is_refused(
    tmp_path, pipeline_kwargs, options_kwargs, message):
  output = tmp_path / 'out' / 'p.tar.gz'
  with pytest.raises(compiler.CompileError) as e:
    compiler.compile_pipeline(_pipeline(**pipeline_kwargs), str(output),
                              _options(**options_kwargs))
  assert message in str(e.value)
  assert not output.parent.exists()


def _step_args(result):
  with tarfile.open(result.path) as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  return {t['name']: ' '.join(t['container']['args'])
          for t in workflow['spec']['templates'] if 'container' in t}


@pytest.mark.parametrize('pod,beam_args,inferrer_workers', [
    # A TPU host has up to 224 vCPUs: one Beam process per vCPU is bounded.
    (scheduling.TrainerPod(tpu=scheduling.tpu_vm(V4, '2x2x1')), (), 8),
    # The CPUs the pod asks for, when fewer.
    (scheduling.TrainerPod(tpu=scheduling.tpu_vm(V4, '2x2x1'),
                           cpu_request='3500m'), (), 3),
    # What the user gives stays.
    (scheduling.TrainerPod(tpu=scheduling.tpu_vm(V4, '2x2x1')),
     ('--direct_num_workers=16',), 16),
])
def test_the_inferrer_beam_workers_are_bounded(tmp_path, pod, beam_args,
                                               inferrer_workers):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'p.tar.gz'),
      _options(trainer_pod=pod, beam_args=beam_args))
  args = _step_args(result)
  assert f'--direct_num_workers={inferrer_workers}' in args['tpubulkinferrer']
  assert '--direct_num_workers=0' not in args['tpubulkinferrer']
  # The data steps run on the cluster's CPU nodes, as before.
  assert (f'--direct_num_workers={beam_args[0].split("=")[1]}' if beam_args
          else '--direct_num_workers=0') in args['csvexamplegen']
