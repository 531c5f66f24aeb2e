"""Compiles any TFX pipeline with `TPUTrainer` for Kubeflow Pipelines."""

import contextlib
import copy
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import yaml
from absl import logging
from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec
from tfx.orchestration.kubeflow import kubeflow_dag_runner
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.orchestration.kubeflow.v2 import pipeline_builder
from tfx.proto import trainer_pb2
from tfx.types import standard_component_specs
from tfx.utils import json_utils
from tfx.utils import proto_utils

from tfx_tpu_trainer import component as component_lib
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.kubeflow import beam_args as beam_args_lib
from tfx_tpu_trainer.kubeflow import beam_runners
from tfx_tpu_trainer.kubeflow import compiled_files
from tfx_tpu_trainer.kubeflow import inferrer_steps
from tfx_tpu_trainer.kubeflow import kfp_v2_protos
from tfx_tpu_trainer.kubeflow import options as kubeflow_options
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.kubeflow import tpu_check_step
from tfx_tpu_trainer.kubeflow import tpu_slices
from tfx_tpu_trainer.kubeflow import v2_metrics as v2_metrics_step
from tfx_tpu_trainer.kubeflow import v2_step
from tfx_tpu_trainer.kubeflow import vertex_tpu
from tfx_tpu_trainer.publishing import v2_metrics
from tfx_tpu_trainer.tpu import runtimes
from tfx_tpu_trainer.tpu import worker_group
from tfx_tpu_trainer.training import tpu_slice as tpu_slice_lib

__all__ = ['KUBEFLOW', 'KUBEFLOW_V2', 'RUNNERS', 'DEFAULT_IMAGE',
           'NO_PACKAGING_ENV', 'CLUSTER_BEAM_PIPELINE_ARGS',
           'OUTPUT_EXTENSIONS', 'DEFAULT_OUTPUT_SUFFIX', 'VERTEX_JOB_SUFFIX',
           'V2_PIPELINE_NAME', 'KUBERNETES_PLATFORM', 'USE_TPU_KEY', 'TPU_KEY',
           'CUSTOM_CONFIG_KEY', 'CompileError', 'KubeflowOptions',
           'CompileResult', 'user_modules_not_packaged', 'beam_arg_name',
           'beam_pipeline_args', 'default_output_file', 'vertex_job_path',
           'output_paths', 'vertex_accelerator_type', 'tpu_runtime',
           'trainer_image', 'check_cluster_options', 'check_options',
           'tpu_custom_config', 'compile_pipeline', 'TPUSteps']

KUBEFLOW = 'kubeflow'
KUBEFLOW_V2 = 'kubeflow_v2'
RUNNERS = kubeflow_options.RUNNERS
DEFAULT_IMAGE = kubeflow_options.DEFAULT_IMAGE
NO_PACKAGING_ENV = 'UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES'
# Beam's DirectRunner over the pod's cores; dropped when a Beam argument
# names another runner, and each one replaced by an argument of its name.
CLUSTER_BEAM_PIPELINE_ARGS = beam_args_lib.CLUSTER_DEFAULTS
OUTPUT_EXTENSIONS = {
    KUBEFLOW: ('.tar.gz', '.tgz', '.zip', '.yaml', '.yml'),
    KUBEFLOW_V2: ('.yaml', '.yml'),
}
DEFAULT_OUTPUT_SUFFIX = {KUBEFLOW: '.tar.gz',
                         KUBEFLOW_V2: '.kfp-v2-pipeline.yaml'}
VERTEX_JOB_SUFFIX = '.vertex-pipeline-job.json'
# What KubeflowV2DagRunner accepts as a pipeline name (pipeline_builder.py).
V2_PIPELINE_NAME = re.compile(r'^[a-z0-9][a-z0-9-]{0,127}$')
KUBERNETES_PLATFORM = compiled_files.KUBERNETES_PLATFORM
# TPUTrainer custom_config keys a TPU compile fills in.
USE_TPU_KEY = 'use_tpu'
TPU_KEY = 'tpu'
CUSTOM_CONFIG_KEY = 'custom_config'
# How long a compiled multi-host driver waits for its worker pods.
COMPILED_WORKER_WAIT_SECS = 1800


class CompileError(errors.TPUTrainerError, ValueError):
  """The pipeline or the options cannot be compiled; nothing was written.

  Attributes:
    option: the `KubeflowOptions` field the message is about, or None; the
      message names it where `{option}` stands, so a caller that set it
      another way (a command-line flag) names it as its user wrote it.
  """

  def __init__(self, message: str, option: Optional[str] = None):
    self._template = message
    self.option = option
    super().__init__(self.naming(option) if option else message)

  def naming(self, name: str) -> str:
    """The message with the option called `name` (e.g. `--tpu-check`)."""
    return self._template.format(option=name) if self.option else str(self)


