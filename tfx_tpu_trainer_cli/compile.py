"""`tfx-tpu-trainer compile`: a pipeline for Kubeflow Pipelines."""

import contextlib
import os
import posixpath
import re
import sys
import tempfile
import time
from typing import List, Optional, Sequence

from tfx_tpu_trainer.kubeflow import beam_args as beam_args_lib
from tfx_tpu_trainer.kubeflow import options as compile_options
from tfx_tpu_trainer.kubeflow import pod_requests
from tfx_tpu_trainer.tpu import runtimes
from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import paths

_URI = re.compile(r'^[a-z][a-z0-9+.-]*://\S+$')
# Options of the bundled pipeline only (a user's pipeline sets its own):
# flag -> (attribute, default).
_BUNDLED_ONLY = {
    '--pipeline-root': ('pipeline_root', None),
    '--data-root': ('data_root', None),
    '--serving-model-dir': ('serving_model_dir', None),
    '--pipeline-name': ('pipeline_name', None),
    '--module-file': ('module_file', None),
    '--model': ('model', None),
    '--preprocessing-module-file': ('preprocessing_module_file', None),
    '--eval-label-key': ('eval_label_key', None),
    '--eval-prediction-key': ('eval_prediction_key', None),
    '--train-steps': ('train_steps', 1000),
    '--eval-steps': ('eval_steps', 50),
    '--train-batch-size': ('train_batch_size', 64),
    '--eval-batch-size': ('eval_batch_size', 64),
    '--bulk-infer': ('bulk_infer', False),
}
# Options that only one TPU style reads.
_TPU_VM_FLAGS = (('accelerator', '--accelerator'), ('topology', '--topology'),
                 ('chips', '--chips'), ('tpu_runtime', '--tpu-runtime'))
_TPU_NODE_FLAGS = (('tpu_node_version', '--tpu-node-version'),
                   ('tpu_cores', '--tpu-cores'), ('tf_version', '--tf-version'))


