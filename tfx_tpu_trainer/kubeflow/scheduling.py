"""TPU scheduling for the trainer step of a Kubeflow pipeline."""

import dataclasses
import importlib.metadata
import math
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from absl import logging
from kfp import dsl
from kfp import gcp
from kubernetes import client as k8s_client
from tfx.orchestration.kubeflow import kubeflow_dag_runner

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.publishing import step_outputs
from tfx_tpu_trainer.tpu import facts
from tfx_tpu_trainer.tpu import runtimes

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


@dataclasses.dataclass(frozen=True)
class GKETPUAccelerator:
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


GKE_TPU_ACCELERATORS: Dict[str, GKETPUAccelerator] = {
    a.name: a for a in (
        GKETPUAccelerator('tpu-v4-podslice', 3, ('2x2x1',)),
        GKETPUAccelerator('tpu-v5-lite-device', 2,
                          ('1x1', '2x2', '2x4')),
        GKETPUAccelerator('tpu-v5-lite-podslice', 2,
                          ('1x1', '2x2', '2x4')),
        GKETPUAccelerator('tpu-v5p-slice', 3, ('2x2x1',)),
        GKETPUAccelerator('tpu-v6e-slice', 2, ('1x1', '2x2', '2x4')),
    )
}
# Chosen on the runtime evidence (runtimes.DEFAULT_ACCELERATOR_REASON).
DEFAULT_ACCELERATOR = runtimes.DEFAULT_ACCELERATOR
# Vertex AI: a pipeline step cannot carry these TPUs (vertex_tpu.py).

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


TPU_NODE_RETIRED_WARNING = (
    'the TPU-node style (Cloud TPU nodes: tf-version.cloud-tpus.google.com, '
    'cloud-tpus.google.com/<version>) is retired on GKE (end of life '
    '2025-04-25); use --tpu-style tpu-vm (the default) with --accelerator '
    'and --topology, e.g. tpu-v5-lite-podslice 2x4.')
TOLERATION_EFFECTS = ('NoSchedule', 'PreferNoSchedule', 'NoExecute')
# Kubernetes label keys ([prefix/]name) and values.
_LABEL_NAME = r'[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?'
_LABEL_KEY = re.compile(
    r'^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?'
    + _LABEL_NAME + '$')
_LABEL_VALUE = re.compile('^(' + _LABEL_NAME + ')?$')
# Kubernetes quantities as used for CPU and memory requests.
_QUANTITY = re.compile(r'^(\d+(\.\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$')
_QUANTITY_FACTORS = {
    None: 1, 'm': 1e-3, 'k': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15,
    'E': 1e18, 'Ki': 2**10, 'Mi': 2**20, 'Gi': 2**30, 'Ti': 2**40,
    'Pi': 2**50, 'Ei': 2**60}


class TPUSchedulingError(errors.TPUTrainerError, ValueError):
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
        f'{spec.max_chips_per_host}): request it with '
        f'tpu_slices.tpu_slice({accelerator!r}, {topology!r}) (one worker pod '
        'per host, driven by the trainer step); single-host values: '
        f'{", ".join(spec.single_host_topologies)}.')
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
  return TPUVMScheduling(accelerator=accelerator, topology=topology,
                         chips=chips)


def tpu_node(version: str = DEFAULT_TPU_NODE_VERSION,
             cores: int = DEFAULT_TPU_NODE_CORES,
             tf_version: Optional[str] = None) -> TPUNodeScheduling:
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
  return TPUNodeScheduling(version=version, cores=cores,
                           tf_version=tf_version)


@dataclasses.dataclass(frozen=True)
class Toleration:
  """A pod toleration. Build with `parse_toleration('KEY[=VALUE]:EFFECT')`."""
  key: str
  effect: str
  value: Optional[str] = None

  @property
  def operator(self) -> str:
    return 'Exists' if self.value is None else 'Equal'

  def to_dict(self) -> Dict[str, str]:
    """The Kubernetes toleration (also kfp-kubernetes' `Toleration`)."""
    toleration = {'key': self.key, 'operator': self.operator}
    if self.value is not None:
      toleration['value'] = self.value
    toleration['effect'] = self.effect
    return toleration

  def to_k8s(self) -> k8s_client.V1Toleration:
    return k8s_client.V1Toleration(key=self.key, operator=self.operator,
                                   value=self.value, effect=self.effect)


TPU_TOLERATION = Toleration(key=facts.TPU_RESOURCE, effect='NoSchedule')


def parse_toleration(text: str) -> Toleration:
  """`KEY=VALUE:EFFECT` (operator Equal) or `KEY:EFFECT` (operator Exists).

  The syntax of `kubectl taint`: e.g. `cloud.google.com/gke-spot=true:
  NoSchedule` tolerates GKE's Spot taint.

  Raises:
    TPUSchedulingError: naming the bad part and the accepted forms.
  """
  accepted = ('accepted forms: KEY=VALUE:EFFECT or KEY:EFFECT, EFFECT one of '
              f'{", ".join(TOLERATION_EFFECTS)}.')
  key_value, sep, effect = str(text).rpartition(':')
  if not sep or effect not in TOLERATION_EFFECTS:
    raise TPUSchedulingError(
        f'trainer-toleration {text!r} has no effect {"/".join(TOLERATION_EFFECTS)}'
        f' after the last ":"; {accepted}')
  key, eq, value = key_value.partition('=')
  if not _LABEL_KEY.match(key):
    raise TPUSchedulingError(
        f'trainer-toleration {text!r}: {key!r} is not a Kubernetes taint key; '
        f'{accepted}')
  if eq and not (value and _LABEL_VALUE.match(value)):
    raise TPUSchedulingError(
        f'trainer-toleration {text!r}: {value!r} is not a Kubernetes taint '
        f'value; {accepted}')
  return Toleration(key=key, effect=effect, value=value if eq else None)


def parse_node_selector(text: str) -> Tuple[str, str]:
  """`KEY=VALUE`: a node label the trainer pod must select.

  Raises:
    TPUSchedulingError: naming the bad part.
  """
  key, eq, value = str(text).partition('=')
  if not eq or not _LABEL_KEY.match(key) or not _LABEL_VALUE.match(value):
    raise TPUSchedulingError(
        f'trainer-node-selector {text!r} is not KEY=VALUE with a Kubernetes '
        'label key and value (e.g. cloud.google.com/gke-spot=true).')
  return key, value


def parse_quantity(text: str, what: str) -> str:
  """A positive Kubernetes quantity (`4`, `500m`, `16Gi`), as given.

  Raises:
    TPUSchedulingError: naming `what` (e.g. `trainer-cpu`).
  """
  match = _QUANTITY.match(str(text))
  if not match or quantity_value(text) <= 0:
    raise TPUSchedulingError(
        f'{what} {text!r} is not a positive Kubernetes quantity (e.g. 4, '
        '500m, 16Gi, 32G).')
  return text


def quantity_value(text: str) -> float:
  """The number a quantity stands for (cores, or bytes)."""
  match = _QUANTITY.match(text)
  return float(match.group(1)) * _QUANTITY_FACTORS[match.group(3)]


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


def _dims(topology: str) -> Tuple[int, ...]:
  if not isinstance(topology, str) or not re.fullmatch(r'[1-9]\d*(x[1-9]\d*)+',
                                                       topology):
    raise ValueError(topology)
  return tuple(int(d) for d in topology.split('x'))


def _chip_count(dims: Sequence[int]) -> int:
  return math.prod(dims)
