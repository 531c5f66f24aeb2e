"""`tfx-tpu-trainer compile`: real KubeflowDagRunner / KubeflowV2DagRunner
compiles into tmp_path, parsed back (KFP v2 outputs with the real
protobufs); TPU and trainer pod validation; Beam arguments; bad options."""

import json
import os
import subprocess
import shutil
import sys
import tarfile

import pytest
import yaml

from kfp.pipeline_spec import pipeline_spec_pb2
from google.protobuf import json_format

from tfx_tpu_trainer.kubeflow import kfp_v2_protos
from tfx_tpu_trainer_cli import main as cli

from tests.fixtures import cli_exit

PIPELINE_ROOT = 'gs://test-bucket/tfx/taxi_tpu'
DATA_ROOT = 'gs://test-bucket/data/taxi'
IMAGE = 'gcr.io/test-project/tfx-tpu-trainer:1'
TRAINER_IMAGE = 'gcr.io/test-project/tfx-tpu-trainer-tpu:1'
TRAINER_STEP = 'tputrainer'
TPU_KEYS = ('google.com/tpu', 'cloud-tpus.google.com/v2',
            'cloud-tpus.google.com/v3')
SPOT = 'cloud.google.com/gke-spot'
TRAINER_POD_ARGS = ('--trainer-node-selector', f'{SPOT}=true',
                    '--trainer-node-selector',
                    'cloud.google.com/reservation-name=res-1',
                    '--trainer-toleration', f'{SPOT}=true:NoSchedule',
                    '--trainer-toleration', 'dedicated:NoExecute',
                    '--trainer-cpu', '4', '--trainer-memory', '16Gi')
TPU_TOLERATION = {'key': 'google.com/tpu', 'operator': 'Exists',
                  'effect': 'NoSchedule'}
EXTRA_TOLERATIONS = [
    {'key': SPOT, 'operator': 'Equal', 'value': 'true',
     'effect': 'NoSchedule'},
    {'key': 'dedicated', 'operator': 'Exists', 'effect': 'NoExecute'}]
V2_FILES = ('taxi-tpu.kfp-v2-pipeline.yaml',
            'taxi-tpu.vertex-pipeline-job.json')


def _compile_all(tmp_path_factory, name, *argv):
  output_dir = tmp_path_factory.mktemp(name)
  code = cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--image', IMAGE, '--output-dir',
                   str(output_dir)] + list(argv))
  assert code == 0
  return {f: os.path.join(output_dir, f) for f in os.listdir(output_dir)}


def _compile(tmp_path_factory, name, *argv):
  files = _compile_all(tmp_path_factory, name, *argv)
  assert len(files) == 1, files  # No staging leftovers.
  return list(files.values())[0]


def _v2_outputs(tmp_path_factory, name, *argv):
  """The KFP v2 documents and the Vertex job, each parsed by its protobuf."""
  files = _compile_all(tmp_path_factory, name, '--runner', 'kubeflow_v2',
                       *argv)
  vertex_job = '--no-vertex-job' not in argv
  # No staging leftovers.
  assert sorted(files) == sorted(V2_FILES if vertex_job else V2_FILES[:1])
  with open(files[V2_FILES[0]]) as f:
    documents = list(yaml.safe_load_all(f))
  kfp_v2_protos.parse(documents[0], kfp_v2_protos.PIPELINE_SPEC)
  if len(documents) > 1:
    kfp_v2_protos.parse(documents[1], kfp_v2_protos.PLATFORM_SPEC)
  if not vertex_job:
    return documents, None
  with open(files[V2_FILES[1]]) as f:
    job = json.load(f)
  json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob())
  return documents, job


def _argo_workflow(path):
  with tarfile.open(path) as package:
    assert package.getnames() == ['pipeline.yaml']
    return yaml.safe_load(package.extractfile('pipeline.yaml'))


def _steps(workflow):
  return {t['name']: t for t in workflow['spec']['templates']
          if 'container' in t}


def _tfx_ir(step):
  args = step['container']['args']
  return json.loads(args[args.index('--tfx_ir') + 1])


def _v1_custom_config(step):
  node = _tfx_ir(step)['nodes'][0]['pipelineNode']
  return json.loads(node['parameters']['parameters']['custom_config']
                    ['fieldValue']['stringValue'])


@pytest.fixture(scope='module')
def tpu_vm_workflow(tmp_path_factory):
  """A kubeflow compile on TPU VM v5e 2x4 with a trainer image."""
  return _argo_workflow(_compile(
      tmp_path_factory, 'v1', '--accelerator', 'tpu-v5-lite-podslice',
      '--trainer-image', TRAINER_IMAGE,
      '--tpu-zone', 'us-west4-a', '--tpu-name', 'local', '--tpu-project',
      'test-project', '--use-gcp-secret', '--beam-arg=--direct_num_workers=4',
      *TRAINER_POD_ARGS))


@pytest.fixture(scope='module')
def tpu_node_workflow(tmp_path_factory):
  path = _compile(tmp_path_factory, 'v1_node', '--tpu-style', 'tpu-node',
                  '--tpu-node-version', 'v2', '--tpu-cores', '32',
                  '--tf-version', '2.12.0', '--tpu-name', 'my-tpu',
                  '--output-file', 'node.yaml')
  with open(path) as f:
    return yaml.safe_load(f)