@dataclasses.dataclass(frozen=True)
class KubeflowOptions:
  """How a pipeline is compiled for Kubeflow.

  Attributes:
    runner: `kubeflow` (KFP v1, Argo) or `kubeflow_v2` (KFP v2 + Vertex AI).
    image: the image of every step.
    trainer_image: the image of the TPUTrainer steps (e.g. with the TPU
      runtime), None for `image`; `{runtime}` in it becomes the TPU runtime
      chosen (`se`, `pjrt`), e.g. `gcr.io/P/tfx-tpu-trainer-tpu-{runtime}:1`.
    trainer_pod: TPU, node selectors, tolerations and requests of every
      TPUTrainer step; `trainer_pod.tpu` None trains on CPU.
    tpu_name, tpu_zone, tpu_project: the TPU the trainers resolve, written
      into `custom_config['tpu']` where a trainer names none (default: the
      TPU style's, `local` for a TPU VM).
    vertex_accelerator_type: kubeflow_v2: Vertex AI's accelerator type for
      the trainers. With a TPU every value is refused, as is the Vertex job
      itself (`vertex_tpu.py`); kept so the refusal can name the value.
    beam_args: Beam arguments added last to every Beam-powered component,
      each one option Beam accepts (`beam_args.validate`).
    cluster_beam_defaults: start from `CLUSTER_BEAM_PIPELINE_ARGS`.
    step_env: environment variables of every step.
    use_gcp_sa: kubeflow: mount the `user-gcp-sa` secret on every step.
    tpu_runtime: the TPU runtime of a TPU VM request, `se` or `pjrt`
      (tpu/runtimes.py); None: the generation's default.
    tpu_check: add a `TPUCheck` step before every other, scheduled like the
      trainers (needs a TPU).
    vertex_job: kubeflow_v2: write the Vertex AI job beside the KFP v2 spec
      (refused with a TPU: pass False to write the spec alone).
  """
  runner: str = KUBEFLOW
  image: str = DEFAULT_IMAGE
  trainer_image: Optional[str] = None
  trainer_pod: scheduling.TrainerPod = scheduling.TrainerPod()
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  tpu_project: Optional[str] = None
  vertex_accelerator_type: Optional[str] = None
  beam_args: Tuple[str, ...] = ()
  cluster_beam_defaults: bool = True
  step_env: Tuple[Tuple[str, str], ...] = ()
  use_gcp_sa: bool = False
  tpu_runtime: Optional[str] = None
  tpu_check: bool = False
  vertex_job: bool = True

  @property
  def use_tpu(self) -> bool:
    return self.trainer_pod.tpu is not None


@dataclasses.dataclass(frozen=True)
class CompileResult:
  """What a compile wrote, read back from the files."""
  paths: Tuple[str, ...]
  runner: str
  pipeline_name: str
  trainer_ids: Tuple[str, ...]
  trainer_image: str
  # Trainer id -> its compiled custom_config.
  custom_configs: Dict[str, Dict[str, Any]]
  beam_pipeline_args: Tuple[str, ...]
  # One line per file and trainer: what its trainer step/executor carries.
  trainer_summaries: Tuple[str, ...]
  # The TPU runtime of the TPU steps (None: no TPU VM), with its warnings.
  tpu_runtime: Optional[runtimes.RuntimeChoice] = None
  # The TPUCheck step's component id (None: no tpu_check).
  tpu_check_id: Optional[str] = None
  # `component id: value` of each component's user code as compiled (a
  # module file TFX packaged reads `<name>@<wheel under the pipeline root>`).
  user_code: Tuple[str, ...] = ()
  # The TPUBulkInferrers, scheduled as the trainers are: ids, custom_config
  # as compiled, one line per file and inferrer.
  inferrer_ids: Tuple[str, ...] = ()
  inferrer_custom_configs: Dict[str, Dict[str, Any]] = dataclasses.field(
      default_factory=dict)
  inferrer_summaries: Tuple[str, ...] = ()

  @property
  def path(self) -> str:
    return self.paths[0]

  @property
  def trainer_id(self) -> str:
    return self.trainer_ids[0]

  @property
  def custom_config(self) -> Dict[str, Any]:
    return self.custom_configs[self.trainer_id]


@contextlib.contextmanager
def user_modules_not_packaged() -> Iterator[None]:
  """Components built inside keep `module_file` paths as given (no wheels).

  Sets UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES=1 (TFX reads it when a
  component is built), then restores it.
  """
  previous = os.environ.get(NO_PACKAGING_ENV)
  os.environ[NO_PACKAGING_ENV] = '1'
  try:
    yield
  finally:
    if previous is None:
      del os.environ[NO_PACKAGING_ENV]
    else:
      os.environ[NO_PACKAGING_ENV] = previous


def beam_arg_name(arg: str) -> str:
  """`--runner=DataflowRunner` -> `runner`."""
  return beam_args_lib.name(arg)


