"""Compiles the taxi pipeline for Kubeflow Pipelines, offline."""

import dataclasses
import posixpath
from typing import Any, Dict, Optional, Tuple

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer_cli import paths

# The bundled pipeline: package data, loaded by path.
taxi_pipeline = paths.taxi_pipeline()

# Where the Dockerfile puts this repository inside the image.
IMAGE_REPO_ROOT = '/tfx-tpu-trainer'
IMAGE_COMPONENTS_DIR = posixpath.join(IMAGE_REPO_ROOT, 'components')
IMAGE_TRAINER_MODULE_FILE = posixpath.join(IMAGE_COMPONENTS_DIR,
                                           'taxi_tpu_module.py')
# Transform's preprocessing_fn by import path, importable through
# STEP_ENV's PYTHONPATH in every process of every step.
PREPROCESSING_FN = 'taxi_preprocessing.preprocessing_fn'
STEP_ENV = {'PYTHONPATH': IMAGE_COMPONENTS_DIR}


@dataclasses.dataclass(frozen=True)
class CompileOptions:
  """What a compile varies; `tpu` is a validated `scheduling.tpu_vm()` or
  `scheduling.tpu_node()` request, required when `use_tpu`."""
  pipeline_root: str
  data_root: str
  output_path: str
  runner: str = 'kubeflow'
  image: str = compiler.DEFAULT_IMAGE
  trainer_image: Optional[str] = None
  serving_model_dir: Optional[str] = None
  pipeline_name: Optional[str] = None  # default_pipeline_name(runner)
  use_tpu: bool = True
  tpu: Optional[scheduling.TPUScheduling] = None
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  tpu_project: Optional[str] = None
  vertex_accelerator_type: Optional[str] = None  # refused with a TPU
  trainer_node_selector: Tuple[Tuple[str, str], ...] = ()
  trainer_tolerations: Tuple[scheduling.Toleration, ...] = ()
  trainer_cpu: Optional[str] = None
  trainer_memory: Optional[str] = None
  train_steps: int = 1000
  eval_steps: int = 50
  train_batch_size: int = 64
  eval_batch_size: int = 64
  use_gcp_sa: bool = False
  preprocessing_fn: str = PREPROCESSING_FN
  trainer_module_file: str = IMAGE_TRAINER_MODULE_FILE
  # Added after the cluster's (beam/pipeline_args.py, CLUSTER_DEFAULTS).
  beam_args: Tuple[str, ...] = ()
  # Folders in the image added to every step's PYTHONPATH (after
  # IMAGE_COMPONENTS_DIR), e.g. that of another preprocessing module.
  python_path: Tuple[str, ...] = ()
  # TPU runtime (tpu/runtimes.py): se or pjrt; None: the generation's default.
  tpu_runtime: Optional[str] = None
  # A TPUCheck step before every other, scheduled like the trainer.
  tpu_check: bool = False
  # kubeflow_v2: write the Vertex AI job beside the KFP v2 spec.
  vertex_job: bool = True
  # A TPUBulkInferrer step scoring the eval split, scheduled like the trainer.
  bulk_infer: bool = False
  # What the Evaluator reads (evaluator_keys.py finds them for other modules).
  eval_label_key: str = taxi_pipeline.LABEL_KEY
  eval_prediction_key: Optional[str] = taxi_pipeline.PREDICTION_KEY
  eval_preprocessing_function_names: Tuple[str, ...] = ()

  @property
  def trainer_pod(self) -> scheduling.TrainerPod:
    return scheduling.TrainerPod(
        tpu=self.tpu if self.use_tpu else None,
        node_selector=tuple(self.trainer_node_selector),
        tolerations=tuple(self.trainer_tolerations),
        cpu_request=self.trainer_cpu, memory_request=self.trainer_memory)


def default_pipeline_name(runner: str) -> str:
  """`taxi_tpu`; `taxi-tpu` for v2 (names as compiler.V2_PIPELINE_NAME)."""
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
      preprocessing_fn=options.preprocessing_fn,
      trainer_module_file=options.trainer_module_file,
      train_steps=options.train_steps,
      eval_steps=options.eval_steps,
      custom_config=trainer_custom_config(options),
      pipeline_name=pipeline_name(options),
      eval_label_key=options.eval_label_key,
      eval_prediction_key=options.eval_prediction_key,
      eval_preprocessing_function_names=(
          options.eval_preprocessing_function_names),
      metadata_connection_config=None,
      bulk_infer=options.bulk_infer,
      # The library's compile adds the cluster's Beam arguments.
      beam_pipeline_args=[])


def vertex_accelerator_type(options: CompileOptions) -> Optional[str]:
  """Vertex AI's accelerator for the trainer: None; a TPU is refused."""
  return compiler.vertex_accelerator_type(kubeflow_options(options))


def step_env(options: CompileOptions) -> Dict[str, str]:
  """STEP_ENV, with `options.python_path` added to its PYTHONPATH."""
  env = dict(STEP_ENV)
  extra = [p for p in options.python_path if p != IMAGE_COMPONENTS_DIR]
  if extra:
    env['PYTHONPATH'] = ':'.join([env['PYTHONPATH']] + extra)
  return env


def kubeflow_options(options: CompileOptions) -> compiler.KubeflowOptions:
  """The library's compile options for the taxi pipeline."""
  return compiler.KubeflowOptions(
      runner=options.runner,
      image=options.image,
      trainer_image=options.trainer_image,
      trainer_pod=options.trainer_pod,
      tpu_name=options.tpu_name,
      tpu_zone=options.tpu_zone,
      tpu_project=options.tpu_project,
      vertex_accelerator_type=(options.vertex_accelerator_type
                               if options.use_tpu else None),
      beam_args=tuple(options.beam_args),
      step_env=tuple(step_env(options).items()),
      use_gcp_sa=options.use_gcp_sa,
      tpu_runtime=options.tpu_runtime if options.use_tpu else None,
      tpu_check=options.tpu_check,
      vertex_job=options.vertex_job)


def compile_pipeline(options: CompileOptions) -> compiler.CompileResult:
  """Builds the taxi pipeline and compiles it to `options.output_path`.

  The library's `compiler.compile_pipeline` does the compile (the same path
  as a user's pipeline); the module files are named by their path inside the
  image (built inside `compiler.user_modules_not_packaged()`).

  Args:
    options: the compile options (checked by the caller).

  Returns:
    What was written, read back from the files.

  Raises:
    ValueError: for an unknown runner, a missing TPU request, a TPU-node
      request for kubeflow_v2, a TPU runtime the generation lacks, a Vertex
      job with a TPU.
  """
  if options.use_tpu and options.tpu is None:
    raise ValueError('use_tpu needs a TPU request (options.tpu).')
  cluster = kubeflow_options(options)
  compiler.check_options(cluster, pipeline_name(options))
  with compiler.user_modules_not_packaged():
    pipeline = taxi_pipeline.create_pipeline(pipeline_options(options))
  return compiler.compile_pipeline(pipeline, options.output_path, cluster)


def _join(root: str, name: str) -> str:
  # posixpath: pipeline roots are URIs (gs://...) or paths in the image.
  return posixpath.join(root, name)