@pytest.fixture(scope='module')
def v2_outputs(tmp_path_factory):
  """The KFP v2 spec alone: a Vertex AI job cannot carry this TPU."""
  return _v2_outputs(tmp_path_factory, 'v2', '--trainer-image', TRAINER_IMAGE,
                     '--accelerator', 'tpu-v5-lite-device', '--topology',
                     '2x2', '--chips', '4', '--no-vertex-job',
                     *TRAINER_POD_ARGS)


@pytest.fixture(scope='module')
def v2_cpu_outputs(tmp_path_factory):
  """Both files: without a TPU the Vertex AI job is written too."""
  return _v2_outputs(tmp_path_factory, 'v2_cpu', '--trainer-image',
                     TRAINER_IMAGE, '--no-use-tpu', '--trainer-cpu', '4',
                     '--trainer-memory', '16Gi')


def test_every_step_is_compiled(tpu_vm_workflow):
  assert sorted(_steps(tpu_vm_workflow)) == sorted([
      'csvexamplegen', 'statisticsgen', 'schemagen', 'examplevalidator',
      'transform', TRAINER_STEP, 'evaluator', 'pusher'])


def test_only_the_trainer_step_has_tpu_resources(tpu_vm_workflow):
  for name, step in _steps(tpu_vm_workflow).items():
    limits = (step['container'].get('resources') or {}).get('limits', {})
    if name == TRAINER_STEP:
      assert limits == {'google.com/tpu': '8'}
      assert step['container']['resources']['requests'] == {
          'cpu': '4', 'memory': '16Gi'}
      assert step['nodeSelector'] == {
          'cloud.google.com/gke-tpu-accelerator': 'tpu-v5-lite-podslice',
          'cloud.google.com/gke-tpu-topology': '2x4',
          SPOT: 'true', 'cloud.google.com/reservation-name': 'res-1'}
      assert step['tolerations'] == [TPU_TOLERATION] + EXTRA_TOLERATIONS
      assert step['container']['image'] == TRAINER_IMAGE
    else:
      assert 'resources' not in step['container'], name
      assert 'nodeSelector' not in step, name
      assert 'tolerations' not in step, name
      assert step['container']['image'] == IMAGE, name


def test_every_step_has_the_metadata_config_and_gcp_secret(tpu_vm_workflow):
  for name, step in _steps(tpu_vm_workflow).items():
    env_from = step['container']['envFrom']
    assert {'configMapRef': {'name': 'metadata-grpc-configmap',
                             'optional': True}} in env_from, name
    assert {'name': 'gcp-credentials-user-gcp-sa',
            'mountPath': '/secret/gcp-credentials'} in (
                step['container']['volumeMounts']), name
    assert {'name': 'GOOGLE_APPLICATION_CREDENTIALS',
            'value': '/secret/gcp-credentials/user-gcp-sa.json'} in (
                step['container']['env']), name
    args = step['container']['args']
    metadata_config = json.loads(
        args[args.index('--kubeflow_metadata_config') + 1])
    assert metadata_config == {'grpc_config': {
        'grpc_service_host': {'environment_variable':
                                  'METADATA_GRPC_SERVICE_HOST'},
        'grpc_service_port': {'environment_variable':
                                  'METADATA_GRPC_SERVICE_PORT'}}}, name


def test_trainer_custom_config_and_module_file(tpu_vm_workflow):
  trainer = _steps(tpu_vm_workflow)[TRAINER_STEP]
  assert _v1_custom_config(trainer) == {
      'use_tpu': True, 'train_batch_size': 64, 'eval_batch_size': 64,
      'tpu': {'name': 'local', 'zone': 'us-west4-a',
              'project': 'test-project'}}
  parameters = _tfx_ir(trainer)['nodes'][0]['pipelineNode']['parameters'][
      'parameters']
  assert parameters['module_file']['fieldValue']['stringValue'] == (
      '/tfx-tpu-trainer/components/taxi_tpu_module.py')
  # How errors name the module: TPUTrainer's declared exec property.
  assert parameters['user_module_file']['fieldValue']['stringValue'] == (
      '/tfx-tpu-trainer/components/taxi_tpu_module.py')



def test_transform_imports_its_preprocessing_fn_by_name_on_every_step(
    tpu_vm_workflow):
  # Beam's worker processes import the function by this name; a module
  # file loaded by path would be user_module_0, which they cannot import.
  transform = _tfx_ir(_steps(tpu_vm_workflow)['transform'])['nodes'][0][
      'pipelineNode']['parameters']['parameters']
  assert 'module_file' not in transform
  assert transform['preprocessing_fn']['fieldValue']['stringValue'] == (
      'taxi_preprocessing.preprocessing_fn')
  for name, step in _steps(tpu_vm_workflow).items():
    assert {'name': 'PYTHONPATH', 'value': '/tfx-tpu-trainer/components'} in (
        step['container']['env']), name


def _beam_args(step):
  deployment = _tfx_ir(step)['deploymentConfig']
  return json.dumps(deployment)