def beam_pipeline_args(beam_args: Sequence[str],
                       existing: Sequence[Any] = (),
                       cluster_defaults: bool = True,
                       defaults: Sequence[str] = CLUSTER_BEAM_PIPELINE_ARGS
                      ) -> List[Any]:
  """The cluster `defaults`, then `existing`, then `beam_args`.

  As `beam_args.merged` merges them.

  Raises:
    CompileError: a `--runner` Beam does not know.
  """
  try:
    return beam_args_lib.merged(beam_args, existing, cluster_defaults,
                                defaults)
  except beam_args_lib.BeamArgError as e:
    raise CompileError(str(e)) from e


def default_output_file(runner: str, pipeline_name: str) -> str:
  """`<name>.tar.gz` (kubeflow) or `<name>.kfp-v2-pipeline.yaml`."""
  return pipeline_name + DEFAULT_OUTPUT_SUFFIX[runner]


def vertex_job_path(kfp_v2_path: str) -> str:
  """`x.kfp-v2-pipeline.yaml` (or `x.yaml`) -> `x.vertex-pipeline-job.json`."""
  for suffix in (DEFAULT_OUTPUT_SUFFIX[KUBEFLOW_V2],) + OUTPUT_EXTENSIONS[
      KUBEFLOW_V2]:
    if kfp_v2_path.endswith(suffix):
      return kfp_v2_path[:-len(suffix)] + VERTEX_JOB_SUFFIX
  raise ValueError(f'{kfp_v2_path!r} does not end with .yaml or .yml')


def output_paths(runner: str, output_path: str,
                 vertex_job: bool = True) -> Tuple[str, ...]:
  """Every file a compile writes: v2 writes the Vertex job beside the spec."""
  if runner == KUBEFLOW_V2 and vertex_job:
    return (output_path, vertex_job_path(output_path))
  return (output_path,)


def vertex_accelerator_type(options: KubeflowOptions) -> Optional[str]:
  """Vertex AI's accelerator for the trainers: None; a TPU is refused.

  Raises:
    CompileError: with a TPU: no Vertex AI pipeline step can carry the GKE
      TPU VM slice the KFP v2 spec requests (vertex_tpu.py says why and
      what to do).
  """
  tpu = options.trainer_pod.tpu
  if tpu is None:
    return None
  raise CompileError(vertex_tpu.refusal(
      getattr(tpu, 'accelerator', str(tpu)), getattr(tpu, 'topology', ''),
      options.vertex_accelerator_type))


def tpu_runtime(options: KubeflowOptions) -> Optional[runtimes.RuntimeChoice]:
  """The TPU runtime of the TPU steps (None: no TPU VM request).

  Raises:
    CompileError: a generation or runtime TF 2.15 lacks, or `tpu_runtime`
      without a TPU VM request.
  """
  tpu = options.trainer_pod.tpu
  if not isinstance(tpu, (scheduling.TPUVMScheduling,
                          tpu_slices.TPUSliceScheduling)):
    if options.tpu_runtime is not None:
      raise CompileError(
          f'tpu_runtime {options.tpu_runtime!r} needs a TPU VM request '
          '(trainer_pod.tpu = scheduling.tpu_vm(...)); TPU nodes and CPU '
          'trainers have no TPU runtime to choose.')
    return None
  try:
    return runtimes.choose(tpu.accelerator, options.tpu_runtime)
  except runtimes.TPURuntimeError as e:
    raise CompileError(str(e)) from e


def trainer_image(options: KubeflowOptions,
                  runtime: Optional[runtimes.RuntimeChoice]) -> Optional[str]:
  """`options.trainer_image` with `{runtime}` replaced by the TPU runtime.

  Raises:
    CompileError: `{runtime}` without a TPU VM request.
  """
  image = options.trainer_image
  if image is None or runtimes.IMAGE_RUNTIME_FIELD not in image:
    return image
  if runtime is None:
    raise CompileError(
        f'trainer_image {image!r} names {runtimes.IMAGE_RUNTIME_FIELD}, which '
        'needs a TPU VM runtime (trainer_pod.tpu = scheduling.tpu_vm(...)).')
  return runtime.image_name(image)


