"""Compiles the taxi pipeline for Kubeflow Pipelines, offline.

Two targets, one factory (`taxi_pipeline.create_pipeline`):

* `kubeflow`: `KubeflowDagRunner` (kfp 1.8) writes an Argo workflow package.
  Every step keeps TFX's default operator functions (the
  `metadata-grpc-configmap` env, optionally the `user-gcp-sa` secret) and the
  Kubeflow metadata config; the trainer step alone gets the `TrainerPod`
  (TPU resources, node selectors, tolerations, requests), an optional trainer
  image, and the `mlpipeline-metrics` output.
* `kubeflow_v2`: `KubeflowV2DagRunner` writes a Vertex AI PipelineJob; from
  it come two files: the bare pipeline spec for a KFP v2 backend
  (`<name>.kfp-v2-pipeline.yaml`: the `PipelineSpec`, then the
  `PlatformSpec` with the trainer's node selectors and tolerations under
  `platforms.kubernetes`) and the PipelineJob for Vertex AI
  (`<name>.vertex-pipeline-job.json`). The trainer executor alone gets its
  resources in each file, in the fields that platform reads.

Module files. Compiling touches neither the network nor the pipeline root:
TFX would package each `module_file` as a wheel under
`<pipeline_root>/_wheels` (a GCS write for a `gs://` root); with
`UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES` set while the components are built
it keeps the path as given instead, so module files are named by their path
inside the image (`/tfx-tpu-trainer/components`, see the Dockerfile).
Transform's `preprocessing_fn` is named by import path
(`taxi_preprocessing.preprocessing_fn`) rather than by file, and every step
gets `PYTHONPATH=/tfx-tpu-trainer/components`: Beam's worker processes
(`--direct_running_mode=multi_processing`, or Dataflow workers running the
image) import it by that name, where a file TFX loaded by path would be
`user_module_0`, which no other process can import.
"""

import contextlib
import dataclasses
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import yaml
from absl import logging
from tfx import v1 as tfx
from tfx.orchestration.kubeflow import kubeflow_dag_runner
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.orchestration.kubeflow.v2 import pipeline_builder

from pipelines import taxi_pipeline
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer.kubeflow import beam_args as beam_args_lib
from tfx_tpu_trainer.kubeflow import kfp_v2_protos
from tfx_tpu_trainer.kubeflow import options as kubeflow_options
from tfx_tpu_trainer.kubeflow import runtimes
from tfx_tpu_trainer.kubeflow import scheduling as kubeflow
from tfx_tpu_trainer.kubeflow import tpu_check_step
from tfx_tpu_trainer.kubeflow import vertex_tpu

RUNNERS = kubeflow_options.RUNNERS
DEFAULT_IMAGE = kubeflow_options.DEFAULT_IMAGE
# Where the Dockerfile puts this repository inside the image.
IMAGE_REPO_ROOT = '/tfx-tpu-trainer'
IMAGE_COMPONENTS_DIR = posixpath.join(IMAGE_REPO_ROOT, 'components')
IMAGE_PREPROCESSING_MODULE_FILE = posixpath.join(IMAGE_COMPONENTS_DIR,
                                                 'taxi_preprocessing.py')
IMAGE_TRAINER_MODULE_FILE = posixpath.join(IMAGE_COMPONENTS_DIR,
                                           'taxi_tpu_module.py')
# Transform's preprocessing_fn by import path, importable through
# STEP_ENV's PYTHONPATH in every process of every step.
PREPROCESSING_FN = 'taxi_preprocessing.preprocessing_fn'
STEP_ENV = {'PYTHONPATH': IMAGE_COMPONENTS_DIR}
NO_PACKAGING_ENV = 'UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES'
# Beam's DirectRunner over the pod's cores; dropped when --beam-arg names
# another runner, and each one replaced by a --beam-arg of the same name.
CLUSTER_BEAM_PIPELINE_ARGS = beam_args_lib.CLUSTER_DEFAULTS
OUTPUT_EXTENSIONS = {
    'kubeflow': ('.tar.gz', '.tgz', '.zip', '.yaml', '.yml'),
    'kubeflow_v2': ('.yaml', '.yml'),
}
DEFAULT_OUTPUT_SUFFIX = {'kubeflow': '.tar.gz',
                         'kubeflow_v2': '.kfp-v2-pipeline.yaml'}
