"""TPU scheduling for the trainer step of a Kubeflow pipeline.

Two styles of TPU on GKE:

* TPU VM (the default): the pod requests `google.com/tpu: <chips>`, selects
  nodes by `cloud.google.com/gke-tpu-accelerator` and
  `cloud.google.com/gke-tpu-topology`, and tolerates the `google.com/tpu`
  taint that GKE puts on TPU nodes. The TPU is attached to the node, so the
  executor resolves it as `TPUClusterResolver(tpu='local')`.
* TPU node (older): the pod carries the `tf-version.cloud-tpus.google.com`
  annotation and requests `cloud-tpus.google.com/<v2|v3>: <cores>`; GKE
  creates a Cloud TPU node for it (`kfp.gcp.use_tpu` does exactly this).

Topology rule (TPU VM). A topology is `AxB` (v5e, v6e) or `AxBxC` (v4, v5p)
and describes the whole slice, whose chip count is the product of its
dimensions. A Kubeflow v1 step is one pod, and one pod runs on one host, so
only single-host topologies are accepted (the `SINGLE_HOST_TOPOLOGIES` of
each accelerator below; GKE's tables list the same), and the chip count the
pod requests must be the product of the dimensions, i.e. every chip of the
host: `tpu-v5-lite-podslice` with `2x4` requests `google.com/tpu: 8`. A
larger (multi-host) topology needs one pod per host (a JobSet), which a KFP
v1 step cannot express; it is rejected.

`pipeline_operator_funcs` keeps TFX's defaults (`metadata-grpc-configmap`,
optionally the `user-gcp-sa` secret) for every step and adds the trainer's
functions, which act only on the step whose `op.human_name` is the trainer's
component id (`KubeflowDagRunner` names each `ContainerOp` after
`component.id`; `op.name` is a sanitized, possibly suffixed copy of it).
"""

import dataclasses
import importlib.metadata
import math
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
from kfp import dsl
from kfp import gcp
from kfp.pipeline_spec import pipeline_spec_pb2
from kubernetes import client as k8s_client
from tfx.orchestration.kubeflow import kubeflow_dag_runner

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.kubeflow import options
from tfx_tpu_trainer.kubeflow import step_outputs

OpFunc = Callable[[dsl.ContainerOp], Optional[dsl.ContainerOp]]
ResourceSpec = (
    pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec
    .ResourceSpec)

TPU_STYLES = options.TPU_STYLES

# TPU VM style.
TPU_VM_RESOURCE = 'google.com/tpu'
ACCELERATOR_LABEL = 'cloud.google.com/gke-tpu-accelerator'
TOPOLOGY_LABEL = 'cloud.google.com/gke-tpu-topology'
TPU_VM_TPU_NAME = 'local'


@dataclasses.dataclass(frozen=True)
class GkeTpuAccelerator:
  """A GKE TPU VM accelerator (the `gke-tpu-accelerator` node label value)."""
  name: str
  dimensions: int
  single_host_topologies: Tuple[str, ...]

  @property
  def max_chips_per_host(self) -> int:
    return max(_chip_count(_dims(t)) for t in self.single_host_topologies)

  @property
  def default_topology(self) -> str:
    """The single-host topology with the most chips."""
    return max(self.single_host_topologies,
               key=lambda t: _chip_count(_dims(t)))


GKE_TPU_ACCELERATORS: Dict[str, GkeTpuAccelerator] = {
    a.name: a for a in (
        GkeTpuAccelerator('tpu-v4-podslice', 3, ('2x2x1',)),
        GkeTpuAccelerator('tpu-v5-lite-device', 2,
                          ('1x1', '2x2', '2x4')),
        GkeTpuAccelerator('tpu-v5-lite-podslice', 2,
                          ('1x1', '2x2', '2x4')),
        GkeTpuAccelerator('tpu-v5p-slice', 3, ('2x2x1',)),
        GkeTpuAccelerator('tpu-v6e-slice', 2, ('1x1', '2x2', '2x4')),
    )
}
DEFAULT_ACCELERATOR = 'tpu-v5-lite-podslice'

