"""TPU scheduling for the trainer step of a Kubeflow pipeline."""

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
from kfp import dsl
from kfp import gcp
from kubernetes import client as k8s_client
from tfx.orchestration.kubeflow import kubeflow_dag_runner

from tfx_tpu_trainer.kubeflow import pod_requests
from tfx_tpu_trainer.publishing import step_outputs
from tfx_tpu_trainer.tpu import facts

__all__ = ['OpFunc', 'ACCELERATOR_LABEL',
           'TOPOLOGY_LABEL', 'TPU_VM_TPU_NAME', 'GKETPUAccelerator',
           'GKE_TPU_ACCELERATORS', 'DEFAULT_ACCELERATOR',
           'TPU_NODE_RESOURCE_PREFIX', 'TPU_NODE_ANNOTATION', 'TPU_NODE_CORES',
           'TPU_NODE_VERSIONS', 'DEFAULT_TPU_NODE_VERSION',
           'DEFAULT_TPU_NODE_CORES', 'TPU_NODE_RETIRED_WARNING',
           'TOLERATION_EFFECTS', 'TPUSchedulingError', 'default_tf_version',
           'TPUVMScheduling', 'TPUNodeScheduling', 'TPUScheduling', 'tpu_vm',
           'tpu_node', 'Toleration', 'TPU_TOLERATION', 'parse_toleration',
           'parse_node_selector', 'parse_quantity', 'quantity_value',
           'TrainerPod', 'set_env', 'StepOpFunc', 'set_image',
           'trainer_step_op', 'tpu_step_op', 'pipeline_operator_funcs']

OpFunc = Callable[[dsl.ContainerOp], Optional[dsl.ContainerOp]]


# TPU VM style.
ACCELERATOR_LABEL = 'cloud.google.com/gke-tpu-accelerator'
TOPOLOGY_LABEL = 'cloud.google.com/gke-tpu-topology'
TPU_VM_TPU_NAME = 'local'


# What a request may ask for, and its checks (pod_requests.py).
TPUSchedulingError = pod_requests.TPUSchedulingError
GKETPUAccelerator = pod_requests.GKETPUAccelerator
GKE_TPU_ACCELERATORS = pod_requests.GKE_TPU_ACCELERATORS
DEFAULT_ACCELERATOR = pod_requests.DEFAULT_ACCELERATOR
TPU_NODE_VERSIONS = pod_requests.TPU_NODE_VERSIONS
TPU_NODE_CORES = pod_requests.TPU_NODE_CORES
DEFAULT_TPU_NODE_VERSION = pod_requests.DEFAULT_TPU_NODE_VERSION
DEFAULT_TPU_NODE_CORES = pod_requests.DEFAULT_TPU_NODE_CORES
TPU_NODE_RETIRED_WARNING = pod_requests.TPU_NODE_RETIRED_WARNING
TOLERATION_EFFECTS = pod_requests.TOLERATION_EFFECTS
default_tf_version = pod_requests.default_tf_version
Toleration = pod_requests.Toleration
parse_toleration = pod_requests.parse_toleration
parse_node_selector = pod_requests.parse_node_selector
parse_quantity = pod_requests.parse_quantity
quantity_value = pod_requests.quantity_value

# TPU node style (`kfp.gcp.use_tpu`): resource `cloud-tpus.google.com/<v>`.
TPU_NODE_RESOURCE_PREFIX = 'cloud-tpus.google.com/'
TPU_NODE_ANNOTATION = 'tf-version.cloud-tpus.google.com'