VERTEX_JOB_SUFFIX = '.vertex-pipeline-job.json'
# What KubeflowV2DagRunner accepts as a pipeline name (pipeline_builder.py).
V2_PIPELINE_NAME = re.compile(r'^[a-z0-9][a-z0-9-]{0,127}$')
KUBERNETES_PLATFORM = 'kubernetes'


@dataclasses.dataclass(frozen=True)
class CompileOptions:
  """What a compile varies; `tpu` is a validated `kubeflow.tpu_vm()` or
  `kubeflow.tpu_node()` request, required when `use_tpu`."""
  pipeline_root: str
  data_root: str
  output_path: str
  runner: str = 'kubeflow'
  image: str = DEFAULT_IMAGE
  trainer_image: Optional[str] = None
  serving_model_dir: Optional[str] = None
  pipeline_name: Optional[str] = None  # default_pipeline_name(runner)
  use_tpu: bool = True
  tpu: Optional[kubeflow.TpuScheduling] = None
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  tpu_project: Optional[str] = None
  vertex_accelerator_type: Optional[str] = None  # default: from the TPU
  trainer_node_selector: Tuple[Tuple[str, str], ...] = ()
  trainer_tolerations: Tuple[kubeflow.Toleration, ...] = ()
  trainer_cpu: Optional[str] = None
  trainer_memory: Optional[str] = None
  train_steps: int = 1000
  eval_steps: int = 50
  train_batch_size: int = 64
  eval_batch_size: int = 64
  use_gcp_sa: bool = False
  preprocessing_fn: str = PREPROCESSING_FN
  trainer_module_file: str = IMAGE_TRAINER_MODULE_FILE
  beam_args: Tuple[str, ...] = ()  # added to CLUSTER_BEAM_PIPELINE_ARGS
  # TPU runtime (runtimes.py): se or pjrt; None: the generation's default.
  tpu_runtime: Optional[str] = None
  # A TpuCheck step before every other, scheduled like the trainer.
  tpu_check: bool = False
  # kubeflow_v2: write the Vertex AI job beside the KFP v2 spec.
  vertex_job: bool = True

  @property
  def trainer_pod(self) -> kubeflow.TrainerPod:
    return kubeflow.TrainerPod(
        tpu=self.tpu if self.use_tpu else None,
        node_selector=tuple(self.trainer_node_selector),
        tolerations=tuple(self.trainer_tolerations),
        cpu_request=self.trainer_cpu, memory_request=self.trainer_memory)


@dataclasses.dataclass(frozen=True)
class CompileResult:
  """What a compile wrote, read back from the files."""
  paths: Tuple[str, ...]
  runner: str
  trainer_id: str
  trainer_image: str
  custom_config: Dict[str, Any]
  beam_pipeline_args: Tuple[str, ...]
  # One line per file: what its trainer step/executor carries.
  trainer_summaries: Tuple[str, ...]
  tpu_runtime: Optional[runtimes.RuntimeChoice] = None
  tpu_check_id: Optional[str] = None

  @property
  def path(self) -> str:
    return self.paths[0]


def default_pipeline_name(runner: str) -> str:
  """`taxi_tpu`; `taxi-tpu` for v2, whose names match `V2_PIPELINE_NAME`."""
  if runner == 'kubeflow_v2':
    return taxi_pipeline.PIPELINE_NAME.replace('_', '-')
  return taxi_pipeline.PIPELINE_NAME


def pipeline_name(options: 'CompileOptions') -> str:
  return options.pipeline_name or default_pipeline_name(options.runner)