# TPU node style (`kfp.gcp.use_tpu`): resource `cloud-tpus.google.com/<v>`.
TPU_NODE_RESOURCE_PREFIX = 'cloud-tpus.google.com/'
TPU_NODE_ANNOTATION = 'tf-version.cloud-tpus.google.com'
# Cores per request: a single TPU device (8), or a Cloud TPU Pod slice.
TPU_NODE_CORES = {
    'v2': (8, 32, 128, 256, 512),
    'v3': (8, 32, 64, 128, 256, 512, 1024, 2048),
}
TPU_NODE_VERSIONS = ('v2', 'v3', 'preemptible-v2', 'preemptible-v3')
DEFAULT_TPU_NODE_VERSION = 'v3'
DEFAULT_TPU_NODE_CORES = 8
_TF_VERSION_PATTERN = re.compile(r'^(\d+\.\d+(\.\d+)?|nightly)$')


class TPUSchedulingError(errors.TPUTrainerError):
  """A TPU scheduling option (accelerator, topology, chips, ...) is invalid."""


def default_tf_version() -> str:
  """The TensorFlow version installed here: the TPU node runtime must match.

  Raises:
    TPUSchedulingError: when no TensorFlow distribution is installed.
  """
  for distribution in ('tensorflow', 'tensorflow-cpu', 'tensorflow-tpu'):
    try:
      return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
      continue
  raise TPUSchedulingError(
      'tf-version: no TensorFlow distribution is installed to take the '
      'version from; set it explicitly (e.g. 2.15.1).')