def check_cluster_options(options: KubeflowOptions
                         ) -> Optional[runtimes.RuntimeChoice]:
  """The checks that need no pipeline; returns the TPU runtime chosen.

  Raises:
    CompileError: naming the bad option.
  """
  if options.runner not in RUNNERS:
    raise CompileError(
        f'runner must be one of {RUNNERS}, got {options.runner!r}')
  tpu = options.trainer_pod.tpu
  if options.tpu_check and tpu is None:
    raise CompileError(
        '{option} needs a TPU (trainer_pod.tpu): it checks the trainer\'s '
        'TPU.', option='tpu_check')
  if options.tpu_check and isinstance(tpu, tpu_slices.TPUSliceScheduling):
    raise CompileError(
        '{option} checks the TPU of one host; a multi-host slice has no '
        'pipeline step on its hosts (the trainer creates them). Compile '
        'without {option}.', option='tpu_check')
  if not options.vertex_job and options.runner != KUBEFLOW_V2:
    raise CompileError('vertex_job=False needs runner kubeflow_v2.')
  runtime = tpu_runtime(options)
  trainer_image(options, runtime)
  if options.runner == KUBEFLOW_V2:
    if tpu is not None and not isinstance(
        tpu, (scheduling.TPUVMScheduling, tpu_slices.TPUSliceScheduling)):
      raise CompileError('kubeflow_v2 takes TPU VM requests only (tpu_vm()).')
    if options.vertex_job:
      vertex_accelerator_type(options)
    elif options.vertex_accelerator_type:
      raise CompileError(
          'vertex_accelerator_type needs the Vertex AI job (vertex_job=True).')
  elif options.vertex_accelerator_type:
    raise CompileError('vertex_accelerator_type needs runner kubeflow_v2.')
  try:
    beam_args_lib.validate(options.beam_args)
  except beam_args_lib.BeamArgError as e:
    raise CompileError(str(e)) from e
  return runtime


def check_options(options: KubeflowOptions, pipeline_name: str
                 ) -> Optional[runtimes.RuntimeChoice]:
  """What can be checked before the pipeline is compiled.

  Returns:
    The TPU runtime chosen (None: no TPU VM request).

  Raises:
    CompileError: naming the bad option.
  """
  runtime = check_cluster_options(options)
  if options.runner == KUBEFLOW_V2 and not V2_PIPELINE_NAME.match(
      pipeline_name):
    raise CompileError(
        f'Pipeline name {pipeline_name!r} is not accepted by kubeflow_v2: '
        'use lower-case letters, digits and -, e.g. taxi-tpu.')
  return runtime


def tpu_custom_config(custom_config: Mapping[str, Any],
                      options: KubeflowOptions,
                      trainer_id: str = 'TPUTrainer',
                      has_base_model: Optional[bool] = None,
                      steps: Optional[Tuple[Optional[int], Optional[int]]]
                      = None) -> Dict[str, Any]:
  """A trainer's custom_config for the compiled pipeline.

  With a TPU request, `use_tpu: true` and the TPU to resolve are added where
  the trainer does not set them; without one, it is returned unchanged.
  Checked as the executor checks it, and against what only the compile
  knows: the hosts of a multi-host slice, and (when given) whether the
  trainer has a base model to warm-start from (`has_base_model`) and its
  train and eval steps (`steps`), which `params` may repeat only as they
  are.

  Raises:
    CompileError: the trainer sets `use_tpu: false` on a TPU compile, or the
      result is not a valid TPUTrainer config.
  """
  config = dict(custom_config)
  if options.use_tpu:
    if config.get(USE_TPU_KEY) is False:
      raise CompileError(
          f'TPUTrainer {trainer_id!r} sets custom_config[{USE_TPU_KEY!r}]='
          'False, but the compile schedules it on a TPU: drop the key, or '
          'compile without a TPU (--no-use-tpu).')
    config.setdefault(USE_TPU_KEY, True)
    name = options.tpu_name or options.trainer_pod.tpu.default_tpu_name
    if TPU_KEY not in config and name:
      config[TPU_KEY] = config_lib.tpu_entry(name, options.tpu_zone,
                                             options.tpu_project)
  try:
    # The executor's own check of the same dict (no TPU_NAME at compile).
    checked = config_lib.TrainerConfig.from_custom_config(config, environ={})
    if isinstance(options.trainer_pod.tpu, tpu_slices.TPUSliceScheduling):
      checked.check_input_mode(options.trainer_pod.tpu.hosts)
    if has_base_model is not None:
      checked.check_warm_start(has_base_model)
    if steps is not None:
      checked.check_params_steps(*steps)
  except config_lib.ConfigError as e:
    raise CompileError(f'TPUTrainer {trainer_id!r}: {e}') from e
  return config