def test_pipeline_root_and_beam_args(tpu_vm_workflow):
  parameters = {p['name']: p.get('value')
                for p in tpu_vm_workflow['spec']['arguments']['parameters']}
  assert parameters['pipeline-root'] == PIPELINE_ROOT
  for name in ('csvexamplegen', 'statisticsgen', 'transform', 'evaluator'):
    args = _beam_args(_steps(tpu_vm_workflow)[name])
    assert '--direct_running_mode=multi_processing' in args, name
    assert '--direct_num_workers=4' in args, name  # --beam-arg replaced 0.
    assert '--direct_num_workers=0' not in args, name


def test_trainer_step_reports_kfp_metrics(tpu_vm_workflow):
  for name, step in _steps(tpu_vm_workflow).items():
    artifacts = {a['name']: a['path'] for a in step['outputs']['artifacts']}
    if name == TRAINER_STEP:
      assert artifacts == {
          'mlpipeline-ui-metadata': '/mlpipeline-ui-metadata.json',
          'mlpipeline-metrics': '/mlpipeline-metrics.json'}
      assert step['container']['command'] == [
          'python', '-m', 'tfx_tpu_trainer.kubeflow.step_outputs']
    else:
      assert artifacts == {
          'mlpipeline-ui-metadata': '/mlpipeline-ui-metadata.json'}, name
      assert step['container']['command'] == [
          'python', '-m', 'tfx.orchestration.kubeflow.container_entrypoint']


def test_tpu_node_style_on_the_trainer_only(tpu_node_workflow):
  """Retired on GKE, kept behind an explicit --tpu-style tpu-node (KFP v1)."""
  steps = _steps(tpu_node_workflow)
  trainer = steps[TRAINER_STEP]
  assert trainer['container']['resources']['limits'] == {
      'cloud-tpus.google.com/v2': '32'}
  assert trainer['metadata']['annotations'] == {
      'tf-version.cloud-tpus.google.com': '2.12.0'}
  assert 'nodeSelector' not in trainer and 'tolerations' not in trainer
  assert _v1_custom_config(trainer)['tpu'] == {'name': 'my-tpu'}
  for name, step in steps.items():
    if name != TRAINER_STEP:
      assert 'resources' not in step['container'], name
      assert 'annotations' not in step.get('metadata', {}), name
      assert step['container']['image'] == IMAGE, name
  assert trainer['container']['image'] == IMAGE  # No --trainer-image.


def _executor_label(spec, task):
  component = spec['root']['dag']['tasks'][task]['componentRef']['name']
  return spec['components'][component]['executorLabel']


def test_v2_writes_a_kfp_v2_spec_and_a_vertex_job_named_apart(
    v2_outputs, v2_cpu_outputs):
  assert len(v2_outputs[0]) == 2  # PipelineSpec, then PlatformSpec.
  documents, job = v2_cpu_outputs
  assert 'pipelineSpec' not in documents[0]  # Bare spec, not a PipelineJob.
  assert documents[0]['pipelineInfo']['name'] == 'taxi-tpu'
  # A KFP v2 API server accepts schema 2.1.0 only (v2_template.go).
  assert documents[0]['schemaVersion'] == '2.1.0'
  assert job['pipelineSpec']['schemaVersion'] == '2.1.0'
  assert documents[0]['defaultPipelineRoot'] == PIPELINE_ROOT
  assert {'displayName', 'pipelineSpec', 'runtimeConfig'} <= set(job)
  assert job['runtimeConfig']['gcsOutputDirectory'] == PIPELINE_ROOT


def test_v2_kfp_spec_tpu_scheduling_on_the_trainer_only(v2_outputs):
  documents, _ = v2_outputs
  spec, platform = documents
  trainer = _executor_label(spec, 'TPUTrainer')
  assert trainer == 'TPUTrainer_executor'
  # How errors name the module: TPUTrainer's declared exec property.
  assert spec['root']['dag']['tasks']['TPUTrainer']['inputs']['parameters'][
      'user_module_file'] == {'runtimeValue': {'constant': (
          '/tfx-tpu-trainer/components/taxi_tpu_module.py')}}
  for name, executor in spec['deploymentSpec']['executors'].items():
    container = executor['container']
    assert {'name': 'PYTHONPATH', 'value': '/tfx-tpu-trainer/components'} in (
        container['env']), name
    if name == trainer:
      assert container['resources'] == {
          'accelerator': {'type': 'google.com/tpu', 'count': '4',
                          'resourceType': 'google.com/tpu',
                          'resourceCount': '4'},
          'cpuRequest': 4.0, 'resourceCpuRequest': '4',
          'memoryRequest': 16 * 2**30 / 1e9, 'resourceMemoryRequest': '16Gi'}
      assert container['image'] == TRAINER_IMAGE
    else:
      assert 'resources' not in container, name
      assert container['image'] == IMAGE, name
  executors = platform['platforms']['kubernetes']['deploymentSpec'][
      'executors']
  assert list(executors) == [trainer]  # The trainer, and only the trainer.
  config = kfp_v2_protos.parse(executors[trainer],
                               kfp_v2_protos.KUBERNETES_EXECUTOR_CONFIG)
  assert dict(config.node_selector.labels) == {
      'cloud.google.com/gke-tpu-accelerator': 'tpu-v5-lite-device',
      'cloud.google.com/gke-tpu-topology': '2x2',
      SPOT: 'true', 'cloud.google.com/reservation-name': 'res-1'}
  assert [kfp_v2_protos.to_dict(t) for t in config.tolerations] == [
      TPU_TOLERATION] + EXTRA_TOLERATIONS
  task = spec['root']['dag']['tasks']['TPUTrainer']['inputs']['parameters']
  custom_config = json.loads(task['custom_config']['runtimeValue']['constant'])
  assert custom_config == {'use_tpu': True, 'tpu': {'name': 'local'},
                           'train_batch_size': 64, 'eval_batch_size': 64}
  assert task['module_file']['runtimeValue']['constant'] == (
      '/tfx-tpu-trainer/components/taxi_tpu_module.py')


