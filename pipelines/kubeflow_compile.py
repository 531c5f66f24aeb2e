"""Compiles the taxi pipeline for Kubeflow Pipelines, offline.

Two targets, one factory (`taxi_pipeline.create_pipeline`):

* `kubeflow`: `KubeflowDagRunner` (kfp 1.8) writes an Argo workflow package.
  Every step keeps TFX's default operator functions (the
  `metadata-grpc-configmap` env, optionally the `user-gcp-sa` secret) and the
  Kubeflow metadata config; the trainer step alone gets the TPU resources,
  node selectors, tolerations (or the TPU-node annotation), an optional
  trainer image, and the `mlpipeline-metrics` output.
* `kubeflow_v2`: `KubeflowV2DagRunner` writes pipeline-spec JSON; the
  trainer's accelerator is set with `with_platform_config`.

Compiling touches neither the network nor the pipeline root: TFX would
package each `module_file` as a wheel under `<pipeline_root>/_wheels` (a GCS
write for a `gs://` root); with `UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES` set
while the components are built it keeps the path as given instead, so module
files are named by their path inside the image (`/tfx-tpu-trainer/components`,
see the Dockerfile). The variable is set for the compile only.
"""

import contextlib
import dataclasses
import os
import posixpath
import re
import shutil
import tempfile
from typing import Any, Dict, Iterator, List, Optional

from absl import logging
from tfx import v1 as tfx
from tfx.orchestration.kubeflow import kubeflow_dag_runner
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.orchestration.kubeflow.v2 import pipeline_builder

from pipelines import taxi_pipeline
from tfx_tpu_trainer import TPUTrainer
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.kubeflow import options as kubeflow_options
from tfx_tpu_trainer.kubeflow import scheduling as kubeflow

RUNNERS = kubeflow_options.RUNNERS
DEFAULT_IMAGE = kubeflow_options.DEFAULT_IMAGE
# Where the Dockerfile puts this repository inside the image.
IMAGE_REPO_ROOT = '/tfx-tpu-trainer'
IMAGE_COMPONENTS_DIR = posixpath.join(IMAGE_REPO_ROOT, 'components')
IMAGE_PREPROCESSING_MODULE_FILE = posixpath.join(IMAGE_COMPONENTS_DIR,
                                                 'taxi_preprocessing.py')
IMAGE_TRAINER_MODULE_FILE = posixpath.join(IMAGE_COMPONENTS_DIR,
                                           'taxi_tpu_module.py')
NO_PACKAGING_ENV = 'UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES'
# Beam's DirectRunner over the pod's cores.
CLUSTER_BEAM_PIPELINE_ARGS = ('--direct_running_mode=multi_processing',
                              '--direct_num_workers=0')
OUTPUT_EXTENSIONS = {
    'kubeflow': ('.tar.gz', '.tgz', '.zip', '.yaml', '.yml'),
    'kubeflow_v2': ('.json', '.yaml', '.yml'),
}
DEFAULT_OUTPUT_EXTENSION = {'kubeflow': '.tar.gz', 'kubeflow_v2': '.json'}
# What KubeflowV2DagRunner accepts as a pipeline name (pipeline_builder.py).
V2_PIPELINE_NAME = re.compile(r'^[a-z0-9][a-z0-9-]{0,127}$')


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
  v2_accelerator_type: Optional[str] = None
  train_steps: int = 1000
  eval_steps: int = 50
  train_batch_size: int = 64
  eval_batch_size: int = 64
  use_gcp_sa: bool = False
  preprocessing_module_file: str = IMAGE_PREPROCESSING_MODULE_FILE
  trainer_module_file: str = IMAGE_TRAINER_MODULE_FILE
  beam_pipeline_args: List[str] = dataclasses.field(
      default_factory=lambda: list(CLUSTER_BEAM_PIPELINE_ARGS))


@dataclasses.dataclass(frozen=True)
class CompileResult:
  """What a compile wrote."""
  path: str
  runner: str
  trainer_id: str
  trainer_image: str
  custom_config: Dict[str, Any]


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