def compile_pipeline(pipeline: tfx.dsl.Pipeline, output_path: str,
                     options: KubeflowOptions = KubeflowOptions()
                    ) -> CompileResult:
  """Compiles `pipeline` to `output_path` (and, for v2, the Vertex job).

  Every file appears whole or not at all: the runner writes into a temporary
  directory beside it, and the results are moved into place. The caller's
  `pipeline` is left as it was: the TPUTrainers' `custom_config`, the Beam
  arguments, the TPUCheck step (see the module docstring) and what TFX's
  runners change while compiling go into a copy, so one pipeline object
  compiles for several targets.

  Args:
    pipeline: a TFX pipeline with at least one TPUTrainer.
    output_path: the KFP v1 package (.tar.gz, .tgz, .zip, .yaml, .yml) or
      the KFP v2 spec (.yaml, .yml; the Vertex job goes beside it).
    options: how to compile.

  Returns:
    What was written, read back from the files.

  Raises:
    component_lib.NoTPUTrainerError: the pipeline has no TPUTrainer.
    CompileError: a bad option, or a trainer step not found while compiling.
  """
  pipeline = _copy(pipeline)
  name = pipeline.pipeline_info.pipeline_name
  runtime = check_options(options, name)
  if not output_path.endswith(OUTPUT_EXTENSIONS[options.runner]):
    raise CompileError(
        f'Output file {output_path!r} must end with one of '
        f'{", ".join(OUTPUT_EXTENSIONS[options.runner])} for runner '
        f'{options.runner}.')
  trainers = component_lib.tpu_trainers(pipeline)
  custom_configs = {
      t.id: tpu_custom_config(
          _custom_config(t), options, t.id,
          has_base_model=(standard_component_specs.BASE_MODEL_KEY in
                          t.inputs),
          steps=_trainer_steps(t))
      for t in trainers}
  vertex_type = (vertex_accelerator_type(options)
                 if options.runner == KUBEFLOW_V2 and options.vertex_job
                 else None)
  paths = tuple(os.path.abspath(p)
                for p in output_paths(options.runner, output_path,
                                      options.vertex_job))
  try:
    inferrer_configs = inferrer_steps.inferrer_custom_configs(
        pipeline, options.use_tpu,
        options.tpu_name or (options.trainer_pod.tpu.default_tpu_name
                             if options.use_tpu else None),
        options.tpu_zone, options.tpu_project,
        on_a_slice=isinstance(options.trainer_pod.tpu,
                              tpu_slices.TPUSliceScheduling))
  except inferrer_steps.InferrerCompileError as e:
    raise CompileError(str(e)) from e
  tpu_steps = TPUSteps(
      trainer_ids=tuple(t.id for t in trainers),
      env=runtime.env if runtime else {},
      image=trainer_image(options, runtime),
      inferrer_ids=tuple(inferrer_configs))
  if isinstance(options.trainer_pod.tpu, tpu_slices.TPUSliceScheduling):
    _check_slice_paths(pipeline, custom_configs)
    options, tpu_steps = _slice_driver(options, tpu_steps)
  if options.tpu_check:
    tpu_steps.check_id = _add_tpu_check(pipeline)
  for trainer in trainers:
    trainer.exec_properties[CUSTOM_CONFIG_KEY] = json_utils.dumps(
        custom_configs[trainer.id])
  beam_args = _set_beam_args(pipeline, options, tpu_steps.inferrer_ids)
  try:
    inferrer_steps.check_inferrer_beam_args(
        pipeline, list(tpu_steps.inferrer_ids), options.use_tpu)
  except inferrer_steps.InferrerCompileError as e:
    raise CompileError(str(e)) from e
  output_dir = os.path.dirname(paths[0])
  os.makedirs(output_dir, exist_ok=True)
  staging = tempfile.mkdtemp(dir=output_dir, prefix='.compile-')
  try:
    staged = [os.path.join(staging, os.path.basename(p)) for p in paths]
    if options.runner == KUBEFLOW:
      _compile_v1(options, pipeline, tpu_steps, staged[0])
      describers = (compiled_files.describe_v1_trainer,)
    else:
      _compile_v2(options, vertex_type, pipeline, tpu_steps, staging, staged)
      describers = (compiled_files.describe_kfp_v2_trainer,
                    compiled_files.describe_vertex_trainer)
    summaries, inferrer_summaries = (
        tuple(describe(path, i) for path, describe in zip(staged, describers)
              for i in ids)
        for ids in (tpu_steps.trainer_ids, tpu_steps.inferrer_ids))
    for source, path in zip(staged, paths):
      os.replace(source, path)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return CompileResult(
      paths=paths,
      runner=options.runner,
      pipeline_name=name,
      trainer_ids=tuple(t.id for t in trainers),
      trainer_image=tpu_steps.image or options.image,
      custom_configs=custom_configs,
      beam_pipeline_args=tuple(beam_args),
      trainer_summaries=summaries,
      tpu_runtime=runtime,
      tpu_check_id=tpu_steps.check_id,
      user_code=tuple(_user_code(pipeline)),
      inferrer_ids=tpu_steps.inferrer_ids,
      inferrer_custom_configs=inferrer_configs,
      inferrer_summaries=inferrer_summaries)


# Exec properties that name user code, in the order they are looked for.
_USER_CODE_PROPERTIES = ('module_path', 'module_file', 'preprocessing_fn',
                         'run_fn', 'trainer_fn')


def _user_code(pipeline: tfx.dsl.Pipeline) -> List[str]:
  """`component: value` of each component's user-code exec property."""
  found = []
  for component in pipeline.components:
    for key in _USER_CODE_PROPERTIES:
      value = component.exec_properties.get(key)
      if isinstance(value, str) and value:
        found.append(f'{component.id}: {value}')
        break
  return found