def test_v2_trainer_outputs_system_metrics_and_runs_through_its_entrypoint(
    v2_outputs, v2_cpu_outputs):
  # The KFP v2 spec of a TPU compile; the Vertex job of a CPU one (a Vertex
  # AI job cannot carry a GKE TPU VM slice).
  for spec in (v2_outputs[0][0], v2_cpu_outputs[1]['pipelineSpec']):
    trainer = _executor_label(spec, 'TPUTrainer')
    component = spec['root']['dag']['tasks']['TPUTrainer']['componentRef'][
        'name']
    outputs = spec['components'][component]['outputDefinitions']['artifacts']
    assert sorted(outputs) == ['metrics', 'model', 'model_run']
    # Declared as kfp 2 declares Output[Metrics]; the KFP v2 launcher names
    # the MLMD type after the schema's title.
    assert outputs['metrics']['artifactType'] == {
        'schemaTitle': 'system.Metrics', 'schemaVersion': '0.0.1'}
    for name, executor in spec['deploymentSpec']['executors'].items():
      command = executor['container']['command']
      if name == trainer:
        assert command == ['python', '-m', 'tfx_tpu_trainer.kubeflow.v2_metrics']
      else:
        # Every other step types the inputs a KFP v2 backend leaves blank.
        assert command == ['python', '-m', 'tfx_tpu_trainer.kubeflow.v2_step']


def test_v2_vertex_job_machine_fields_on_the_trainer_only(v2_cpu_outputs):
  _, job = v2_cpu_outputs
  spec = job['pipelineSpec']
  trainer = _executor_label(spec, 'TPUTrainer')
  for name, executor in spec['deploymentSpec']['executors'].items():
    container = executor['container']
    if name == trainer:
      assert container['resources'] == {
          'cpuLimit': 4.0, 'memoryLimit': 16 * 2**30 / 1e9}
      assert container['image'] == TRAINER_IMAGE
    else:
      assert 'resources' not in container, name


def test_v2_each_accelerator_compiles_to_its_own_scheduling(tmp_path_factory):
  seen = {}
  for accelerator, topology in (
      ('tpu-v5-lite-podslice', '2x4'), ('tpu-v5-lite-device', '2x4'),
      ('tpu-v4-podslice', '2x2x1')):
    documents, _ = _v2_outputs(tmp_path_factory, accelerator, '--accelerator',
                               accelerator, '--topology', topology,
                               '--no-vertex-job')
    executors = documents[1]['platforms']['kubernetes']['deploymentSpec'][
        'executors']
    labels = executors['TPUTrainer_executor']['nodeSelector']['labels']
    assert labels == {'cloud.google.com/gke-tpu-accelerator': accelerator,
                      'cloud.google.com/gke-tpu-topology': topology}
    seen[accelerator] = yaml.safe_dump_all(documents)
  assert len(set(seen.values())) == 3


def test_no_use_tpu_puts_no_tpu_anywhere(tmp_path_factory):
  workflow = _argo_workflow(_compile(tmp_path_factory, 'cpu', '--no-use-tpu'))
  steps = _steps(workflow)
  for name, step in steps.items():
    assert 'resources' not in step['container'], name
    assert 'nodeSelector' not in step and 'tolerations' not in step, name
  assert _v1_custom_config(steps[TRAINER_STEP]) == {
      'use_tpu': False, 'train_batch_size': 64, 'eval_batch_size': 64}
  documents, job = _v2_outputs(tmp_path_factory, 'cpu_v2', '--no-use-tpu')
  assert len(documents) == 1  # No platform spec: nothing to schedule.
  for spec in (documents[0], job['pipelineSpec']):
    executors = spec['deploymentSpec']['executors']
    assert not any('resources' in e['container'] for e in executors.values())


def test_compile_writes_nothing_under_pipeline_root_and_restores_env(
    tmp_path, monkeypatch):
  from tfx_tpu_trainer_cli import kubeflow_compile  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv(compiler.NO_PACKAGING_ENV, raising=False)
  root = tmp_path / 'root'
  # v2 on CPU: a Vertex AI job cannot carry a GKE TPU VM slice.
  for runner, name, use_tpu in (('kubeflow', 'p.yaml', True),
                                ('kubeflow_v2', 'p2.yaml', False)):
    result = kubeflow_compile.compile_pipeline(kubeflow_compile.CompileOptions(
        pipeline_root=str(root), data_root=str(tmp_path / 'data'),
        output_path=str(tmp_path / 'out' / name), runner=runner,
        use_tpu=use_tpu, tpu=scheduling.tpu_vm() if use_tpu else None))
    assert all(os.path.isfile(p) for p in result.paths)
    assert compiler.NO_PACKAGING_ENV not in os.environ
  assert not root.exists()  # No _wheels: nothing packaged, nothing written.
  assert sorted(os.listdir(tmp_path / 'out')) == [
      'p.yaml', 'p2.vertex-pipeline-job.json', 'p2.yaml']

  monkeypatch.setenv(compiler.NO_PACKAGING_ENV, 'previous')
  with compiler.user_modules_not_packaged():
    assert os.environ[compiler.NO_PACKAGING_ENV] == '1'
  assert os.environ[compiler.NO_PACKAGING_ENV] == 'previous'