def add_parser(subparsers) -> None:
  """Defines `tfx-tpu-trainer compile`."""
  parser = subparsers.add_parser(
      'compile', help='Compile the taxi pipeline, or yours, for Kubeflow '
      'Pipelines.',
      description=(
          'Compiles the taxi pipeline, or yours (--pipeline FILE:FUNCTION), '
          'for Kubeflow Pipelines on GKE or Vertex AI, with TPU scheduling on '
          'the TPUTrainer steps only. The taxi compile needs no cluster and '
          'no network; its module files are named by their path inside the '
          'image (/tfx-tpu-trainer/components, see the Dockerfile).'))
  parser.add_argument(
      '--pipeline', default=None, metavar='FILE:FUNCTION',
      help='Your pipeline instead of the taxi one: FUNCTION in FILE takes no '
      'required arguments and returns a tfx.dsl.Pipeline with a TPUTrainer. '
      'Its module files are packaged by TFX as wheels under '
      '<pipeline_root>/_wheels while compiling (the pipeline root must be '
      'reachable from here), unless --module-files-in-image. The options of '
      'the taxi pipeline (--pipeline-root, --data-root, --train-steps ...) '
      'do not apply.')
  parser.add_argument(
      '--module-files-in-image', action='store_true',
      help='With --pipeline: keep module_file paths as the pipeline gives '
      'them, for module files baked into the image at those paths (TFX\'s '
      'UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES); nothing is written under '
      'the pipeline root.')
  parser.add_argument(
      '--runner', choices=compile_options.RUNNERS, default='kubeflow',
      help='kubeflow: KubeflowDagRunner (kfp 1.8), an Argo workflow package '
      'for KFP v1; kubeflow_v2: KubeflowV2DagRunner, two files: '
      '<name>.kfp-v2-pipeline.yaml (pipeline spec + Kubernetes platform spec, '
      'to upload to a KFP v2 backend) and <name>.vertex-pipeline-job.json '
      '(a PipelineJob for Vertex AI Pipelines) (default: kubeflow).')
  parser.add_argument('--output-dir', default='.',
                      help='Where the file goes (default: .).')
  parser.add_argument(
      '--output-file', default=None,
      help='File name: .tar.gz, .tgz, .zip, .yaml or .yml for kubeflow; for '
      'kubeflow_v2 the KFP v2 pipeline spec, .yaml or .yml, beside which the '
      'Vertex job goes as <stem>.vertex-pipeline-job.json (default: '
      '<pipeline name>.tar.gz, <pipeline name>.kfp-v2-pipeline.yaml).')
  parser.add_argument(
      '--image', default=compile_options.DEFAULT_IMAGE,
      help='Image of every step: the Dockerfile\'s, pushed to a registry '
      f'(default: the placeholder {compile_options.DEFAULT_IMAGE}).')
  parser.add_argument('--trainer-image', default=None,
                      help='Image of the trainer step only, e.g. one with the '
                      'TPU runtime (default: --image). {runtime} in it '
                      'becomes the TPU runtime chosen for --accelerator (se '
                      'or pjrt), e.g. gcr.io/P/tfx-tpu-trainer-tpu-{runtime}:1 '
                      'picks the Dockerfile target\'s image per generation.')
  parser.add_argument('--pipeline-root', default=None,
                      help='Pipeline root in the cluster, e.g. '
                      'gs://BUCKET/tfx/taxi_tpu (required without '
                      '--pipeline).')
  parser.add_argument('--data-root', default=None,
                      help='Directory of the taxi CSV with a big_tipper '
                      'column, as the cluster sees it, e.g. gs://... '
                      '(required without --pipeline).')
  trainer = parser.add_mutually_exclusive_group()
  trainer.add_argument(
      '--module-file', default=None,
      help='The taxi pipeline\'s trainer module, as a path inside the image '
      '(bake it in: FROM the project\'s image, COPY; default: the '
      '--model\'s, in /tfx-tpu-trainer/components/).')
  trainer.add_argument(
      '--model', default=None, choices=sorted(paths.MODEL_MODULE_FILES),
      help='A bundled taxi model, from the image: wide_and_deep '
      '(taxi_tpu_module.py, the default), keras (taxi_keras_module.py) or '
      'embeddings (taxi_embedding_module.py: TPU embedding tables).')
  parser.add_argument(
      '--preprocessing-module-file', default=None,
      help='The taxi pipeline\'s Transform module, as a path inside the '
      'image; Transform imports its preprocessing_fn by module name, with '
      'the file\'s folder on every step\'s PYTHONPATH (default: '
      '/tfx-tpu-trainer/components/taxi_preprocessing.py).')
  parser.add_argument(
      '--eval-label-key', default=None,
      help='The label the Evaluator reads, a transformed feature (default: '
      'as `run` finds it from the module files, which must then be files on '
      'this machine at the paths given; the bundled modules keep the raw '
      'big_tipper label).')
  parser.add_argument(
      '--eval-prediction-key', default=None,
      help='The output of the model\'s serving_default signature the '
      'Evaluator reads (default: as `run` finds it from the module files).')
  parser.add_argument('--serving-model-dir', default=None,
                      help='Where Pusher pushes (default: '
                      '<pipeline root>/serving_model).')
  parser.add_argument('--pipeline-name', default=None,
                      help='Default: taxi_tpu (kubeflow), taxi-tpu '
                      '(kubeflow_v2).')
  tpu = parser.add_mutually_exclusive_group()
  tpu.add_argument('--use-tpu', dest='use_tpu', action='store_true',
                   default=True,
                   help='Train on a TPU and schedule the trainer step on one '
                   '(the default).')
  tpu.add_argument('--no-use-tpu', dest='use_tpu', action='store_false',
                   help='Train on CPU; no TPU on any step.')
  parser.add_argument(
      '--tpu-style', choices=compile_options.TPU_STYLES, default='tpu-vm',
      help='tpu-vm: google.com/tpu limit and gke-tpu-accelerator/topology '
      'node selectors; tpu-node: RETIRED on GKE (end of life 2025-04-25), '
      'the Cloud TPU node annotation and cloud-tpus.google.com/<version> '
      'limit, kubeflow runner only, with a warning (default: tpu-vm).')
  parser.add_argument('--accelerator', default=None,
                      help='tpu-vm: GKE TPU accelerator (default: '
                      f'{runtimes.DEFAULT_ACCELERATOR}: '
                      f'{runtimes.DEFAULT_ACCELERATOR_REASON}).')
  parser.add_argument('--topology', default=None,
                      help='tpu-vm: the slice\'s topology: single-host, e.g. '
                      '2x4 or 2x2x1, or a multi-host slice, e.g. 2x2x2 or 4x4 '
                      '(the trainer step then drives a worker pod per host; '
                      'docs/guide/tpu_slices.md, "Multi-host slices") (default: the '
                      'accelerator\'s largest single-host topology).')
  parser.add_argument('--chips', type=common.positive_int, default=None,
                      help='tpu-vm: google.com/tpu limit; must equal the '
                      'topology\'s chip count (the default).')
  _add_tpu_runtime_arguments(parser)
  parser.add_argument('--tpu-node-version', default=None,
                      help='tpu-node: v2, v3, preemptible-v2 or '
                      'preemptible-v3 (default: v3).')
  parser.add_argument('--tpu-cores', type=common.positive_int, default=None,
                      help='tpu-node: TPU cores, 8 or a Pod slice size '
                      '(default: 8).')
  parser.add_argument('--tf-version', default=None,
                      help='tpu-node: tf-version.cloud-tpus.google.com '
                      'annotation (default: the installed TensorFlow).')
  parser.add_argument('--tpu-name', default=None,
                      help='TPU the trainer resolves (default: local for '
                      'tpu-vm; for tpu-node, the TPU_NAME of the pod).')
  parser.add_argument('--tpu-zone', default=None,
                      help='The Cloud TPU\'s zone, with --tpu-name.')
  parser.add_argument('--tpu-project', default=None,
                      help='The Cloud TPU\'s project, with --tpu-name.')
  parser.add_argument(
      '--vertex-accelerator-type', default=None,
      help='kubeflow_v2: the trainer\'s accelerator in the Vertex AI job, a '
      'Vertex AI AcceleratorType name. With a TPU every value is refused: a '
      'Vertex pipeline step takes TPU_V2/TPU_V3, which would disagree with '
      'the GKE TPU VM slice of the KFP v2 spec, and TPU_V4_POD/'
      'TPU_V5_LITEPOD need a machine type and topology a step cannot carry '
      '(use --no-vertex-job; docs/guide/kubeflow.md, "Vertex AI and TPUs").')
  parser.add_argument(
      '--trainer-node-selector', action='append', default=[],
      metavar='KEY=VALUE',
      help='A node label the trainer pod selects, besides the TPU\'s (e.g. '
      'cloud.google.com/gke-spot=true, cloud.google.com/reservation-name=R); '
      'repeatable.')
  parser.add_argument(
      '--trainer-toleration', action='append', default=[],
      metavar='KEY[=VALUE]:EFFECT',
      help='A taint the trainer pod tolerates, besides google.com/tpu (e.g. '
      'cloud.google.com/gke-spot=true:NoSchedule); KEY:EFFECT tolerates any '
      'value; repeatable.')
  parser.add_argument('--trainer-cpu', default=None,
                      help='CPU request of the trainer pod (e.g. 8, 7500m).')
  parser.add_argument('--trainer-memory', default=None,
                      help='Memory request of the trainer pod (e.g. 32Gi).')
  parser.add_argument(
      '--beam-arg', action='append', default=[], metavar='ARG',
      help=beam_args_lib.HELP)
  parser.add_argument('--use-gcp-secret', action='store_true',
                      help='kubeflow: mount the user-gcp-sa secret on every '
                      'step (TFX\'s option).')
  for flag in ('--train-steps', '--eval-steps', '--train-batch-size',
               '--eval-batch-size'):
    parser.add_argument(flag, type=common.positive_int, default=None,
                        help=f'{common.BUNDLED_FLAG_HELP[flag]} (default: '
                        f'{_BUNDLED_ONLY[flag][1]}).')
  parser.add_argument(
      '--bulk-infer', dest='bulk_infer', action='store_const', const=True,
      default=None,
      help='Add a TPUBulkInferrer step that scores the eval split with the '
      'blessed model, scheduled like the trainer (its TPU, image and '
      'runtime; docs/guide/batch_inference.md).')
  parser.set_defaults(handler=_compile)