def _copy(pipeline: tfx.dsl.Pipeline) -> tfx.dsl.Pipeline:
  """A deep copy of `pipeline` to compile, the caller's left as it was.

  Executor specs are copied with their own `copy()`: deep-copying one goes
  through `ExecutorClassSpec.__reduce__`, which keeps the executor class
  only (a BeamExecutorSpec would lose its Beam arguments).
  """
  memo = {id(c.executor_spec): c.executor_spec.copy()
          for c in pipeline.components
          if getattr(c, 'executor_spec', None) is not None}
  return copy.deepcopy(pipeline, memo)


@dataclasses.dataclass
class TPUSteps:
  """The steps scheduled on the TPU: trainers, inferrers, the check if any."""
  trainer_ids: Tuple[str, ...]
  env: Dict[str, str]  # The TPU runtime's (runtimes.RuntimeChoice.env).
  image: Optional[str]  # The trainer image, `{runtime}` resolved.
  check_id: Optional[str] = None
  inferrer_ids: Tuple[str, ...] = ()

  @property
  def ids(self) -> List[str]:
    return (list(self.trainer_ids) + list(self.inferrer_ids) +
            ([self.check_id] if self.check_id else []))


def _check_slice_paths(pipeline: tfx.dsl.Pipeline,
                       custom_configs: Mapping[str, Mapping[str, Any]]) -> None:
  """The slice's workers read the examples and write the checkpoints.

  Raises:
    CompileError: the pipeline root (where the examples and the default
      checkpoints are) or a `checkpoint_dir` is a local path.
  """
  paths = [('the pipeline root (examples, model_run, checkpoints)',
            pipeline.pipeline_info.pipeline_root)]
  paths += [(f'TPUTrainer {i!r} custom_config[\'checkpoint_dir\']',
             c.get('checkpoint_dir')) for i, c in custom_configs.items()]
  for what, path in paths:
    if isinstance(path, str) and tpu_slice_lib.is_local_path(path):
      raise CompileError(
          f'{what} {path!r} is a local path, but the worker pods of a '
          'multi-host slice read the examples and write the checkpoints on '
          'their own hosts ("File system scheme \'[local]\' not implemented", '
          'tensorflow/tensorflow#32651): use storage every host reaches '
          '(gs://...).')


def _slice_driver(options: KubeflowOptions, tpu_steps: 'TPUSteps'
                 ) -> Tuple[KubeflowOptions, 'TPUSteps']:
  """A multi-host slice: the trainer step drives it from a CPU pod.

  The worker pods get the TPU image, runtime environment, selectors and
  tolerations (tpu/worker_group.py); the driver gets the pipeline image,
  no TPU and no placement, and the group's spec in its environment.
  """
  pod = options.trainer_pod
  spec = pod.tpu.worker_group_spec(
      image=tpu_steps.image or options.image, env=tpu_steps.env,
      node_selector=pod.node_selector, tolerations=pod.tolerations,
      driver_wait_secs=COMPILED_WORKER_WAIT_SECS)
  driver_pod = dataclasses.replace(pod, node_selector=(), tolerations=())
  # GKE may have to create the slice's nodes first: the driver waits for
  # the worker pods longer than by default.
  driver_steps = dataclasses.replace(
      tpu_steps, image=None,
      env={worker_group.SPEC_ENV: spec.to_json(),
           tpu_slice_lib.WAIT_SECS_ENV: str(COMPILED_WORKER_WAIT_SECS)})
  return dataclasses.replace(options, trainer_pod=driver_pod), driver_steps


def _add_tpu_check(pipeline: tfx.dsl.Pipeline) -> str:
  """Adds the TPUCheck step upstream of every component; returns its id.

  Raises:
    CompileError: the pipeline has a component of that id already.
  """
  taken = [c.id for c in pipeline.components
           if c.id == tpu_check_step.COMPONENT_ID]
  if taken:
    raise CompileError(
        f'{{option}}: pipeline {pipeline.pipeline_info.pipeline_name!r} has a '
        f'component {tpu_check_step.COMPONENT_ID!r} already; rename it, or '
        'compile without {option}.', option='tpu_check')
  return tpu_check_step.add_first(pipeline).id


def _trainer_steps(trainer: Any
                  ) -> Optional[Tuple[Optional[int], Optional[int]]]:
  """A trainer's train and eval steps (None: a runtime parameter)."""
  steps = []
  for key, proto in ((standard_component_specs.TRAIN_ARGS_KEY,
                      trainer_pb2.TrainArgs()),
                     (standard_component_specs.EVAL_ARGS_KEY,
                      trainer_pb2.EvalArgs())):
    value = trainer.exec_properties.get(key)
    if not isinstance(value, str):
      return None
    steps.append(proto_utils.json_to_proto(value, proto).num_steps or None)
  return steps[0], steps[1]


def _custom_config(trainer: Any) -> Dict[str, Any]:
  return inferrer_steps.compiled_custom_config(trainer, 'TPUTrainer',
                                               CompileError)


