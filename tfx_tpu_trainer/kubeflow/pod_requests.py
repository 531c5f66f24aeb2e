"""What the trainer pod may request, checked without kfp, TFX or TensorFlow."""

import dataclasses
import importlib.metadata
import math
import re
from typing import Dict, Optional, Sequence, Tuple

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.tpu import runtimes

__all__ = ['TPUSchedulingError', 'GKETPUAccelerator', 'GKE_TPU_ACCELERATORS',
           'DEFAULT_ACCELERATOR', 'CHIPS_PER_HOST', 'MULTI_HOST_TOPOLOGIES',
           'TPU_NODE_CORES', 'TPU_NODE_VERSIONS', 'DEFAULT_TPU_NODE_VERSION',
           'DEFAULT_TPU_NODE_CORES', 'TPU_NODE_RETIRED_WARNING',
           'TOLERATION_EFFECTS', 'default_tf_version', 'tpu_vm_request',
           'tpu_slice_request', 'is_multi_host', 'tpu_request',
           'tpu_node_request', 'Toleration', 'parse_toleration',
           'parse_node_selector', 'parse_quantity', 'quantity_value']


class TPUSchedulingError(errors.TPUTrainerError, ValueError):
  """A TPU scheduling option (accelerator, topology, chips, ...) is invalid."""


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

# A host of a multi-host slice has four chips.
CHIPS_PER_HOST = 4
# Multi-host topologies of each accelerator (GKE's tables, the common ones).
MULTI_HOST_TOPOLOGIES: Dict[str, Tuple[str, ...]] = {
    'tpu-v4-podslice': ('2x2x2', '2x2x4', '2x4x4', '4x4x4', '4x4x8',
                        '4x8x8', '8x8x8'),
    'tpu-v5-lite-podslice': ('4x4', '4x8', '8x8', '8x16', '16x16'),
    'tpu-v5p-slice': ('2x2x2', '2x2x4', '2x4x4', '4x4x4', '4x4x8',
                      '4x8x8', '8x8x8'),
}

# TPU node style (`kfp.gcp.use_tpu`): resource `cloud-tpus.google.com/<v>`.
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


def tpu_vm_request(accelerator: str = DEFAULT_ACCELERATOR,
                   topology: Optional[str] = None,
                   chips: Optional[int] = None) -> Tuple[str, str, int]:
  """A single-host GKE TPU VM request, checked: (accelerator, topology, chips).

  Args:
    accelerator: a key of `GKE_TPU_ACCELERATORS`.
    topology: a single-host topology of the accelerator (default: its
      largest, e.g. `2x4` for v5e).
    chips: the `google.com/tpu` limit (default: the topology's chip count).

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
  return accelerator, topology, chips


def is_multi_host(accelerator: str, topology: Optional[str]) -> bool:
  """Whether `topology` of `accelerator` spans more than one host."""
  spec = GKE_TPU_ACCELERATORS.get(accelerator)
  if spec is None or topology is None:
    return False
  try:
    dims = tuple(int(d) for d in topology.split('x'))
  except ValueError:
    return False
  return (len(dims) == spec.dimensions and
          math.prod(dims) > spec.max_chips_per_host)


def tpu_slice_request(accelerator: str, topology: str) -> Tuple[str, str, int]:
  """A multi-host slice request, checked: (accelerator, topology, chips).

  Raises:
    TPUSchedulingError: naming the accepted topologies.
  """
  accepted = MULTI_HOST_TOPOLOGIES.get(accelerator)
  if accepted is None:
    raise TPUSchedulingError(
        f'accelerator {accelerator!r} has no multi-host slices this compiler '
        f'schedules; accepted: {", ".join(sorted(MULTI_HOST_TOPOLOGIES))}.')
  if topology not in accepted:
    raise TPUSchedulingError(
        f'topology {topology!r} is not a multi-host topology of '
        f'{accelerator}; accepted values: {", ".join(accepted)} (single-host: '
        f'{", ".join(GKE_TPU_ACCELERATORS[accelerator].single_host_topologies)}).')
  return accelerator, topology, math.prod(int(d) for d in topology.split('x'))


def tpu_request(accelerator: str, topology: Optional[str] = None,
                chips: Optional[int] = None) -> Tuple[bool, str, str, int]:
  """A single-host request or a multi-host slice, checked.

  Returns:
    (multi-host, accelerator, topology, chips of the whole request).

  Raises:
    TPUSchedulingError: naming the bad option.
  """
  if not is_multi_host(accelerator, topology):
    return (False,) + tpu_vm_request(accelerator, topology, chips)
  request = tpu_slice_request(accelerator, topology)
  if chips is not None and chips != CHIPS_PER_HOST:
    raise TPUSchedulingError(
        f'chips {chips} does not fit the multi-host slice {topology} of '
        f'{accelerator}: each of its {request[2] // CHIPS_PER_HOST} worker '
        f'pods requests its host\'s {CHIPS_PER_HOST} chips; leave --chips out.')
  return (True,) + request


def tpu_node_request(version: str = DEFAULT_TPU_NODE_VERSION,
                     cores: int = DEFAULT_TPU_NODE_CORES,
                     tf_version: Optional[str] = None
                    ) -> Tuple[str, int, str]:
  """A GKE Cloud TPU node request, checked: (version, cores, tf_version).

  Args:
    version: `v2`, `v3`, `preemptible-v2` or `preemptible-v3`.
    cores: 8 for one TPU device, or a Pod slice size of that version.
    tf_version: the Cloud TPU runtime's TensorFlow version (default: the
      installed TensorFlow's, which the TPU server must match).

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
  return version, cores, tf_version


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

  def to_k8s(self):
    """The toleration as the Kubernetes client's `V1Toleration`."""
    from kubernetes import client as k8s_client  # pylint: disable=g-import-not-at-top
    return k8s_client.V1Toleration(key=self.key, operator=self.operator,
                                   value=self.value, effect=self.effect)


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


def _dims(topology: str) -> Tuple[int, ...]:
  if not isinstance(topology, str) or not re.fullmatch(r'[1-9]\d*(x[1-9]\d*)+',
                                                       topology):
    raise ValueError(topology)
  return tuple(int(d) for d in topology.split('x'))


def _chip_count(dims: Sequence[int]) -> int:
  return math.prod(dims)