def _add_tpu_runtime_arguments(parser) -> None:
  """--tpu-runtime, --tpu-check, --no-vertex-job."""
  parser.add_argument(
      '--tpu-runtime', choices=runtimes.RUNTIMES, default=None,
      help='tpu-vm: TensorFlow 2.15\'s TPU runtime on the TPU steps, set '
      'by their environment: se (StreamExecutor) or pjrt (default: the '
      'generation\'s, se on v4, pjrt on v5e and v5p; '
      'docs/guide/tpu_slices.md, "TPU runtimes"). Build the trainer image '
      'with the Dockerfile target tpu-se or tpu-pjrt to match.')
  parser.add_argument(
      '--tpu-check', action='store_true',
      help='Add `tfx-tpu-trainer tpu-check` as the first step, scheduled like '
      'the trainer (image, TPU, runtime), so a TPU that cannot run the '
      'trainer fails the run before the data steps.')
  parser.add_argument(
      '--no-vertex-job', dest='vertex_job', action='store_false',
      help='kubeflow_v2: write the KFP v2 spec alone, no Vertex AI job (a '
      'Vertex AI job cannot schedule the trainer on a GKE TPU VM slice).')


def _bundled_only_options(args) -> None:
  """Refuses the taxi pipeline's options with --pipeline; fills defaults."""
  if args.pipeline:
    given = [flag for flag, (attr, _) in _BUNDLED_ONLY.items()
             if getattr(args, attr) is not None]
    if given:
      raise common.UsageError(
          f'{_flags(given)} {"applies" if len(given) == 1 else "apply"} to '
          'the bundled taxi pipeline only; with --pipeline, your function '
          'sets its pipeline root, data, steps and module files.')
    return
  if args.module_files_in_image:
    raise common.UsageError(
        '--module-files-in-image needs --pipeline (the taxi pipeline\'s '
        'module files are always in the image).')
  missing = [flag for flag in ('--pipeline-root', '--data-root')
             if getattr(args, _BUNDLED_ONLY[flag][0]) is None]
  if missing:
    raise common.UsageError(
        f'the following arguments are required: {", ".join(missing)} (or '
        'compile your own pipeline with --pipeline FILE:FUNCTION).')
  for attr, default in _BUNDLED_ONLY.values():
    if getattr(args, attr) is None:
      setattr(args, attr, default)


