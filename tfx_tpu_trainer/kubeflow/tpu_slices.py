"""Multi-host TPU slice requests on GKE and the worker group spec the trainer
step (the driver, a CPU pod) carries."""

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

from kfp import dsl

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.tpu import facts
from tfx_tpu_trainer.tpu import worker_group

__all__ = ['CHIPS_PER_HOST', 'RBAC_MANIFEST', 'MULTI_HOST_TOPOLOGIES',
           'TPUSliceScheduling', 'is_multi_host', 'tpu_slice', 'tpu_request']

CHIPS_PER_HOST = 4
# The Role the trainer step's service account needs (rendered from
# worker_group.rbac_manifests; a test keeps them equal).
RBAC_MANIFEST = worker_group.RBAC_MANIFEST
# Multi-host topologies of each accelerator (GKE's tables, the common ones).
MULTI_HOST_TOPOLOGIES: Dict[str, Tuple[str, ...]] = {
    'tpu-v4-podslice': ('2x2x2', '2x2x4', '2x4x4', '4x4x4', '4x4x8',
                        '4x8x8', '8x8x8'),
    'tpu-v5-lite-podslice': ('4x4', '4x8', '8x8', '8x16', '16x16'),
    'tpu-v5p-slice': ('2x2x2', '2x2x4', '2x4x4', '4x4x4', '4x4x8',
                      '4x8x8', '8x8x8'),
}


@dataclasses.dataclass(frozen=True)
class TPUSliceScheduling:
  """A validated multi-host slice request. Build with `tpu_slice()`.

  As a `TrainerPod.tpu` it puts nothing TPU on the driver's pod: the
  resources, selectors and tolerations are the worker pods'.
  """
  accelerator: str
  topology: str
  chips: int

  default_tpu_name = None

  @property
  def hosts(self) -> int:
    return self.chips // CHIPS_PER_HOST

  @property
  def resource_limits(self) -> Dict[str, str]:
    return {}  # The driver needs no TPU.

  @property
  def node_selector(self) -> Dict[str, str]:
    return {scheduling.ACCELERATOR_LABEL: self.accelerator,
            scheduling.TOPOLOGY_LABEL: self.topology}

  def apply(self, op: dsl.ContainerOp) -> dsl.ContainerOp:
    return op

  def describe(self) -> str:
    return (f'{self.hosts} worker pods x {facts.TPU_RESOURCE}: '
            f'{CHIPS_PER_HOST} on {self.accelerator} {self.topology} '
            '(multi-host slice; the trainer step drives them from a CPU pod)')

  def worker_group_spec(self, image: str, env: Dict[str, str],
                        node_selector: Sequence[Tuple[str, str]] = (),
                        tolerations: Sequence[scheduling.Toleration] = (),
                        driver_wait_secs: int = 0
                       ) -> worker_group.WorkerGroupSpec:
    """The spec of the worker pods (what the driver creates per attempt).

    A worker waits for the driver's first word the driver's whole wait for
    its workers (`driver_wait_secs`) plus its usual driver timeout.
    """
    selector = dict(self.node_selector)
    selector.update(dict(node_selector))
    all_tolerations: List[scheduling.Toleration] = [scheduling.TPU_TOLERATION]
    all_tolerations += [t for t in tolerations if t not in all_tolerations]
    return worker_group.WorkerGroupSpec(
        hosts=self.hosts, chips_per_host=CHIPS_PER_HOST, image=image,
        node_selector=tuple(sorted(selector.items())),
        tolerations=tuple(tuple(t.to_dict().items()) for t in all_tolerations),
        env=tuple(sorted(env.items())),
        port=config_lib.TPU_WORKER_PORT,
        driver_start_timeout=(driver_wait_secs +
                              worker_group.WorkerGroupSpec.driver_timeout))


def is_multi_host(accelerator: str, topology: Optional[str]) -> bool:
  """Whether `topology` of `accelerator` spans more than one host."""
  spec = scheduling.GKE_TPU_ACCELERATORS.get(accelerator)
  if spec is None or topology is None:
    return False
  try:
    dims = tuple(int(d) for d in topology.split('x'))
  except ValueError:
    return False
  return (len(dims) == spec.dimensions and
          math.prod(dims) > spec.max_chips_per_host)


def tpu_slice(accelerator: str, topology: str) -> TPUSliceScheduling:
  """Validates a multi-host slice request.

  Raises:
    scheduling.TPUSchedulingError: naming the accepted topologies.
  """
  accepted = MULTI_HOST_TOPOLOGIES.get(accelerator)
  if accepted is None:
    raise scheduling.TPUSchedulingError(
        f'accelerator {accelerator!r} has no multi-host slices this compiler '
        f'schedules; accepted: {", ".join(sorted(MULTI_HOST_TOPOLOGIES))}.')
  if topology not in accepted:
    raise scheduling.TPUSchedulingError(
        f'topology {topology!r} is not a multi-host topology of '
        f'{accelerator}; accepted values: {", ".join(accepted)} (single-host: '
        f'{", ".join(scheduling.GKE_TPU_ACCELERATORS[accelerator].single_host_topologies)}).')
  chips = math.prod(int(d) for d in topology.split('x'))
  return TPUSliceScheduling(accelerator=accelerator, topology=topology,
                            chips=chips)


def tpu_request(accelerator: str, topology: Optional[str] = None,
                chips: Optional[int] = None):
  """A single-host request (`scheduling.tpu_vm`) or a multi-host slice.

  Raises:
    scheduling.TPUSchedulingError: naming the bad option.
  """
  if not is_multi_host(accelerator, topology):
    return scheduling.tpu_vm(accelerator, topology, chips)
  request = tpu_slice(accelerator, topology)
  if chips is not None and chips != CHIPS_PER_HOST:
    raise scheduling.TPUSchedulingError(
        f'chips {chips} does not fit the multi-host slice {topology} of '
        f'{accelerator}: each of its {request.hosts} worker pods requests its '
        f'host\'s {CHIPS_PER_HOST} chips; leave --chips out.')
  return request