# --- TPU request validation (library) ---------------------------------------


def test_tpu_vm_defaults_and_chip_rule():
  from tfx_tpu_trainer import errors  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  # The default: v4, the StreamExecutor runtime (tpu/runtimes.py says why).
  assert scheduling.tpu_vm() == scheduling.TPUVMScheduling(
      'tpu-v4-podslice', '2x2x1', 4)
  assert scheduling.tpu_vm(
      'tpu-v5-lite-podslice') == scheduling.TPUVMScheduling(
      'tpu-v5-lite-podslice', '2x4', 8)
  assert scheduling.tpu_vm('tpu-v5-lite-device', '1x1').chips == 1
  assert scheduling.tpu_vm('tpu-v5p-slice', '2x2x1', 4).resource_limits == {
      'google.com/tpu': '4'}
  assert issubclass(scheduling.TPUSchedulingError, errors.TPUTrainerError)
  with pytest.raises(scheduling.TPUSchedulingError, match='chips 2 does not'):
    scheduling.tpu_vm('tpu-v6e-slice', '2x2', 2)
  with pytest.raises(scheduling.TPUSchedulingError,
                     match='chips must be a positive integer, got 0'):
    scheduling.tpu_vm(chips=0)


def test_tpu_node_defaults():
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  request = scheduling.tpu_node()
  assert (request.version, request.cores) == ('v3', 8)
  assert request.tf_version == scheduling.default_tf_version()
  assert scheduling.tpu_node('preemptible-v3', 2048).resource_limits == {
      'cloud-tpus.google.com/preemptible-v3': '2048'}


# --- Bad options: exit 2, exact message, nothing written ---------------------


V5E = 'tpu-v5-lite-podslice'