def _location(value: str, flag: str) -> str:
  """A URI (gs://...) or an absolute path: what the cluster can resolve."""
  if not (_URI.match(value) or (value.startswith('/') and
                                 not re.search(r'\s', value))):
    raise common.UsageError(
        f'{flag} {value!r} must be a URI (e.g. gs://bucket/path) or an '
        'absolute path as the cluster sees it.')
  return value


def _image(value: Optional[str], flag: str) -> Optional[str]:
  if value is not None and (not value or re.search(r'\s', value)):
    raise common.UsageError(f'{flag} {value!r} is not an image name.')
  return value


def _tpu_style(args) -> Optional[str]:
  """The TPU style the flags ask for, or None with --no-use-tpu.

  Raises:
    common.UsageError: a TPU flag without --use-tpu, or of the other style.
  """
  given = [flag for attr, flag in _TPU_VM_FLAGS + _TPU_NODE_FLAGS
           if getattr(args, attr) is not None]
  if not args.use_tpu:
    given += ['--tpu-name'] if args.tpu_name else []
    if given:
      raise common.UsageError(
          f'{_flags(given)} {"needs" if len(given) == 1 else "need"} '
          '--use-tpu; --no-use-tpu trains on CPU.')
    return None
  other_style = dict(_TPU_NODE_FLAGS if args.tpu_style == 'tpu-vm' else
                     _TPU_VM_FLAGS)
  misplaced = [flag for flag in given if flag in other_style.values()]
  if misplaced:
    raise common.UsageError(
        f'{_flags(misplaced)} {"does" if len(misplaced) == 1 else "do"} not '
        f'apply to --tpu-style {args.tpu_style}.')
  return args.tpu_style


def _check_tpu_request(args) -> None:
  """The TPU request's values, checked before kfp and TFX load."""
  style = _tpu_style(args)
  try:
    if style == 'tpu-vm':
      pod_requests.tpu_request(
          accelerator=args.accelerator or pod_requests.DEFAULT_ACCELERATOR,
          topology=args.topology, chips=args.chips)
    elif style == 'tpu-node':
      pod_requests.tpu_node_request(
          version=(args.tpu_node_version or
                   pod_requests.DEFAULT_TPU_NODE_VERSION),
          cores=args.tpu_cores or pod_requests.DEFAULT_TPU_NODE_CORES,
          tf_version=args.tf_version)
  except pod_requests.TPUSchedulingError as e:
    raise common.UsageError(str(e)) from e


def _tpu_request(args):
  """The validated TPU request, or None with --no-use-tpu."""
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  style = _tpu_style(args)
  if style is None:
    return None
  try:
    if style == 'tpu-vm':
      from tfx_tpu_trainer.kubeflow import tpu_slices  # pylint: disable=g-import-not-at-top
      return tpu_slices.tpu_request(  # Single-host, or a multi-host slice.
          accelerator=args.accelerator or scheduling.DEFAULT_ACCELERATOR,
          topology=args.topology, chips=args.chips)
    return scheduling.tpu_node(
        version=args.tpu_node_version or scheduling.DEFAULT_TPU_NODE_VERSION,
        cores=args.tpu_cores or scheduling.DEFAULT_TPU_NODE_CORES,
        tf_version=args.tf_version)
  except scheduling.TPUSchedulingError as e:
    raise common.UsageError(str(e)) from e


def _flags(flags) -> str:
  return ', '.join(flags)


def _output_path(args, runner: str, pipeline_name: str) -> str:
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  name = args.output_file or compiler.default_output_file(
      runner, pipeline_name)
  extensions = compiler.OUTPUT_EXTENSIONS[runner]
  if not name.endswith(extensions):
    raise common.UsageError(
        f'--output-file {name!r} must end with one of '
        f'{", ".join(extensions)} for --runner {runner}.')
  path = os.path.abspath(os.path.join(args.output_dir, name))
  directory = os.path.dirname(path)
  if os.path.exists(directory) and not os.path.isdir(directory):
    raise common.UsageError(f'--output-dir {directory!r} is not a directory.')
  for output in compiler.output_paths(runner, path, args.vertex_job):
    if os.path.isdir(output):
      raise common.UsageError(f'--output-file: {output!r} is a directory.')
  return path


def _beam_args(values: Sequence[str]) -> List[str]:
  """Each --beam-arg is one `--name=value` (or `--flag`) Beam accepts."""
  try:
    return beam_args_lib.validate(values)
  except beam_args_lib.BeamArgError as e:
    raise common.UsageError(str(e)) from e


def _trainer_pod_options(args):
  """The extra node selectors, tolerations and requests, validated."""
  try:
    node_selector = tuple(pod_requests.parse_node_selector(v)
                          for v in args.trainer_node_selector)
    tolerations = tuple(pod_requests.parse_toleration(v)
                        for v in args.trainer_toleration)
    cpu = (None if args.trainer_cpu is None else
           pod_requests.parse_quantity(args.trainer_cpu, 'trainer-cpu'))
    memory = (None if args.trainer_memory is None else
              pod_requests.parse_quantity(args.trainer_memory,
                                          'trainer-memory'))
  except pod_requests.TPUSchedulingError as e:
    raise common.UsageError(str(e)) from e
  return node_selector, tolerations, cpu, memory