def pipeline_options(options: CompileOptions
                    ) -> taxi_pipeline.TaxiPipelineOptions:
  """The factory's options; no metadata config (the runner brings it)."""
  serving_model_dir = options.serving_model_dir or _join(
      options.pipeline_root, 'serving_model')
  return taxi_pipeline.TaxiPipelineOptions(
      pipeline_root=options.pipeline_root,
      data_root=options.data_root,
      serving_model_dir=serving_model_dir,
      preprocessing_module_file=options.preprocessing_module_file,
      trainer_module_file=options.trainer_module_file,
      train_steps=options.train_steps,
      eval_steps=options.eval_steps,
      custom_config=trainer_custom_config(options),
      pipeline_name=pipeline_name(options),
      metadata_connection_config=None,
      beam_pipeline_args=list(options.beam_pipeline_args))


def default_output_file(runner: str, pipeline_name: str) -> str:
  return pipeline_name + DEFAULT_OUTPUT_EXTENSION[runner]


def compile_pipeline(options: CompileOptions) -> CompileResult:
  """Builds the pipeline and compiles it to `options.output_path`.

  The file appears whole or not at all: the runner writes into a temporary
  directory beside it, and the result is moved into place.

  Args:
    options: the compile options (checked by the caller).

  Returns:
    What was written.

  Raises:
    ValueError: for an unknown runner, a missing TPU request, or a pipeline
      without exactly one TPUTrainer.
    RuntimeError: when the trainer step was not found while compiling.
  """
  if options.runner not in RUNNERS:
    raise ValueError(f'runner must be one of {RUNNERS}, got {options.runner!r}')
  if options.use_tpu and options.tpu is None:
    raise ValueError('use_tpu needs a TPU request (options.tpu).')
  output_path = os.path.abspath(options.output_path)
  output_dir = os.path.dirname(output_path)
  os.makedirs(output_dir, exist_ok=True)
  staging = tempfile.mkdtemp(dir=output_dir, prefix='.compile-')
  try:
    with user_modules_not_packaged():
      factory_options = pipeline_options(options)
      pipeline = taxi_pipeline.create_pipeline(factory_options)
      trainer = _trainer(pipeline)
      if options.runner == 'kubeflow':
        _compile_v1(options, pipeline, trainer, staging,
                    os.path.basename(output_path))
      else:
        _compile_v2(options, pipeline, trainer, staging,
                    os.path.basename(output_path))
    os.replace(os.path.join(staging, os.path.basename(output_path)),
               output_path)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return CompileResult(
      path=output_path,
      runner=options.runner,
      trainer_id=trainer.id,
      trainer_image=options.trainer_image or options.image,
      custom_config=factory_options.custom_config)


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


def _compile_v1(options: CompileOptions, pipeline: tfx.dsl.Pipeline,
                trainer: TPUTrainer, output_dir: str,
                output_filename: str) -> None:
  trainer_op = kubeflow.trainer_step_op(
      trainer.id, options.tpu if options.use_tpu else None,
      options.trainer_image)
  config = kubeflow_dag_runner.KubeflowDagRunnerConfig(
      pipeline_operator_funcs=kubeflow.pipeline_operator_funcs(
          trainer_op, use_gcp_sa=options.use_gcp_sa),
      tfx_image=options.image,
      kubeflow_metadata_config=(
          kubeflow_dag_runner.get_default_kubeflow_metadata_config()))
  kubeflow_dag_runner.KubeflowDagRunner(
      output_dir=output_dir, output_filename=output_filename,
      config=config).run(pipeline)
  if len(trainer_op.applied_to) != 1:
    raise RuntimeError(
        f'Expected one step for component {trainer.id!r}, found '
        f'{trainer_op.applied_to}.')
  logging.info('Trainer step %s carries the TPU request.',
               trainer_op.applied_to[0])


def _compile_v2(options: CompileOptions, pipeline: tfx.dsl.Pipeline,
                trainer: TPUTrainer, output_dir: str,
                output_filename: str) -> None:
  if options.use_tpu:
    trainer.with_platform_config(
        options.tpu.platform_config(options.v2_accelerator_type))
  default_image = options.image
  if options.trainer_image:
    default_image = {pipeline_builder.DEFAULT_IMAGE_PATH_KEY: options.image,
                     trainer.id: options.trainer_image}
  config = kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(
      default_image=default_image)
  kubeflow_v2_dag_runner.KubeflowV2DagRunner(
      config=config, output_dir=output_dir,
      output_filename=output_filename).run(pipeline)


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