@pytest.mark.parametrize('argv,message', [
    (['--accelerator', 'tpu-v9'],
     "accelerator 'tpu-v9' is not a known GKE TPU accelerator; accepted "
     'values: tpu-v4-podslice, tpu-v5-lite-device, tpu-v5-lite-podslice, '
     'tpu-v5p-slice, tpu-v6e-slice.'),
    (['--accelerator', V5E, '--topology', '2x4', '--chips', '4'],
     f'chips 4 does not match topology 2x4 of {V5E}: a single-host slice '
     'requests all its chips, 2*4 = 8.'),
    (['--accelerator', 'tpu-v4-podslice', '--chips', '8'],
     'chips 8 does not match topology 2x2x1 of tpu-v4-podslice: a single-host '
     'slice requests all its chips, 2*2*1 = 4.'),
    # A multi-host topology compiles (test_compile_multi_host.py); one
    # GKE does not offer is refused naming the accepted ones.
    (['--accelerator', V5E, '--topology', '4x6'],
     f"topology '4x6' is not a multi-host topology of {V5E}; accepted "
     'values: 4x4, 4x8, 8x8, 8x16, 16x16 (single-host: 1x1, 2x2, 2x4).'),
    (['--accelerator', V5E, '--topology', '4x2'],
     f"topology '4x2' is not a single-host topology of {V5E}; accepted "
     'values: 1x1, 2x2, 2x4.'),
    (['--accelerator', V5E, '--topology', '2x2x1'],
     f"topology '2x2x1' does not have the form AxB of {V5E} topologies; "
     'accepted values: 1x1, 2x2, 2x4.'),
    (['--accelerator', 'tpu-v5p-slice', '--topology', '2x4'],
     "topology '2x4' does not have the form AxBxC of tpu-v5p-slice "
     'topologies; accepted values: 2x2x1.'),
    (['--accelerator', V5E, '--topology', 'two-by-four'],
     f"topology 'two-by-four' does not have the form AxB of {V5E} "
     'topologies; accepted values: 1x1, 2x2, 2x4.'),
    (['--tpu-style', 'tpu-node', '--tpu-node-version', 'v4'],
     "tpu-node-version 'v4' is not accepted; accepted values: v2, v3, "
     'preemptible-v2, preemptible-v3.'),
    (['--tpu-style', 'tpu-node', '--tpu-cores', '16'],
     'tpu-cores 16 is not a v3 TPU size; accepted values: 8, 32, 64, 128, '
     '256, 512, 1024, 2048.'),
    (['--tpu-style', 'tpu-node', '--tpu-node-version', 'v2', '--tpu-cores',
      '64'],
     'tpu-cores 64 is not a v2 TPU size; accepted values: 8, 32, 128, 256, '
     '512.'),
    (['--tpu-style', 'tpu-node', '--tf-version', 'latest'],
     "tf-version 'latest' is not a TensorFlow version; use MAJOR.MINOR[.PATCH]"
     ' (e.g. 2.15.1) or nightly.'),
    (['--tpu-style', 'tpu-node', '--accelerator', V5E, '--topology', '2x4'],
     '--accelerator, --topology do not apply to --tpu-style tpu-node.'),
    (['--tpu-node-version', 'v3'],
     '--tpu-node-version does not apply to --tpu-style tpu-vm.'),
    (['--no-use-tpu', '--topology', '2x4'],
     '--topology needs --use-tpu; --no-use-tpu trains on CPU.'),
    (['--no-use-tpu', '--chips', '8', '--tpu-name', 'local'],
     '--chips, --tpu-name need --use-tpu; --no-use-tpu trains on CPU.'),
    (['--tpu-zone', 'us-west4-a'],
     '--tpu-zone and --tpu-project need --tpu-name.'),
    (['--pipeline-root', 'relative/root'],
     "--pipeline-root 'relative/root' must be a URI (e.g. gs://bucket/path) "
     'or an absolute path as the cluster sees it.'),
    (['--data-root', 'data'],
     "--data-root 'data' must be a URI (e.g. gs://bucket/path) or an absolute"
     ' path as the cluster sees it.'),
    (['--serving-model-dir', 'serving'],
     "--serving-model-dir 'serving' must be a URI (e.g. gs://bucket/path) or "
     'an absolute path as the cluster sees it.'),
    (['--output-file', 'pipeline.txt'],
     "--output-file 'pipeline.txt' must end with one of .tar.gz, .tgz, .zip, "
     '.yaml, .yml for --runner kubeflow.'),
    (['--runner', 'kubeflow_v2', '--output-file', 'pipeline.json'],
     "--output-file 'pipeline.json' must end with one of .yaml, .yml for "
     '--runner kubeflow_v2.'),
    (['--runner', 'kubeflow_v2', '--pipeline-name', 'taxi_tpu'],
     "--pipeline-name 'taxi_tpu' is not accepted by --runner kubeflow_v2: use "
     'lower-case letters, digits and -, e.g. taxi-tpu.'),
    (['--pipeline-name', 'taxi tpu'],
     "--pipeline-name 'taxi tpu' must be 1-63 letters, digits, _ or -, "
     'starting with a letter or digit.'),
    (['--vertex-accelerator-type', 'TPU_V3'],
     '--vertex-accelerator-type needs --runner kubeflow_v2 and --use-tpu.'),
    (['--runner', 'kubeflow_v2', '--vertex-accelerator-type', 'TPU_V9'],
     "--vertex-accelerator-type 'TPU_V9' is not a Vertex AI accelerator type;"
     ' accepted values: NVIDIA_TESLA_K80,'),
    (['--runner', 'kubeflow_v2', '--accelerator', 'tpu-v5p-slice'],
     'the Vertex AI job cannot schedule the trainer on this TPU: Vertex AI '
     'runs tpu-v5p-slice 2x2x1 as machine type ct5p-hightpu-4t with '
     'tpuTopology 2x2x1, which a pipeline step cannot carry (its resources '
     'hold an accelerator type and count only; steps take TPU_V2/TPU_V3). '
     'Pass --no-vertex-job to write the KFP v2 spec alone (for a KFP v2 '
     'backend on GKE), or --no-use-tpu for a CPU Vertex job; see '
     'docs/guide/kubeflow.md, "Vertex AI and TPUs".'),
    (['--runner', 'kubeflow_v2', '--accelerator', 'tpu-v6e-slice',
      '--vertex-accelerator-type', 'TPU_V5_LITEPOD'],
     'the Vertex AI job cannot schedule the trainer on this TPU: Vertex AI '
     'has no pipeline-step form of tpu-v6e-slice 2x4 (steps take '
     'TPU_V2/TPU_V3). Pass --no-vertex-job'),
    (['--runner', 'kubeflow_v2', '--accelerator', 'tpu-v5-lite-podslice',
      '--vertex-accelerator-type', 'TPU_V3'],
     'the Vertex AI job cannot schedule the trainer on this TPU: '
     '--vertex-accelerator-type TPU_V3 would disagree with the KFP v2 spec, '
     'which requests tpu-v5-lite-podslice 2x4 (TPU v2/v3 have no GKE TPU VM '
     'accelerator here).'),
    (['--accelerator', 'tpu-v5-lite-podslice', '--tpu-runtime', 'se'],
     'tpu-runtime se is not supported on TPU v5e (tpu-v5-lite-podslice): '
     'TensorFlow 2.15 runs v5e with pjrt only '
     '(https://cloud.google.com/tpu/docs/runtimes); use --tpu-runtime pjrt.'),
    (['--tpu-style', 'tpu-node', '--tpu-runtime', 'se'],
     '--tpu-runtime does not apply to --tpu-style tpu-node.'),
    (['--no-use-tpu', '--tpu-check'],
     "--tpu-check needs --use-tpu: it checks the trainer's TPU."),
    (['--no-vertex-job'], '--no-vertex-job needs --runner kubeflow_v2.'),
    (['--tpu-runtime', 'xla'],
     "argument --tpu-runtime: invalid choice: 'xla'"),
    (['--runner', 'kubeflow_v2', '--tpu-style', 'tpu-node'],
     '--tpu-style tpu-node needs --runner kubeflow: the TPU-node style (Cloud '
     'TPU nodes: tf-version.cloud-tpus.google.com, '
     'cloud-tpus.google.com/<version>) is retired on GKE (end of life '
     '2025-04-25); use --tpu-style tpu-vm (the default) with --accelerator '
     'and --topology, e.g. tpu-v5-lite-podslice 2x4.'),
    (['--trainer-node-selector', 'spot'],
     "trainer-node-selector 'spot' is not KEY=VALUE with a Kubernetes label "
     'key and value (e.g. cloud.google.com/gke-spot=true).'),
    (['--trainer-node-selector', 'a b=c'],
     "trainer-node-selector 'a b=c' is not KEY=VALUE"),
    (['--trainer-node-selector', 'cloud.google.com/gke-tpu-topology=4x4'],
     'trainer-node-selector cloud.google.com/gke-tpu-topology=4x4 contradicts '
     'the TPU request (cloud.google.com/gke-tpu-topology=2x2x1); set it with '
     '--accelerator/--topology.'),
    (['--trainer-node-selector', 'a=1', '--trainer-node-selector', 'a=2'],
     'trainer-node-selector sets a more than once.'),
    (['--trainer-toleration', 'cloud.google.com/gke-spot=true'],
     "trainer-toleration 'cloud.google.com/gke-spot=true' has no effect "
     'NoSchedule/PreferNoSchedule/NoExecute after the last ":"; accepted '
     'forms: KEY=VALUE:EFFECT or KEY:EFFECT, EFFECT one of NoSchedule, '
     'PreferNoSchedule, NoExecute.'),
    (['--trainer-toleration', 'spot=true:Sometimes'],
     "trainer-toleration 'spot=true:Sometimes' has no effect"),
    (['--trainer-toleration', 'bad key:NoSchedule'],
     "trainer-toleration 'bad key:NoSchedule': 'bad key' is not a Kubernetes "
     'taint key;'),
    (['--trainer-toleration', 'spot=:NoSchedule'],
     "trainer-toleration 'spot=:NoSchedule': '' is not a Kubernetes taint "
     'value;'),
    (['--trainer-cpu', 'four'],
     "trainer-cpu 'four' is not a positive Kubernetes quantity (e.g. 4, 500m, "
     '16Gi, 32G).'),
    (['--trainer-cpu', '0'], "trainer-cpu '0' is not a positive Kubernetes "
     'quantity'),
    (['--trainer-memory', '16GB'],
     "trainer-memory '16GB' is not a positive Kubernetes quantity"),
    (['--beam-arg', 'runner=DataflowRunner'],
     "--beam-arg 'runner=DataflowRunner' is not one Beam argument of the form"
     ' --name=value or --flag (write --beam-arg=--runner=DataflowRunner).'),
    (['--beam-arg=--no_such_option=1'],
     "--beam-arg '--no_such_option=1': 'no_such_option' is not a Beam "
     'pipeline option.'),
    (['--beam-arg=--direct_running_mode=threads'],
     "--beam-arg: argument --direct_running_mode: invalid choice: 'threads'"),
    (['--beam-arg=--runner=DataflowRunner', '--beam-arg=--project=p'],
     '--beam-arg=--runner=DataflowRunner (the DataflowRunner) needs '
     '--beam-arg=--region=..., '
     '--beam-arg=--temp_location=... (and usually '
     '--beam-arg=--sdk_container_image=<the --image>, so the workers have '
     'TFX and this package).'),
    (['--runner', 'kubeflow_v2', '--use-gcp-secret'],
     '--use-gcp-secret needs --runner kubeflow.'),
    (['--image', ''], "--image '' is not an image name."),
    (['--trainer-image', 'gcr.io/a b'],
     "--trainer-image 'gcr.io/a b' is not an image name."),
    (['--chips', '0'], 'argument --chips: must be a positive integer, got 0'),
    (['--train-steps', 'ten'], "argument --train-steps: 'ten' is not an "
     'integer'),
    (['--eval-batch-size', '-1'],
     'argument --eval-batch-size: must be a positive integer, got -1'),
    (['--runner', 'argo'], "argument --runner: invalid choice: 'argo'"),
    (['--tpu-style', 'tpu-pod'],
     "argument --tpu-style: invalid choice: 'tpu-pod'"),
])
def test_bad_options_exit_2_and_write_nothing(tmp_path, capsys, argv,
                                              message):
  output_dir = tmp_path / 'out'
  base = ['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
          DATA_ROOT, '--output-dir', str(output_dir)]
  assert cli_exit.exit_code(base + argv) == 2
  err = capsys.readouterr().err
  assert message in err
  if not message.startswith('argument '):
    # One line, naming the option (some messages are checked by prefix).
    assert err.startswith(f'tfx-tpu-trainer compile: error: {message}'), err
    assert err.endswith('\n') and err.count('\n') == 1, err
  assert not output_dir.exists()
  assert os.listdir(tmp_path) == []