def _check_cluster_args(args) -> None:
  """The checks of options every compile shares (no pipeline, no kfp)."""
  runner = args.runner
  if args.vertex_accelerator_type is not None and (
      runner != 'kubeflow_v2' or not args.use_tpu):
    raise common.UsageError(
        '--vertex-accelerator-type needs --runner kubeflow_v2 and --use-tpu.')
  if args.vertex_accelerator_type is not None:
    _vertex_accelerator_type(args.vertex_accelerator_type)
    if not args.vertex_job:
      raise common.UsageError(
          '--vertex-accelerator-type names the Vertex AI job\'s accelerator; '
          '--no-vertex-job writes none.')
  if args.tpu_check and not args.use_tpu:
    raise common.UsageError('--tpu-check needs --use-tpu: it checks the '
                            'trainer\'s TPU.')
  if not args.vertex_job and runner != 'kubeflow_v2':
    raise common.UsageError('--no-vertex-job needs --runner kubeflow_v2.')
  if (args.trainer_image is not None and
      runtimes.IMAGE_RUNTIME_FIELD in args.trainer_image and
      (not args.use_tpu or args.tpu_style != 'tpu-vm')):
    raise common.UsageError(
        f'--trainer-image {args.trainer_image!r} names '
        f'{runtimes.IMAGE_RUNTIME_FIELD}, which needs a TPU VM runtime '
        '(--use-tpu, --tpu-style tpu-vm).')
  if args.use_gcp_secret and runner != 'kubeflow':
    raise common.UsageError('--use-gcp-secret needs --runner kubeflow.')
  if args.use_tpu and args.tpu_style == 'tpu-node' and runner != 'kubeflow':
    raise common.UsageError(
        '--tpu-style tpu-node needs --runner kubeflow: ' +
        pod_requests.TPU_NODE_RETIRED_WARNING)
  if (args.tpu_zone or args.tpu_project) and not args.tpu_name:
    raise common.UsageError('--tpu-zone and --tpu-project need --tpu-name.')


def _trainer_pod(args):
  """The validated TrainerPod of the TPUTrainer steps."""
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  tpu = _tpu_request(args)
  node_selector, tolerations, cpu, memory = _trainer_pod_options(args)
  try:
    return scheduling.TrainerPod(
        tpu=tpu, node_selector=node_selector, tolerations=tolerations,
        cpu_request=cpu, memory_request=memory)
  except scheduling.TPUSchedulingError as e:
    raise common.UsageError(str(e)) from e


def _pipeline_name_args(pipeline_name: str, runner: str, flag: str) -> None:
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  if runner == 'kubeflow_v2' and not compiler.V2_PIPELINE_NAME.match(
      pipeline_name):
    raise common.UsageError(
        f'{flag} {pipeline_name!r} is not accepted by --runner '
        'kubeflow_v2: use lower-case letters, digits and -, e.g. taxi-tpu.')
  if not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9_-]{0,62}', pipeline_name):
    raise common.UsageError(
        f'{flag} {pipeline_name!r} must be 1-63 letters, digits, _ '
        'or -, starting with a letter or digit.')


def validate_compile_args(args):
  """Checks every argument of a taxi compile before anything is written.

  Args:
    args: the parsed `compile` arguments, without --pipeline.

  Returns:
    `tfx_tpu_trainer_cli.kubeflow_compile.CompileOptions`.

  Raises:
    common.UsageError: naming the bad option.
  """
  from tfx_tpu_trainer_cli import kubeflow_compile  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top

  _bundled_only_options(args)
  runner = args.runner
  pipeline_name = (args.pipeline_name or
                   kubeflow_compile.default_pipeline_name(runner))
  _pipeline_name_args(pipeline_name, runner, '--pipeline-name')
  _check_cluster_args(args)
  pod = _trainer_pod(args)
  module_files = {}
  if args.module_file is not None:
    module_files['trainer_module_file'] = _location(args.module_file,
                                                    '--module-file')
  elif args.model is not None:
    module_files['trainer_module_file'] = posixpath.join(
        kubeflow_compile.IMAGE_COMPONENTS_DIR,
        paths.MODEL_MODULE_FILES[args.model])
  if args.preprocessing_module_file is not None:
    module_files.update(_preprocessing_fn(args.preprocessing_module_file))
  eval_options = _evaluator_options(args, kubeflow_compile)
  options = kubeflow_compile.CompileOptions(
      runner=runner,
      pipeline_root=_location(args.pipeline_root, '--pipeline-root'),
      data_root=_location(args.data_root, '--data-root'),
      serving_model_dir=(None if args.serving_model_dir is None else _location(
          args.serving_model_dir, '--serving-model-dir')),
      output_path=_output_path(args, runner, pipeline_name),
      image=_image(args.image, '--image'),
      trainer_image=_image(args.trainer_image, '--trainer-image'),
      pipeline_name=pipeline_name,
      use_tpu=args.use_tpu,
      tpu=pod.tpu,
      tpu_name=args.tpu_name,
      tpu_zone=args.tpu_zone,
      tpu_project=args.tpu_project,
      vertex_accelerator_type=args.vertex_accelerator_type,
      trainer_node_selector=pod.node_selector,
      trainer_tolerations=pod.tolerations,
      trainer_cpu=pod.cpu_request,
      trainer_memory=pod.memory_request,
      train_steps=args.train_steps,
      eval_steps=args.eval_steps,
      train_batch_size=args.train_batch_size,
      eval_batch_size=args.eval_batch_size,
      use_gcp_sa=args.use_gcp_secret,
      beam_args=tuple(_beam_args(args.beam_arg)),
      tpu_runtime=args.tpu_runtime,
      tpu_check=args.tpu_check,
      vertex_job=args.vertex_job,
      bulk_infer=args.bulk_infer,
      **module_files, **eval_options)
  try:
    # The TPU runtime, the Vertex AI job with a TPU, the trainer image.
    compiler.check_options(kubeflow_compile.kubeflow_options(options),
                           pipeline_name)
  except compiler.CompileError as e:
    raise common.UsageError(_as_flags(e)) from e
  try:
    config = config_lib.TrainerConfig.from_custom_config(
        kubeflow_compile.trainer_custom_config(options), environ={})
    config.check_steps(args.train_steps, args.eval_steps)
  except config_lib.ConfigError as e:
    raise common.UsageError(str(e)) from e
  return options


