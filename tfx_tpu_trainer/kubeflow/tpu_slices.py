"""Multi-host TPU slice requests on GKE and the worker group spec the trainer
step (the driver, a CPU pod) carries."""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from kfp import dsl

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.kubeflow import pod_requests
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.tpu import facts
from tfx_tpu_trainer.tpu import worker_group

__all__ = ['CHIPS_PER_HOST', 'RBAC_MANIFEST', 'MULTI_HOST_TOPOLOGIES',
           'TPUSliceScheduling', 'is_multi_host', 'tpu_slice', 'tpu_request']

CHIPS_PER_HOST = pod_requests.CHIPS_PER_HOST
# The Role the trainer step's service account needs (rendered from
# worker_group.rbac_manifests; a test keeps them equal).
RBAC_MANIFEST = worker_group.RBAC_MANIFEST
MULTI_HOST_TOPOLOGIES = pod_requests.MULTI_HOST_TOPOLOGIES
is_multi_host = pod_requests.is_multi_host


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


def tpu_slice(accelerator: str, topology: str) -> TPUSliceScheduling:
  """Validates a multi-host slice request (`pod_requests.tpu_slice_request`).

  Raises:
    scheduling.TPUSchedulingError: naming the accepted topologies.
  """
  accelerator, topology, chips = pod_requests.tpu_slice_request(accelerator,
                                                                topology)
  return TPUSliceScheduling(accelerator=accelerator, topology=topology,
                            chips=chips)


def tpu_request(accelerator: str, topology: Optional[str] = None,
                chips: Optional[int] = None):
  """A single-host request (`scheduling.tpu_vm`) or a multi-host slice.

  Raises:
    scheduling.TPUSchedulingError: naming the bad option.
  """
  multi_host, accelerator, topology, chips = pod_requests.tpu_request(
      accelerator, topology, chips)
  if multi_host:
    return TPUSliceScheduling(accelerator=accelerator, topology=topology,
                              chips=chips)
  return scheduling.TPUVMScheduling(accelerator=accelerator,
                                    topology=topology, chips=chips)