def test_missing_pipeline_root_is_a_usage_error(tmp_path, capsys):
  assert cli_exit.exit_code(['compile', '--data-root', DATA_ROOT, '--output-dir',
                     str(tmp_path / 'out')]) == 2
  assert ('the following arguments are required: --pipeline-root' in
          capsys.readouterr().err)
  assert not (tmp_path / 'out').exists()


def test_output_dir_that_is_a_file(tmp_path, capsys):
  not_a_dir = tmp_path / 'file'
  not_a_dir.write_text('x')
  assert cli_exit.exit_code(['compile', '--pipeline-root', PIPELINE_ROOT,
                     '--data-root', DATA_ROOT, '--output-dir',
                     str(not_a_dir)]) == 2
  assert capsys.readouterr().err == (
      f'tfx-tpu-trainer compile: error: --output-dir {str(not_a_dir)!r} is '
      'not a directory.\n')
  assert not_a_dir.read_text() == 'x'


# --- The console script, offline -------------------------------------------


def _offline(command):
  """`command` in a namespace without network, where the system allows it."""
  unshare = shutil.which('unshare')
  if unshare and subprocess.run([unshare, '-rn', 'true'],
                                capture_output=True).returncode == 0:
    return [unshare, '-rn'] + command
  return command


@pytest.mark.slow
def test_console_script_compiles_offline(tmp_path):
  script = os.path.join(os.path.dirname(sys.executable), 'tfx-tpu-trainer')
  result = subprocess.run(
      _offline([script, 'compile', '--pipeline-root', PIPELINE_ROOT,
                '--data-root', DATA_ROOT, '--output-dir', str(tmp_path),
                '--output-file', 'taxi.yaml']),
      capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert result.returncode == 0, result.stderr[-3000:]
  assert (f'Wrote {tmp_path / "taxi.yaml"} (Argo workflow for KFP v1).'
          in result.stdout)
  # The summary is read back from the file written.
  # The default: TPU v4, one host, StreamExecutor (tpu/runtimes.py says why).
  assert ('    taxi.yaml: image gcr.io/YOUR_PROJECT/tfx-tpu-trainer:latest; '
          'limits google.com/tpu: 4; node selector '
          'cloud.google.com/gke-tpu-accelerator=tpu-v4-podslice, '
          'cloud.google.com/gke-tpu-topology=2x2x1; tolerations '
          'google.com/tpu:NoSchedule; TPU runtime env '
          'TFX_TPU_TRAINER_TPU_RUNTIME=se, '
          'TFX_TPU_TRAINER_ACCELERATOR=tpu-v4-podslice\n') in result.stdout
  with open(tmp_path / 'taxi.yaml') as f:
    trainer = _steps(yaml.safe_load(f))[TRAINER_STEP]
  assert trainer['container']['resources'] == {
      'limits': {'google.com/tpu': '4'}}


# --- Retired TPU-node style; Beam arguments for Dataflow ---------------------


def test_tpu_node_style_warns_that_gke_retired_it(tmp_path, capsys):
  assert cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--output-dir', str(tmp_path), '--tpu-style',
                   'tpu-node', '--tf-version', '2.15.0']) == 0
  captured = capsys.readouterr()
  assert (
      '\ntfx-tpu-trainer compile: warning: the TPU-node style (Cloud TPU '
      'nodes: tf-version.cloud-tpus.google.com, '
      'cloud-tpus.google.com/<version>) is retired on GKE (end of life '
      '2025-04-25); use --tpu-style tpu-vm (the default)') in (
          '\n' + captured.err)
  assert 'limits cloud-tpus.google.com/v3: 8; annotations ' \
      'tf-version.cloud-tpus.google.com: 2.15.0' in captured.out