def _set_beam_args(pipeline: tfx.dsl.Pipeline, options: KubeflowOptions,
                   inferrer_ids: Sequence[str] = ()) -> List[Any]:
  """Sets every Beam component's arguments; returns the pipeline's.

  The inferrers run on the trainer's pod, often a TPU host of hundreds of
  vCPUs: their DirectRunner gets a bounded number of worker processes
  (`inferrer_steps.beam_defaults`), not one per vCPU.
  """
  pipeline_args = _on_cluster(beam_pipeline_args(
      options.beam_args, pipeline.beam_pipeline_args,
      options.cluster_beam_defaults), pipeline, options)
  inferrer_defaults = inferrer_steps.beam_defaults(
      options.trainer_pod.cpu_request)
  for component in pipeline.components:
    spec = component.executor_spec
    if isinstance(spec, executor_spec.BeamExecutorSpec):
      spec.beam_pipeline_args = _on_cluster(beam_pipeline_args(
          options.beam_args, spec.beam_pipeline_args,
          options.cluster_beam_defaults,
          inferrer_defaults if component.id in inferrer_ids
          else CLUSTER_BEAM_PIPELINE_ARGS), pipeline, options)
  return pipeline_args


def _on_cluster(args: List[Any], pipeline: tfx.dsl.Pipeline,
                options: KubeflowOptions) -> List[Any]:
  """`args` checked for the cluster, with a portable runner's workers' image."""
  try:
    beam_runners.check(args, pipeline_root=pipeline.pipeline_info.pipeline_root)
    return args + beam_runners.cluster_defaults(args, options.image)
  except beam_args_lib.BeamArgError as e:
    raise CompileError(str(e)) from e


@contextlib.contextmanager
def _packaging_output_logged() -> Iterator[None]:
  """What the runner's subprocesses print goes to the log, not the caller's.

  TFX packages each module file with `setup.py bdist_wheel` in a
  subprocess whose output (about 100 lines a module) would land on the
  terminal of whoever compiles from Python. It is logged at INFO instead,
  and written to stderr when the compile fails, for the reason.
  """
  sys.stdout.flush()
  sys.stderr.flush()
  saved = os.dup(1), os.dup(2)
  with tempfile.TemporaryFile() as capture:
    os.dup2(capture.fileno(), 1)
    os.dup2(capture.fileno(), 2)
    failed = True
    try:
      yield
      failed = False
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      for descriptor, original in zip((1, 2), saved):
        os.dup2(original, descriptor)
        os.close(original)
      capture.seek(0)
      text = capture.read().decode('utf-8', errors='replace')
      if failed:
        sys.stderr.write(text)
        sys.stderr.flush()
      elif text.strip():
        logging.info('While compiling, TFX and its packaging of module files '
                     'printed:\n%s', text)


def _compile_v1(options: KubeflowOptions, pipeline: tfx.dsl.Pipeline,
                tpu_steps: TPUSteps, output_file: str) -> None:
  """KubeflowDagRunner with TFX's default operator functions kept."""
  trainer_ops = [scheduling.trainer_step_op(i, options.trainer_pod,
                                            tpu_steps.image, tpu_steps.env)
                 for i in tpu_steps.trainer_ids]
  step_ops = list(trainer_ops) + [
      scheduling.tpu_step_op(i, options.trainer_pod, tpu_steps.image,
                             tpu_steps.env)
      for i in tpu_steps.ids if i not in tpu_steps.trainer_ids]
  funcs = scheduling.pipeline_operator_funcs(
      trainer_ops[0], use_gcp_sa=options.use_gcp_sa,
      env=dict(options.step_env)) + step_ops[1:]
  config = kubeflow_dag_runner.KubeflowDagRunnerConfig(
      pipeline_operator_funcs=funcs,
      tfx_image=options.image,
      kubeflow_metadata_config=(
          kubeflow_dag_runner.get_default_kubeflow_metadata_config()))
  with _packaging_output_logged():
    kubeflow_dag_runner.KubeflowDagRunner(
        output_dir=os.path.dirname(output_file),
        output_filename=os.path.basename(output_file),
        config=config).run(pipeline)
  for op in step_ops:
    if len(op.applied_to) != 1:
      raise CompileError(
          f'Expected one step for component {op.component_id!r}, found '
          f'{op.applied_to}.')
    logging.info('Step %s carries the trainer pod options.',
                 op.applied_to[0])