def tpu_name(options: CompileOptions) -> Optional[str]:
  """The TPU the trainer resolves: as given, else the style's default."""
  if options.tpu_name:
    return options.tpu_name
  return options.tpu.default_tpu_name if options.tpu is not None else None


def trainer_custom_config(options: CompileOptions) -> Dict[str, Any]:
  """The TPUTrainer's `custom_config` for the cluster."""
  custom_config = {
      'use_tpu': options.use_tpu,
      'train_batch_size': options.train_batch_size,
      'eval_batch_size': options.eval_batch_size,
  }
  name = tpu_name(options) if options.use_tpu else None
  if name:
    custom_config['tpu'] = config_lib.tpu_entry(name, options.tpu_zone,
                                                options.tpu_project)
  return custom_config


def beam_arg_name(arg: str) -> str:
  """`--runner=DataflowRunner` -> `runner`."""
  return beam_args_lib.name(arg)


def beam_pipeline_args(beam_args: Sequence[str]) -> List[str]:
  """The cluster defaults, overridden and extended by `beam_args`.

  A `beam_args` entry replaces the default of the same name; a `--runner`
  other than the DirectRunner (by Beam's name resolution) drops them.
  """
  return beam_args_lib.pipeline_args(beam_args)


def pipeline_options(options: CompileOptions
                    ) -> taxi_pipeline.TaxiPipelineOptions:
  """The factory's options; no metadata config (the runner brings it)."""
  serving_model_dir = options.serving_model_dir or _join(
      options.pipeline_root, 'serving_model')
  return taxi_pipeline.TaxiPipelineOptions(
      pipeline_root=options.pipeline_root,
      data_root=options.data_root,
      serving_model_dir=serving_model_dir,
      preprocessing_fn=options.preprocessing_fn,
      trainer_module_file=options.trainer_module_file,
      train_steps=options.train_steps,
      eval_steps=options.eval_steps,
      custom_config=trainer_custom_config(options),
      pipeline_name=pipeline_name(options),
      metadata_connection_config=None,
      beam_pipeline_args=beam_pipeline_args(options.beam_args))


def default_output_file(runner: str, pipeline_name: str) -> str:
  return pipeline_name + DEFAULT_OUTPUT_SUFFIX[runner]


def vertex_job_path(kfp_v2_path: str) -> str:
  """`x.kfp-v2-pipeline.yaml` (or `x.yaml`) -> `x.vertex-pipeline-job.json`."""
  for suffix in (DEFAULT_OUTPUT_SUFFIX['kubeflow_v2'],) + OUTPUT_EXTENSIONS[
      'kubeflow_v2']:
    if kfp_v2_path.endswith(suffix):
      return kfp_v2_path[:-len(suffix)] + VERTEX_JOB_SUFFIX
  raise ValueError(f'{kfp_v2_path!r} does not end with .yaml or .yml')


def output_paths(runner: str, output_path: str,
                 vertex_job: bool = True) -> Tuple[str, ...]:
  """Every file a compile writes: v2 writes the Vertex job beside the spec."""
  if runner == 'kubeflow_v2' and vertex_job:
    return (output_path, vertex_job_path(output_path))
  return (output_path,)


def vertex_accelerator_type(options: CompileOptions) -> Optional[str]:
  """Vertex AI's accelerator for the trainer: None; a TPU is refused.

  Raises:
    ValueError: with use_tpu: no Vertex AI pipeline step can carry the GKE
      TPU VM slice the KFP v2 spec requests (vertex_tpu.py says why).
  """
  if not options.use_tpu:
    return None
  raise ValueError(vertex_tpu.refusal(
      getattr(options.tpu, 'accelerator', str(options.tpu)),
      getattr(options.tpu, 'topology', ''), options.vertex_accelerator_type))