def _evaluator_options(args, kubeflow_compile) -> dict:
  """The Evaluator's keys as `run` finds them for the same module files.

  The module files are named by their paths inside the image; they are
  read from the same paths here (and the CSV columns from --data-root),
  unless both keys are given.
  """
  if (args.module_file is None and args.preprocessing_module_file is None and
      args.eval_label_key is None and args.eval_prediction_key is None):
    return {}
  trainer = args.module_file or paths.model_module_file(
      args.model or paths.DEFAULT_MODEL)
  preprocessing = args.preprocessing_module_file or (
      paths.PREPROCESSING_MODULE_FILE)
  if not (args.eval_label_key and args.eval_prediction_key):
    for flag, path in (('--module-file', trainer),
                       ('--preprocessing-module-file', preprocessing)):
      if _URI.match(path) or not os.path.isfile(path):
        raise common.UsageError(
            f'{flag} {path!r} is not a file on this machine, so the '
            'Evaluator\'s label and prediction cannot be read from it as '
            '`run` reads them: compile where the module files are at the '
            'paths the image has them, or pass --eval-label-key and '
            '--eval-prediction-key (e.g. --eval-label-key tips_xf '
            '--eval-prediction-key probabilities).')
  custom_config = {'train_batch_size': args.train_batch_size,
                   'eval_batch_size': args.eval_batch_size}
  return common.evaluator_options(trainer, preprocessing, args.data_root,
                                  custom_config, args.eval_label_key,
                                  args.eval_prediction_key)


def _preprocessing_fn(path: str):
  """A Transform module inside the image -> its import path and folder."""
  path = _location(path, '--preprocessing-module-file')
  stem = posixpath.splitext(posixpath.basename(path))[0]
  if not path.endswith('.py') or not stem.isidentifier() or '://' in path:
    raise common.UsageError(
        f'--preprocessing-module-file {path!r} must be an absolute path of a '
        '.py file inside the image whose name is a Python module name: '
        'Transform imports its preprocessing_fn by that name.')
  return {'preprocessing_fn': f'{stem}.preprocessing_fn',
          'python_path': (posixpath.dirname(path),)}


def cluster_options(args):
  """`compiler.KubeflowOptions` for a user's pipeline, checked.

  Raises:
    common.UsageError: naming the bad option.
  """
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  _bundled_only_options(args)
  _check_cluster_args(args)
  options = compiler.KubeflowOptions(
      runner=args.runner,
      image=_image(args.image, '--image'),
      trainer_image=_image(args.trainer_image, '--trainer-image'),
      trainer_pod=_trainer_pod(args),
      tpu_name=args.tpu_name,
      tpu_zone=args.tpu_zone,
      tpu_project=args.tpu_project,
      vertex_accelerator_type=args.vertex_accelerator_type,
      beam_args=tuple(_beam_args(args.beam_arg)),
      use_gcp_sa=args.use_gcp_secret,
      tpu_runtime=args.tpu_runtime,
      tpu_check=args.tpu_check,
      vertex_job=args.vertex_job)
  try:
    # The TPU runtime, the Vertex AI job with a TPU, the trainer image.
    compiler.check_cluster_options(options)
  except compiler.CompileError as e:
    raise common.UsageError(_as_flags(e)) from e
  return options


# The command-line flag of each KubeflowOptions field a CompileError names.
_OPTION_FLAGS = {'tpu_check': '--tpu-check'}


def _as_flags(error) -> str:
  """A CompileError's message, naming the options as the command line does."""
  return error.naming(_OPTION_FLAGS.get(error.option, error.option))