@dataclasses.dataclass(frozen=True)
class TPUVMScheduling:
  """A validated single-host GKE TPU VM request. Build with `tpu_vm()`."""
  accelerator: str
  topology: str
  chips: int

  default_tpu_name = TPU_VM_TPU_NAME

  @property
  def resource_limits(self) -> Dict[str, str]:
    return {facts.TPU_RESOURCE: str(self.chips)}

  @property
  def node_selector(self) -> Dict[str, str]:
    return {ACCELERATOR_LABEL: self.accelerator, TOPOLOGY_LABEL: self.topology}

  @property
  def tolerations(self) -> List[k8s_client.V1Toleration]:
    return [k8s_client.V1Toleration(
        key=facts.TPU_RESOURCE, operator='Exists', effect='NoSchedule')]

  def apply(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    """Puts the limit, node selectors and toleration on `op`."""
    for name, value in self.resource_limits.items():
      op.container.add_resource_limit(name, value)
    for label, value in self.node_selector.items():
      op.add_node_selector_constraint(label, value)
    for toleration in self.tolerations:
      op.add_toleration(toleration)
    return op

  def describe(self) -> str:
    return (f'{facts.TPU_RESOURCE}: {self.chips} on {self.accelerator} '
            f'{self.topology} (TPU VM)')


@dataclasses.dataclass(frozen=True)
class TPUNodeScheduling:
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

  def describe(self) -> str:
    return (f'{self.resource_name}: {self.cores}, {TPU_NODE_ANNOTATION}: '
            f'{self.tf_version} (TPU node)')


TPUScheduling = Union[TPUVMScheduling, TPUNodeScheduling]


def tpu_vm(accelerator: str = DEFAULT_ACCELERATOR,
           topology: Optional[str] = None,
           chips: Optional[int] = None) -> TPUVMScheduling:
  """A GKE TPU VM request, checked by `pod_requests.tpu_vm_request`.

  Raises:
    TPUSchedulingError: naming the bad option and the accepted values.
  """
  accelerator, topology, chips = pod_requests.tpu_vm_request(
      accelerator, topology, chips)
  return TPUVMScheduling(accelerator=accelerator, topology=topology,
                         chips=chips)


def tpu_node(version: str = DEFAULT_TPU_NODE_VERSION,
             cores: int = DEFAULT_TPU_NODE_CORES,
             tf_version: Optional[str] = None) -> TPUNodeScheduling:
  """A GKE Cloud TPU node request (`kfp.gcp.use_tpu` style), checked by
  `pod_requests.tpu_node_request`.

  Raises:
    TPUSchedulingError: naming the bad option and the accepted values.
  """
  version, cores, tf_version = pod_requests.tpu_node_request(
      version, cores, tf_version)
  return TPUNodeScheduling(version=version, cores=cores,
                           tf_version=tf_version)


TPU_TOLERATION = Toleration(key=facts.TPU_RESOURCE, effect='NoSchedule')


@dataclasses.dataclass(frozen=True)
class TrainerPod:
  """Everything the trainer step's pod gets: TPU, placement, requests.

  `node_selector` and `tolerations` are the extra ones (Spot VMs,
  reservations); the TPU's come from `tpu`. The same object renders the KFP
  v1 step (`apply`), the KFP v2 executor (`kfp_v2_resources`,
  `kubernetes_executor_config`) and the Vertex AI executor
  (`vertex_resources`).
  """
  tpu: Optional[TPUScheduling] = None
  node_selector: Tuple[Tuple[str, str], ...] = ()
  tolerations: Tuple[Toleration, ...] = ()
  cpu_request: Optional[str] = None
  memory_request: Optional[str] = None

  def __post_init__(self):
    tpu_labels = self._tpu_node_selector()
    for key, value in self.node_selector:
      if key in tpu_labels and tpu_labels[key] != value:
        raise TPUSchedulingError(
            f'trainer-node-selector {key}={value} contradicts the TPU request '
            f'({key}={tpu_labels[key]}); set it with --accelerator/--topology.')
    keys = [key for key, _ in self.node_selector]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
      raise TPUSchedulingError(
          f'trainer-node-selector sets {", ".join(duplicates)} more than once.')

  def _tpu_node_selector(self) -> Dict[str, str]:
    if isinstance(self.tpu, TPUVMScheduling):
      return self.tpu.node_selector
    return {}

  @property
  def all_node_selector(self) -> Dict[str, str]:
    labels = self._tpu_node_selector()
    labels.update(self.node_selector)
    return labels

  @property
  def all_tolerations(self) -> List[Toleration]:
    tolerations = ([TPU_TOLERATION] if isinstance(self.tpu, TPUVMScheduling)
                   else [])
    return tolerations + [t for t in self.tolerations if t not in tolerations]

  @property
  def resource_limits(self) -> Dict[str, str]:
    return dict(self.tpu.resource_limits) if self.tpu is not None else {}

  @property
  def resource_requests(self) -> Dict[str, str]:
    requests = {}
    if self.cpu_request:
      requests['cpu'] = self.cpu_request
    if self.memory_request:
      requests['memory'] = self.memory_request
    return requests

  def apply(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    """KFP v1: limits, requests, node selectors, tolerations (annotation)."""
    if isinstance(self.tpu, TPUNodeScheduling):
      self.tpu.apply(op)
    else:
      for name, value in self.resource_limits.items():
        op.container.add_resource_limit(name, value)
    for name, value in self.resource_requests.items():
      op.container.add_resource_request(name, value)
    for label, value in self.all_node_selector.items():
      op.add_node_selector_constraint(label, value)
    for toleration in self.all_tolerations:
      op.add_toleration(toleration.to_k8s())
    return op

  def kfp_v2_resources(self) -> Dict[str, Any]:
    """The executor's `resources` in today's KFP v2 pipeline spec (JSON).

    Both the current fields (`resourceCpuRequest`, `accelerator.resourceType`
    ...) and the deprecated ones older backends read (`cpuRequest` in cores,
    `memoryRequest` in GB, `accelerator.type/count`).
    """
    resources: Dict[str, Any] = {}
    if self.cpu_request:
      resources['cpuRequest'] = quantity_value(self.cpu_request)
      resources['resourceCpuRequest'] = self.cpu_request
    if self.memory_request:
      resources['memoryRequest'] = quantity_value(self.memory_request) / 1e9
      resources['resourceMemoryRequest'] = self.memory_request
    if self.tpu is not None and self.tpu.resource_limits:
      (name, count), = self.tpu.resource_limits.items()
      resources['accelerator'] = {'type': name, 'count': count,
                                  'resourceType': name, 'resourceCount': count}
    return resources

  def kubernetes_executor_config(self) -> Dict[str, Any]:
    """kfp-kubernetes' `KubernetesExecutorConfig` (JSON) for the trainer."""
    config: Dict[str, Any] = {}
    if self.all_node_selector:
      config['nodeSelector'] = {'labels': self.all_node_selector}
    if self.all_tolerations:
      config['tolerations'] = [t.to_dict() for t in self.all_tolerations]
    return config

  def vertex_resources(self, accelerator_type: Optional[str]
                      ) -> Dict[str, Any]:
    """The executor's `resources` as Vertex AI Pipelines reads them.

    Vertex picks the machine from the accelerator (its `AcceleratorType`
    name) and the CPU/memory limits (cores, GB); the requests are given as
    those limits. Node selectors and tolerations do not exist there.
    """
    resources: Dict[str, Any] = {}
    if self.cpu_request:
      resources['cpuLimit'] = quantity_value(self.cpu_request)
    if self.memory_request:
      resources['memoryLimit'] = quantity_value(self.memory_request) / 1e9
    if self.tpu is not None and self.tpu.resource_limits:
      (_, count), = self.tpu.resource_limits.items()
      resources['accelerator'] = {'type': accelerator_type, 'count': count}
    return resources


def set_env(name: str, value: str) -> OpFunc:
  """An operator function that sets an environment variable on a step."""

  def _set_env(op: dsl.ContainerOp) -> dsl.ContainerOp:
    op.container.add_env_variable(k8s_client.V1EnvVar(name=name, value=value))
    return op

  return _set_env


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

  def add(self, func: OpFunc) -> None:
    """Appends an operator function for the step."""
    self._funcs.append(func)

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
                    pod: Optional[TrainerPod] = None,
                    image: Optional[str] = None,
                    env: Optional[Dict[str, str]] = None) -> StepOpFunc:
  """The trainer's operator function: image, pod spec, KFP metrics output.

  Args:
    trainer_id: the trainer component's id (its step's `op.human_name`).
    pod: TPU, node selectors, tolerations and requests, or None for none.
    image: a trainer-only image (e.g. one with the TPU runtime), or None to
      keep the pipeline's image.
    env: the TPU runtime's environment (runtimes.RuntimeChoice.env).

  Returns:
    The operator function; its `applied_to` lists the steps it changed.
  """
  step_op = tpu_step_op(trainer_id, pod, image, env)
  step_op.add(step_outputs.trainer_step_outputs)
  return step_op


def tpu_step_op(component_id: str,
                pod: Optional[TrainerPod] = None,
                image: Optional[str] = None,
                env: Optional[Dict[str, str]] = None) -> StepOpFunc:
  """A step scheduled like the trainer (image, pod, runtime env).

  Args:
    component_id: the component's id (its step's `op.human_name`).
    pod: TPU, node selectors, tolerations and requests, or None for none.
    image: the trainer image, or None to keep the pipeline's image.
    env: the TPU runtime's environment.

  Returns:
    The operator function; its `applied_to` lists the steps it changed.
  """
  funcs = []
  if image:
    funcs.append(set_image(image))
  if pod is not None:
    funcs.append(pod.apply)
  funcs.extend(set_env(name, value) for name, value in (env or {}).items())
  return StepOpFunc(component_id, funcs)


def pipeline_operator_funcs(trainer_op: StepOpFunc,
                            use_gcp_sa: bool = False,
                            env: Optional[Dict[str, str]] = None
                           ) -> List[OpFunc]:
  """TFX's default operator functions, `env` on every step, the trainer's.

  Passing `pipeline_operator_funcs` to `KubeflowDagRunnerConfig` replaces its
  defaults, so they are listed here again.

  Args:
    trainer_op: from `trainer_step_op`.
    use_gcp_sa: mount the `user-gcp-sa` secret on every step (TFX's option).
    env: environment variables for every step.

  Returns:
    The functions, defaults first.
  """
  return (list(kubeflow_dag_runner.get_default_pipeline_operator_funcs(
      use_gcp_sa=use_gcp_sa)) +
          [set_env(name, value) for name, value in (env or {}).items()] +
          [trainer_op])