def tpu_runtime(options: CompileOptions) -> Optional[runtimes.RuntimeChoice]:
  """The TPU runtime of the trainer step (None: no TPU VM).

  Raises:
    runtimes.TPURuntimeError: a generation or runtime TF 2.15 lacks.
  """
  if not options.use_tpu or not isinstance(options.tpu,
                                           kubeflow.TpuVmScheduling):
    return None
  return runtimes.choose(options.tpu.accelerator, options.tpu_runtime)


def compile_pipeline(options: CompileOptions) -> CompileResult:
  """Builds the pipeline and compiles it to `options.output_path`.

  Every file appears whole or not at all: the runner writes into a temporary
  directory beside it, and the results are moved into place.

  Args:
    options: the compile options (checked by the caller).

  Returns:
    What was written, read back from the files.

  Raises:
    ValueError: for an unknown runner, a missing TPU request, a TPU-node
      request for kubeflow_v2, or a pipeline without exactly one TPUTrainer.
    RuntimeError: when the trainer step was not found while compiling.
  """
  if options.runner not in RUNNERS:
    raise ValueError(f'runner must be one of {RUNNERS}, got {options.runner!r}')
  if options.use_tpu and options.tpu is None:
    raise ValueError('use_tpu needs a TPU request (options.tpu).')
  if (options.runner == 'kubeflow_v2' and options.use_tpu and
      not isinstance(options.tpu, kubeflow.TpuVmScheduling)):
    raise ValueError('kubeflow_v2 takes TPU VM requests only (tpu_vm()).')
  if options.tpu_check and not options.use_tpu:
    raise ValueError('tpu_check needs use_tpu: it checks the trainer\'s TPU.')
  pod = options.trainer_pod
  runtime = tpu_runtime(options)
  vertex_type = (vertex_accelerator_type(options)
                 if options.runner == 'kubeflow_v2' and options.vertex_job
                 else None)
  paths = tuple(os.path.abspath(p)
                for p in output_paths(options.runner, options.output_path,
                                      options.vertex_job))
  output_dir = os.path.dirname(paths[0])
  os.makedirs(output_dir, exist_ok=True)
  staging = tempfile.mkdtemp(dir=output_dir, prefix='.compile-')
  try:
    with user_modules_not_packaged():
      factory_options = pipeline_options(options)
      pipeline = taxi_pipeline.create_pipeline(factory_options)
      trainer = _trainer(pipeline)
      # The TPU steps: the trainer, and the check scheduled like it.
      tpu_steps = TpuSteps(trainer.id, runtime.env if runtime else {})
      if options.tpu_check:
        tpu_steps.check_id = tpu_check_step.add_first(pipeline).id
      if options.runner == 'kubeflow':
        _compile_v1(options, pod, pipeline, tpu_steps, staging,
                    os.path.basename(paths[0]))
        summaries = (describe_v1_trainer(
            os.path.join(staging, os.path.basename(paths[0])), trainer.id),)
      else:
        summaries = _compile_v2(options, pod, vertex_type, pipeline,
                                tpu_steps, staging, paths)
    for path in paths:
      os.replace(os.path.join(staging, os.path.basename(path)), path)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return CompileResult(
      paths=paths,
      runner=options.runner,
      trainer_id=trainer.id,
      trainer_image=options.trainer_image or options.image,
      custom_config=factory_options.custom_config,
      beam_pipeline_args=tuple(factory_options.beam_pipeline_args),
      trainer_summaries=summaries,
      tpu_runtime=runtime,
      tpu_check_id=tpu_steps.check_id)


@dataclasses.dataclass
class TpuSteps:
  """The steps scheduled on the TPU: the trainer, and the check if any."""
  trainer_id: str
  env: Dict[str, str]  # The TPU runtime's (runtimes.RuntimeChoice.env).
  check_id: Optional[str] = None

  @property
  def ids(self) -> List[str]:
    return [self.trainer_id] + ([self.check_id] if self.check_id else [])