def _vertex_accelerator_type(value: str) -> str:
  """A name of Vertex AI's AcceleratorType enum (google-cloud-aiplatform)."""
  from google.cloud.aiplatform_v1.types import AcceleratorType  # pylint: disable=g-import-not-at-top
  names = [a.name for a in AcceleratorType
           if a.name != 'ACCELERATOR_TYPE_UNSPECIFIED']
  if value not in names:
    raise common.UsageError(
        f'--vertex-accelerator-type {value!r} is not a Vertex AI accelerator '
        f'type; accepted values: {", ".join(names)}.')
  return value


def _compile(args) -> int:
  """Validates the arguments, compiles, prints what the files say.

  What TensorFlow, TFX, kfp and TFX's packaging of module files print while
  they load and compile goes to a log file in the temporary directory (not
  the output directory, which holds the compiled files alone), named on the
  summary's last line; a usage error, which says it all, removes it.
  """
  compile_it = _static_checks(args)
  print(f'Compiling {_what(args)} for {_RUNNER_NAMES[args.runner]} '
        '(TensorFlow, TFX and kfp load first) ...', flush=True)
  _beam_args(args.beam_arg)  # Beam's option classes load (a few seconds).
  descriptor, log_path = tempfile.mkstemp(
      prefix=time.strftime('tfx-tpu-trainer-compile-%Y%m%d-%H%M%S-'),
      suffix='.log')
  os.close(descriptor)
  try:
    with common.output_to_log(log_path), common.absl_info_logged():
      summary = compile_it(args)
  except common.UsageError:
    os.remove(log_path)
    raise
  except BaseException:
    print(f'tfx-tpu-trainer compile: failed; full log: {log_path}',
          file=sys.stderr)
    raise
  summary.print()
  print(f'  Full log:       {log_path}')
  return 0


# How the first line names each --runner's output.
_RUNNER_NAMES = {'kubeflow': 'KFP v1', 'kubeflow_v2': 'KFP v2'}


def _static_checks(args):
  """What the command line and the files say, before TFX, TF and kfp load.

  The pipeline file and its function, the taxi pipeline's options, the
  cluster options and the TPU request (the Beam options, whose classes take
  seconds to load, come after the first line); nothing is written.

  Returns:
    The compile to run: `_compile_user_pipeline` or `_compile_taxi_pipeline`.
  """
  if args.pipeline:
    from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
    user_pipeline.check_spec(args.pipeline)
  _bundled_only_options(args)
  if not args.pipeline:
    for flag, value in (('--pipeline-root', args.pipeline_root),
                        ('--data-root', args.data_root)):
      _location(value, flag)
  _check_cluster_args(args)
  _check_tpu_request(args)
  _trainer_pod_options(args)
  for flag, value in (('--image', args.image),
                      ('--trainer-image', args.trainer_image)):
    _image(value, flag)
  return _compile_user_pipeline if args.pipeline else _compile_taxi_pipeline


def _what(args) -> str:
  return (f'the pipeline of {args.pipeline}' if args.pipeline else
          'the taxi pipeline')


class _Summary:
  """What a compile prints, once the log file has its output back."""

  def __init__(self, result, options, module_line: str, trainer_pod):
    self.result = result
    self.options = options
    self.module_line = module_line
    self.trainer_pod = trainer_pod

  def print(self) -> None:
    _warn_tpu_node(self.trainer_pod)
    _print_summary(self.result)
    print(self.module_line)
    _print_notes(self.result, self.options)


def _compile_taxi_pipeline(args) -> _Summary:
  options = validate_compile_args(args)
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import kubeflow_compile  # pylint: disable=g-import-not-at-top
  try:
    result = kubeflow_compile.compile_pipeline(options)
  except compiler.CompileError as e:  # What needs the pipeline: its root.
    raise common.UsageError(_as_flags(e)) from e
  return _Summary(result, kubeflow_compile.kubeflow_options(options),
                  f'  Module files:   {options.trainer_module_file}, '
                  f'{options.preprocessing_fn} (inside the image)',
                  options.trainer_pod)


def _compile_user_pipeline(args) -> _Summary:
  """`compile --pipeline FILE:FUNCTION`."""
  options = cluster_options(args)
  from tfx_tpu_trainer.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer_cli import user_pipeline  # pylint: disable=g-import-not-at-top
  packaging = (compiler.user_modules_not_packaged()
               if args.module_files_in_image else contextlib.nullcontext())
  with packaging:
    pipeline = user_pipeline.load_pipeline(args.pipeline)
  name = pipeline.pipeline_info.pipeline_name
  _pipeline_name_args(name, args.runner, f'{user_pipeline.FLAG}: the '
                      'pipeline name')
  output_path = _output_path(args, args.runner, name)
  try:
    result = compiler.compile_pipeline(pipeline, output_path, options)
  except compiler.CompileError as e:
    raise common.UsageError(
        f'{user_pipeline.FLAG}: {_as_flags(e)}') from e
  modules = result.user_code
  where = ('as given, inside the image' if args.module_files_in_image else
           'packaged by TFX under the pipeline root')
  return _Summary(result, options,
                  f'  Module files:   {", ".join(modules) or "none"} '
                  f'({where})', options.trainer_pod)