@dataclasses.dataclass(frozen=True)
class TpuVmScheduling:
  """A validated single-host GKE TPU VM request. Build with `tpu_vm()`."""
  accelerator: str
  topology: str
  chips: int

  default_tpu_name = TPU_VM_TPU_NAME

  @property
  def resource_limits(self) -> Dict[str, str]:
    return {TPU_VM_RESOURCE: str(self.chips)}

  @property
  def node_selector(self) -> Dict[str, str]:
    return {ACCELERATOR_LABEL: self.accelerator, TOPOLOGY_LABEL: self.topology}

  @property
  def tolerations(self) -> List[k8s_client.V1Toleration]:
    return [k8s_client.V1Toleration(
        key=TPU_VM_RESOURCE, operator='Exists', effect='NoSchedule')]

  def apply(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    """Puts the limit, node selectors and toleration on `op`."""
    for name, value in self.resource_limits.items():
      op.container.add_resource_limit(name, value)
    for label, value in self.node_selector.items():
      op.add_node_selector_constraint(label, value)
    for toleration in self.tolerations:
      op.add_toleration(toleration)
    return op

  def platform_config(self, accelerator_type: Optional[str] = None
                     ) -> ResourceSpec:
    """The v2 `ResourceSpec`: accelerator `google.com/tpu` x chips."""
    return _resource_spec(accelerator_type or TPU_VM_RESOURCE, self.chips)

  def describe(self) -> str:
    return (f'{TPU_VM_RESOURCE}: {self.chips} on {self.accelerator} '
            f'{self.topology} (TPU VM)')


@dataclasses.dataclass(frozen=True)
class TpuNodeScheduling:
  """A validated GKE Cloud TPU node request. Build with `tpu_node()`."""
  version: str
  cores: int
  tf_version: str

  default_tpu_name = None

  @property
  def resource_name(self) -> str:
    return TPU_NODE_RESOURCE_PREFIX + self.version

  @property
  def resource_limits(self) -> Dict[str, str]:
    return {self.resource_name: str(self.cores)}

  def apply(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    """`kfp.gcp.use_tpu`: the tf-version annotation and the TPU limit."""
    return op.apply(gcp.use_tpu(tpu_cores=self.cores,
                                tpu_resource=self.version,
                                tf_version=self.tf_version))

  def platform_config(self, accelerator_type: Optional[str] = None
                     ) -> ResourceSpec:
    """The v2 `ResourceSpec`: accelerator `cloud-tpus.google.com/<v>`."""
    return _resource_spec(accelerator_type or self.resource_name, self.cores)

  def describe(self) -> str:
    return (f'{self.resource_name}: {self.cores}, {TPU_NODE_ANNOTATION}: '
            f'{self.tf_version} (TPU node)')


TpuScheduling = Union[TpuVmScheduling, TpuNodeScheduling]


def tpu_vm(accelerator: str = DEFAULT_ACCELERATOR,
           topology: Optional[str] = None,
           chips: Optional[int] = None) -> TpuVmScheduling:
  """Validates a GKE TPU VM request (see the module docstring for the rule).

  Args:
    accelerator: a key of `GKE_TPU_ACCELERATORS`.
    topology: a single-host topology of the accelerator (default: its
      largest, e.g. `2x4` for v5e).
    chips: the `google.com/tpu` limit (default: the topology's chip count).

  Returns:
    The validated request.

  Raises:
    TPUSchedulingError: naming the bad option and the accepted values.
  """
  spec = GKE_TPU_ACCELERATORS.get(accelerator)
  if spec is None:
    raise TPUSchedulingError(
        f'accelerator {accelerator!r} is not a known GKE TPU accelerator; '
        f'accepted values: {", ".join(sorted(GKE_TPU_ACCELERATORS))}.')
  topology = spec.default_topology if topology is None else topology
  shape = 'x'.join('ABC'[:spec.dimensions])
  try:
    dims = _dims(topology)
  except ValueError:
    dims = ()
  if len(dims) != spec.dimensions:
    raise TPUSchedulingError(
        f'topology {topology!r} does not have the form {shape} of '
        f'{accelerator} topologies; accepted values: '
        f'{", ".join(spec.single_host_topologies)}.')
  topology_chips = _chip_count(dims)
  if topology_chips > spec.max_chips_per_host:
    raise TPUSchedulingError(
        f'topology {topology!r} of {accelerator} is a multi-host slice '
        f'({topology_chips} chips; one host has at most '
        f'{spec.max_chips_per_host}), and a Kubeflow step runs one pod on one '
        f'host; accepted values: {", ".join(spec.single_host_topologies)}.')
  if topology not in spec.single_host_topologies:
    raise TPUSchedulingError(
        f'topology {topology!r} is not a single-host topology of '
        f'{accelerator}; accepted values: '
        f'{", ".join(spec.single_host_topologies)}.')
  if chips is None:
    chips = topology_chips
  elif isinstance(chips, bool) or not isinstance(chips, int) or chips <= 0:
    raise TPUSchedulingError(
        f'chips must be a positive integer, got {chips!r}.')
  elif chips != topology_chips:
    raise TPUSchedulingError(
        f'chips {chips} does not match topology {topology} of {accelerator}: '
        f'a single-host slice requests all its chips, '
        f'{"*".join(map(str, dims))} = {topology_chips}.')
  return TpuVmScheduling(accelerator=accelerator, topology=topology,
                         chips=chips)


def tpu_node(version: str = DEFAULT_TPU_NODE_VERSION,
             cores: int = DEFAULT_TPU_NODE_CORES,
             tf_version: Optional[str] = None) -> TpuNodeScheduling:
  """Validates a GKE Cloud TPU node request (`kfp.gcp.use_tpu` style).

  Args:
    version: `v2`, `v3`, `preemptible-v2` or `preemptible-v3`.
    cores: 8 for one TPU device, or a Pod slice size of that version.
    tf_version: the Cloud TPU runtime's TensorFlow version (default: the
      installed TensorFlow's, which the TPU server must match).

  Returns:
    The validated request.

  Raises:
    TPUSchedulingError: naming the bad option and the accepted values.
  """
  if version not in TPU_NODE_VERSIONS:
    raise TPUSchedulingError(
        f'tpu-node-version {version!r} is not accepted; accepted values: '
        f'{", ".join(TPU_NODE_VERSIONS)}.')
  accepted_cores = TPU_NODE_CORES[version.split('-')[-1]]
  if isinstance(cores, bool) or cores not in accepted_cores:
    raise TPUSchedulingError(
        f'tpu-cores {cores!r} is not a {version} TPU size; accepted values: '
        f'{", ".join(map(str, accepted_cores))}.')
  tf_version = default_tf_version() if tf_version is None else tf_version
  if not isinstance(tf_version, str) or not _TF_VERSION_PATTERN.match(
      tf_version):
    raise TPUSchedulingError(
        f'tf-version {tf_version!r} is not a TensorFlow version; use '
        'MAJOR.MINOR[.PATCH] (e.g. 2.15.1) or nightly.')
  return TpuNodeScheduling(version=version, cores=cores,
                           tf_version=tf_version)


class StepOpFunc:
  """An operator function that acts only on the step of one component.

  `KubeflowDagRunner` applies every operator function to every step; this one
  passes other steps through untouched and records the steps it changed, so
  a caller can check that the component was found.
  """

  def __init__(self, component_id: str, funcs: Sequence[OpFunc]):
    self.component_id = component_id
    self._funcs = list(funcs)
    self.applied_to: List[str] = []

  def __call__(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    if op.human_name != self.component_id:
      return op
    for func in self._funcs:
      op = func(op) or op
    self.applied_to.append(op.name)
    logging.info('Step %s (%s): trainer options applied.', op.name,
                 op.human_name)
    return op


def set_image(image: str) -> OpFunc:
  """An operator function that sets the step's container image."""

  def _set_image(op: dsl.ContainerOp) -> dsl.ContainerOp:
    op.container.image = image
    return op

  return _set_image


def trainer_step_op(trainer_id: str,
                    tpu: Optional[TpuScheduling] = None,
                    image: Optional[str] = None) -> StepOpFunc:
  """The trainer's operator function: image, TPU, KFP metrics output.

  Args:
    trainer_id: the trainer component's id (its step's `op.human_name`).
    tpu: the TPU request, or None for no TPU.
    image: a trainer-only image (e.g. one with the TPU runtime), or None to
      keep the pipeline's image.

  Returns:
    The operator function; its `applied_to` lists the steps it changed.
  """
  funcs = []
  if image:
    funcs.append(set_image(image))
  if tpu is not None:
    funcs.append(tpu.apply)
  funcs.append(step_outputs.trainer_step_outputs)
  return StepOpFunc(trainer_id, funcs)


def pipeline_operator_funcs(trainer_op: StepOpFunc,
                            use_gcp_sa: bool = False) -> List[OpFunc]:
  """TFX's default operator functions plus the trainer-only one.

  Passing `pipeline_operator_funcs` to `KubeflowDagRunnerConfig` replaces its
  defaults, so they are listed here again.

  Args:
    trainer_op: from `trainer_step_op`.
    use_gcp_sa: mount the `user-gcp-sa` secret on every step (TFX's option).

  Returns:
    The functions, defaults first.
  """
  return list(kubeflow_dag_runner.get_default_pipeline_operator_funcs(
      use_gcp_sa=use_gcp_sa)) + [trainer_op]


def _resource_spec(accelerator_type: str, count: int) -> ResourceSpec:
  spec = ResourceSpec()
  spec.accelerator.type = accelerator_type
  spec.accelerator.count = count
  return spec


def _dims(topology: str) -> Tuple[int, ...]:
  if not isinstance(topology, str) or not re.fullmatch(r'[1-9]\d*(x[1-9]\d*)+',
                                                       topology):
    raise ValueError(topology)
  return tuple(int(d) for d in topology.split('x'))


def _chip_count(dims: Sequence[int]) -> int:
  return math.prod(dims)