@contextlib.contextmanager
def user_modules_not_packaged() -> Iterator[None]:
  """Sets UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES=1, then restores it."""
  previous = os.environ.get(NO_PACKAGING_ENV)
  os.environ[NO_PACKAGING_ENV] = '1'
  try:
    yield
  finally:
    if previous is None:
      del os.environ[NO_PACKAGING_ENV]
    else:
      os.environ[NO_PACKAGING_ENV] = previous


def _compile_v1(options: CompileOptions, pod: kubeflow.TrainerPod,
                pipeline: tfx.dsl.Pipeline, tpu_steps: 'TpuSteps',
                output_dir: str, output_filename: str) -> None:
  trainer_op = kubeflow.trainer_step_op(tpu_steps.trainer_id, pod,
                                        options.trainer_image, tpu_steps.env)
  step_ops = [trainer_op]
  if tpu_steps.check_id:
    step_ops.append(kubeflow.tpu_step_op(tpu_steps.check_id, pod,
                                         options.trainer_image, tpu_steps.env))
  config = kubeflow_dag_runner.KubeflowDagRunnerConfig(
      pipeline_operator_funcs=kubeflow.pipeline_operator_funcs(
          trainer_op, use_gcp_sa=options.use_gcp_sa, env=STEP_ENV) +
      step_ops[1:],
      tfx_image=options.image,
      kubeflow_metadata_config=(
          kubeflow_dag_runner.get_default_kubeflow_metadata_config()))
  kubeflow_dag_runner.KubeflowDagRunner(
      output_dir=output_dir, output_filename=output_filename,
      config=config).run(pipeline)
  for step_op in step_ops:
    if len(step_op.applied_to) != 1:
      raise RuntimeError(
          f'Expected one step for component {step_op.component_id!r}, found '
          f'{step_op.applied_to}.')
    logging.info('Step %s carries the trainer pod options.',
                 step_op.applied_to[0])


def _compile_v2(options: CompileOptions, pod: kubeflow.TrainerPod,
                vertex_type: Optional[str], pipeline: tfx.dsl.Pipeline,
                tpu_steps: 'TpuSteps', staging: str,
                paths: Sequence[str]) -> Tuple[str, ...]:
  """PipelineJob from the runner; the KFP v2 spec and Vertex job from it."""
  default_image = options.image
  if options.trainer_image:
    default_image = {pipeline_builder.DEFAULT_IMAGE_PATH_KEY: options.image}
    default_image.update({step: options.trainer_image
                          for step in tpu_steps.ids})
  # Schema 2.1.0: the only one a KFP v2 backend accepts on upload (its API
  # server refuses 2.0.0, TFX's default); Vertex AI takes it too.
  config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
      default_image=default_image, use_pipeline_spec_2_1=True)
  runner_output = 'runner-pipeline-job.json'
  kubeflow_v2_dag_runner.KubeflowV2DagRunner(
      config=config, output_dir=staging,
      output_filename=runner_output).run(pipeline)
  with open(os.path.join(staging, runner_output)) as f:
    job = json.load(f)
  trainer_id = tpu_steps.trainer_id
  tpu_executors = [trainer_executor_label(job['pipelineSpec'], step)
                   for step in tpu_steps.ids]
  # Beam args on the components that run Beam only, as v1 has them.
  beam_args_lib.strip_from_other_executors(
      job['pipelineSpec'],
      beam_args_lib.beam_component_ids(pipeline.components),
      pipeline.beam_pipeline_args)
  for container in _containers(job['pipelineSpec']):
    container['env'] = [{'name': k, 'value': v} for k, v in STEP_ENV.items()]
  for executor in tpu_executors:  # The TPU runtime's environment.
    _container(job['pipelineSpec'], executor)['env'] += [
        {'name': k, 'value': v} for k, v in tpu_steps.env.items()]

  kfp_spec = json.loads(json.dumps(job['pipelineSpec']))
  kfp_spec['defaultPipelineRoot'] = options.pipeline_root
  resources = pod.kfp_v2_resources()
  if resources:
    for executor in tpu_executors:
      _container(kfp_spec, executor)['resources'] = resources
  documents = [kfp_spec]
  executor_config = pod.kubernetes_executor_config()
  if executor_config:
    documents.append({'platforms': {KUBERNETES_PLATFORM: {
        'deploymentSpec': {'executors': {
            executor: executor_config for executor in tpu_executors}}}}})
  # Strict round trips through the real protobufs: nothing unknown is written.
  kfp_v2_protos.parse(documents[0], kfp_v2_protos.PIPELINE_SPEC)
  if executor_config:
    kfp_v2_protos.parse(documents[1], kfp_v2_protos.PLATFORM_SPEC)
    kfp_v2_protos.parse(executor_config,
                        kfp_v2_protos.KUBERNETES_EXECUTOR_CONFIG)
  with open(os.path.join(staging, os.path.basename(paths[0])), 'w') as f:
    yaml.safe_dump_all(documents, f, sort_keys=False)

  summaries = (describe_kfp_v2_trainer(
      os.path.join(staging, os.path.basename(paths[0])), trainer_id),)
  if not options.vertex_job:
    return summaries
  vertex_resources = pod.vertex_resources(vertex_type)
  if vertex_resources:
    for executor in tpu_executors:
      _container(job['pipelineSpec'], executor)['resources'] = (
          vertex_resources)
  _parse_vertex_job(job)
  with open(os.path.join(staging, os.path.basename(paths[1])), 'w') as f:
    json.dump(job, f, indent=2, sort_keys=True)
  return summaries + (describe_vertex_trainer(
      os.path.join(staging, os.path.basename(paths[1])), trainer_id),)