def _compile_v2(options: KubeflowOptions, vertex_type: Optional[str],
                pipeline: tfx.dsl.Pipeline, tpu_steps: TPUSteps,
                staging: str, staged: Sequence[str]) -> None:
  """PipelineJob from the runner; the KFP v2 spec and Vertex job from it."""
  default_image = options.image
  if tpu_steps.image:
    default_image = {pipeline_builder.DEFAULT_IMAGE_PATH_KEY: options.image}
    default_image.update({i: tpu_steps.image for i in tpu_steps.ids})
  # Schema 2.1.0: the only one a KFP v2 backend accepts on upload (its API
  # server refuses 2.0.0, TFX's default); Vertex AI takes it too.
  config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
      default_image=default_image, use_pipeline_spec_2_1=True)
  runner_output = 'runner-pipeline-job.json'
  with _packaging_output_logged():
    kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=config, output_dir=staging,
        output_filename=runner_output).run(pipeline)
  with open(os.path.join(staging, runner_output)) as f:
    job = json.load(f)
  trainer_executors = [
      compiled_files.trainer_executor_label(job['pipelineSpec'], i)
      for i in tpu_steps.trainer_ids]
  for executor in trainer_executors:
    _start_with_system_metrics(job['pipelineSpec'], executor)
  _start_through_v2_step(job['pipelineSpec'], trainer_executors)
  for trainer_id in tpu_steps.trainer_ids:
    v2_metrics.declare_as_kfp_does(
        compiled_files.component_of(job['pipelineSpec'], trainer_id))
  # The TPU steps: the trainers, and the check if any.
  executors = [compiled_files.trainer_executor_label(job['pipelineSpec'], i)
               for i in tpu_steps.ids]
  # Beam args on the components that run Beam only, as v1 has them.
  pipeline_beam_args = list(pipeline.beam_pipeline_args)
  if all(isinstance(a, str) for a in pipeline_beam_args):
    beam_args_lib.strip_from_other_executors(
        job['pipelineSpec'],
        beam_args_lib.beam_component_ids(pipeline.components),
        pipeline_beam_args)
  if options.step_env:
    for step_container in compiled_files.containers(job['pipelineSpec']):
      step_container['env'] = [{'name': k, 'value': v}
                               for k, v in options.step_env]
  for executor in executors:  # The TPU runtime's environment.
    step_container = compiled_files.container(job['pipelineSpec'], executor)
    step_container['env'] = step_container.get('env', []) + [
        {'name': k, 'value': v} for k, v in tpu_steps.env.items()]

  pod = options.trainer_pod
  kfp_spec = json.loads(json.dumps(job['pipelineSpec']))
  kfp_spec['defaultPipelineRoot'] = pipeline.pipeline_info.pipeline_root
  resources = pod.kfp_v2_resources()
  executor_config = pod.kubernetes_executor_config()
  for executor in executors:
    if resources:
      compiled_files.container(kfp_spec, executor)['resources'] = dict(
          resources)
  documents = [kfp_spec]
  if executor_config:
    documents.append({'platforms': {KUBERNETES_PLATFORM: {
        'deploymentSpec': {'executors': {
            executor: executor_config for executor in executors}}}}})
  # Strict round trips through the real protobufs: nothing unknown is written.
  kfp_v2_protos.parse(documents[0], kfp_v2_protos.PIPELINE_SPEC)
  if executor_config:
    kfp_v2_protos.parse(documents[1], kfp_v2_protos.PLATFORM_SPEC)
    kfp_v2_protos.parse(executor_config,
                        kfp_v2_protos.KUBERNETES_EXECUTOR_CONFIG)
  with open(staged[0], 'w') as f:
    yaml.safe_dump_all(documents, f, sort_keys=False)
  if not options.vertex_job:
    return

  vertex_resources = pod.vertex_resources(vertex_type)
  for executor in executors:
    if vertex_resources:
      compiled_files.container(job['pipelineSpec'], executor)['resources'] = (
          dict(vertex_resources))
  _parse_vertex_job(job)
  with open(staged[1], 'w') as f:
    json.dump(job, f, indent=2, sort_keys=True)


def _start_with_system_metrics(spec: Dict[str, Any], executor: str) -> None:
  """A trainer's system.Metrics output needs the `system` module at start."""
  container = compiled_files.container(spec, executor)
  command = v2_step.step_command(container['command'],
                                 v2_metrics_step.TRAINER_STEP_ENTRYPOINT)
  if command is None:
    raise CompileError(
        f'The v2 trainer step runs {container["command"]}, not TFX\'s '
        f'{v2_step.KFP_V2_ENTRYPOINT}; its system.Metrics output could not '
        'be read back.')
  container['command'] = command


def _start_through_v2_step(spec: Dict[str, Any],
                           done: Sequence[str]) -> None:
  """Every other step that runs TFX's v2 entrypoint runs v2_step instead: it
  types the inputs a KFP v2 backend hands over untyped (tensorflow/tfx#7768).

  Args:
    spec: the PipelineSpec (JSON), changed in place.
    done: executor labels already started otherwise (the trainers).
  """
  for label, executor in spec['deploymentSpec']['executors'].items():
    if label in done or 'container' not in executor:
      continue
    command = v2_step.step_command(executor['container'].get('command', []))
    if command is not None:
      executor['container']['command'] = command


def _parse_vertex_job(job: Dict[str, Any]) -> None:
  """The Vertex AI PipelineJob must parse as kfp-pipeline-spec's PipelineJob."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from kfp.pipeline_spec import pipeline_spec_pb2  # pylint: disable=g-import-not-at-top
  json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob())