def _warn_tpu_node(pod) -> None:
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  if isinstance(pod.tpu, scheduling.TPUNodeScheduling):
    print('tfx-tpu-trainer compile: warning: ' +
          scheduling.TPU_NODE_RETIRED_WARNING, file=sys.stderr)


def _print_summary(result) -> None:
  if result.tpu_runtime is not None:
    for warning in result.tpu_runtime.warnings:
      print('tfx-tpu-trainer compile: warning: ' + warning, file=sys.stderr)
  for path in result.paths:
    print(f'Wrote {path} ({_file_kind(result.runner, path)}).')
  label = 'Trainer step:  ' if len(result.trainer_ids) == 1 else 'Trainer steps: '
  print(f'  {label} {", ".join(result.trainer_ids)}')
  for summary in result.trainer_summaries:
    print(f'    {summary}')
  for inferrer_id, summary in zip(result.inferrer_ids,
                                  result.inferrer_summaries):
    print(f'  Inferrer step:   {inferrer_id}, custom_config '
          f'{result.inferrer_custom_configs[inferrer_id]}')
    print(f'    {summary}')
  if result.tpu_runtime is not None:
    print(f'  TPU runtime:    {result.tpu_runtime.describe()}')
  if result.tpu_check_id:
    print(f'  TPU check:      step {result.tpu_check_id} first, scheduled like '
          'the trainer (tfx-tpu-trainer tpu-check)')
  from tfx_tpu_trainer.publishing import secrets  # pylint: disable=g-import-not-at-top
  secret_warnings = []
  for trainer_id in result.trainer_ids:
    prefix = '' if len(result.trainer_ids) == 1 else f'{trainer_id}: '
    custom_config = result.custom_configs[trainer_id]
    if isinstance(custom_config, dict):
      names = secrets.secret_names(custom_config)
      if names:
        secret_warnings.append(
            f'  Warning: TPUTrainer {trainer_id!r} has custom_config '
            f'{", ".join(names)}: the compiled file carries the value(s) in '
            'plain text (masked here) for anyone who can read it or the '
            'pipeline in the KFP UI. Pass secrets from a Kubernetes secret '
            'instead (docs/guide/kubeflow.md, "Secrets").')
      custom_config = secrets.masked(custom_config)
    print(f'  custom_config:  {prefix}{custom_config}')
  from tfx_tpu_trainer.publishing import secrets  # pylint: disable=g-import-not-at-top
  print('  Beam args:      ' + ' '.join(
      str(secrets.masked_arg(a)) for a in result.beam_pipeline_args))
  hidden = [secrets.masked_arg(a) for a in result.beam_pipeline_args
            if secrets.masked_arg(a) != a]
  if hidden:
    print(f'  Warning: the compiled file carries the secret(s) '
          f'{", ".join(hidden)} in plain text (masked here): anyone who can '
          'read the file or the pipeline in the KFP UI can read them. Pass '
          'secrets from a Kubernetes secret instead (docs/guide/kubeflow.md, '
          '"Secrets").')
  for warning in secret_warnings:
    print(warning)


def _print_notes(result, options) -> None:
  if options.image == compile_options.DEFAULT_IMAGE:
    print('  Note: --image is the placeholder '
          f'{compile_options.DEFAULT_IMAGE}; build the Dockerfile, push it, '
          'and pass its name.')
  if options.use_tpu and not options.trainer_image:
    target = (result.tpu_runtime.image_target if result.tpu_runtime else
              'tpu-se')
    print('  Note: no --trainer-image: the trainer runs --image; training on '
          'TPU needs the TPU runtime (libtpu): build the Dockerfile target '
          f'{target} (`make tpu-image`), push it, and pass it as '
          '--trainer-image.')
  from tfx_tpu_trainer.kubeflow import tpu_slices  # pylint: disable=g-import-not-at-top
  multi_host = isinstance(options.trainer_pod.tpu, tpu_slices.TPUSliceScheduling)
  if multi_host:
    print('  Note: a multi-host slice: the trainer step creates and deletes '
          'its worker pods; its service account needs the Role in '
          f'{tpu_slices.RBAC_MANIFEST} (docs/guide/tpu_slices.md, "Multi-host '
          'slices").')
  elif options.use_tpu and any('tpu' not in c
                               for c in result.custom_configs.values()):
    print('  Note: no --tpu-name: the trainer takes the TPU from TPU_NAME, '
          'or else KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS (set by GKE for a TPU '
          'node), in its pod.')


def _file_kind(runner: str, path: str) -> str:
  if runner == 'kubeflow':
    return 'Argo workflow for KFP v1'
  if path.endswith('.json'):
    return 'PipelineJob for Vertex AI Pipelines'
  return 'pipeline spec for a KFP v2 backend'