def _parse_vertex_job(job: Dict[str, Any]) -> None:
  """The Vertex AI PipelineJob must parse as kfp-pipeline-spec's PipelineJob."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from kfp.pipeline_spec import pipeline_spec_pb2  # pylint: disable=g-import-not-at-top
  json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob())


def trainer_executor_label(spec: Dict[str, Any], trainer_id: str) -> str:
  """The executor label of the trainer's task in a pipeline spec."""
  task = spec['root']['dag']['tasks'][trainer_id]
  component = spec['components'][task['componentRef']['name']]
  return component['executorLabel']


def _containers(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
  return [e['container'] for e in spec['deploymentSpec']['executors'].values()
          if 'container' in e]


def _container(spec: Dict[str, Any], executor: str) -> Dict[str, Any]:
  return spec['deploymentSpec']['executors'][executor]['container']


# --- What the files say (the CLI reports these, never its own options) ----


def read_argo_workflow(path: str) -> Dict[str, Any]:
  """The workflow of a `KubeflowDagRunner` output (.tar.gz/.tgz/.zip/.yaml)."""
  if path.endswith(('.tar.gz', '.tgz')):
    with tarfile.open(path) as package:
      return yaml.safe_load(package.extractfile('pipeline.yaml'))
  if path.endswith('.zip'):
    import zipfile  # pylint: disable=g-import-not-at-top
    with zipfile.ZipFile(path) as package:
      return yaml.safe_load(package.read('pipeline.yaml'))
  with open(path) as f:
    return yaml.safe_load(f)


def argo_step(workflow: Dict[str, Any], component_id: str) -> Dict[str, Any]:
  """The container template of a component's step (Argo names it lowercase)."""
  for template in workflow['spec']['templates']:
    if 'container' in template and template['name'] == _argo_name(component_id):
      return template
  raise KeyError(component_id)


def _argo_name(component_id: str) -> str:
  return re.sub(r'[^a-z0-9-]+', '-', component_id.lower()).strip('-')


def describe_v1_trainer(path: str, trainer_id: str) -> str:
  step = argo_step(read_argo_workflow(path), trainer_id)
  container = step['container']
  resources = container.get('resources') or {}
  return _describe(os.path.basename(path), container['image'],
                   resources.get('limits') or {},
                   resources.get('requests') or {},
                   step.get('nodeSelector') or {},
                   step.get('tolerations') or [],
                   (step.get('metadata') or {}).get('annotations') or {},
                   container.get('env') or [])


def describe_kfp_v2_trainer(path: str, trainer_id: str) -> str:
  with open(path) as f:
    documents = list(yaml.safe_load_all(f))
  executor = trainer_executor_label(documents[0], trainer_id)
  container = _container(documents[0], executor)
  resources = container.get('resources') or {}
  accelerator = resources.get('accelerator') or {}
  limits = ({accelerator['resourceType']: accelerator['resourceCount']}
            if accelerator else {})
  requests = {k: resources[f] for k, f in (('cpu', 'resourceCpuRequest'),
                                           ('memory', 'resourceMemoryRequest'))
              if f in resources}
  config = {}
  if len(documents) > 1:
    config = documents[1]['platforms'][KUBERNETES_PLATFORM]['deploymentSpec'][
        'executors'].get(executor, {})
  return _describe(os.path.basename(path), container['image'], limits,
                   requests, (config.get('nodeSelector') or {}).get(
                       'labels', {}), config.get('tolerations') or [], {},
                   container.get('env') or [])


def describe_vertex_trainer(path: str, trainer_id: str) -> str:
  with open(path) as f:
    spec = json.load(f)['pipelineSpec']
  container = _container(spec, trainer_executor_label(spec, trainer_id))
  resources = container.get('resources') or {}
  accelerator = resources.get('accelerator') or {}
  limits = {accelerator['type']: accelerator['count']} if accelerator else {}
  for name, field, unit in (('cpu', 'cpuLimit', ''),
                            ('memory', 'memoryLimit', 'G')):
    if field in resources:
      limits[name] = f'{resources[field]:g}{unit}'
  return _describe(os.path.basename(path), container['image'], limits, {}, {},
                   [], {}, container.get('env') or [])


def _describe(name: str, image: str, limits: Dict[str, Any],
              requests: Dict[str, Any], node_selector: Dict[str, str],
              tolerations: List[Dict[str, Any]],
              annotations: Dict[str, str],
              env: Sequence[Dict[str, Any]] = ()) -> str:
  parts = [f'image {image}']
  if limits:
    parts.append('limits ' + ', '.join(f'{k}: {v}' for k, v in limits.items()))
  if requests:
    parts.append('requests ' + ', '.join(f'{k}: {v}'
                                         for k, v in requests.items()))
  if node_selector:
    parts.append('node selector ' + ', '.join(
        f'{k}={v}' for k, v in node_selector.items()))
  if tolerations:
    parts.append('tolerations ' + ', '.join(
        f'{t.get("key")}{"=" + t["value"] if t.get("value") else ""}:'
        f'{t.get("effect")}' for t in tolerations))
  if annotations:
    parts.append('annotations ' + ', '.join(
        f'{k}: {v}' for k, v in annotations.items()))
  runtime_env = [f'{e.get("name")}={e.get("value")}' for e in env
                 if e.get('name') in runtimes.STEP_ENV_NAMES]
  if runtime_env:
    parts.append('TPU runtime env ' + ', '.join(runtime_env))
  if not any('tpu' in str(k).lower() for k in limits):
    parts.append('no TPU')
  return f'{name}: ' + '; '.join(parts)


def _trainer(pipeline: tfx.dsl.Pipeline) -> TPUTrainer:
  trainers = [c for c in pipeline.components if isinstance(c, TPUTrainer)]
  if len(trainers) != 1:
    raise ValueError(
        f'Expected exactly one TPUTrainer in pipeline '
        f'{pipeline.pipeline_info.pipeline_name!r}, found {len(trainers)}.')
  return trainers[0]


def _join(root: str, name: str) -> str:
  # posixpath: pipeline roots are URIs (gs://...) or paths in the image.
  return posixpath.join(root, name)