def test_beam_args_run_the_data_components_on_dataflow(tmp_path_factory):
  dataflow = ('--beam-arg=--runner=DataflowRunner',
              '--beam-arg=--project=test-project',
              '--beam-arg=--region=us-central1',
              '--beam-arg=--temp_location=gs://test-bucket/tmp',
              f'--beam-arg=--sdk_container_image={IMAGE}',
              '--beam-arg=--experiments=use_runner_v2')
  steps = _steps(_argo_workflow(_compile(tmp_path_factory, 'dataflow',
                                         '--no-use-tpu', *dataflow)))
  for name in ('csvexamplegen', 'statisticsgen', 'transform', 'evaluator'):
    deployment = _tfx_ir(steps[name])['deploymentConfig']
    (executor,) = deployment['executorSpecs'].values()
    assert executor['beamPipelineArgs'] == [
        arg[len('--beam-arg='):] for arg in dataflow], name  # No direct_*.


# Issue 38 item 11: a token in a --beam-arg is masked in the summary, and
# the summary warns that the compiled file carries it.
def test_secret_beam_arg_is_masked_in_the_summary_with_a_warning(
    tmp_path_factory, capsys):
  path = _compile(tmp_path_factory, 'secret',
                  '--beam-arg=--s3_secret_access_key=s3cr3t-value',
                  '--beam-arg=--direct_num_workers=2', '--output-file',
                  'secret.yaml')
  out = capsys.readouterr().out
  assert 's3cr3t-value' not in out, out
  assert '--s3_secret_access_key=***' in out, out
  assert '--direct_num_workers=2' in out, out
  assert ('Warning: the compiled file carries the secret(s) '
          '--s3_secret_access_key=*** in plain text (masked here)') in out, out
  with open(path) as f:
    assert 's3cr3t-value' in f.read()  # What the step needs, as given.
