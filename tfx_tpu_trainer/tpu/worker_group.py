"""The worker pods of a compiled multi-host step (Indexed Job, headless Service):
manifests, DNS names, created per attempt and deleted after training."""

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from absl import logging

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.tpu import facts

__all__ = ['SPEC_ENV', 'POD_NAME_ENV', 'NAMESPACE_FILE', 'NAME_PREFIX',
           'GROUP_LABEL', 'DRIVER_LABEL', 'JOB_TTL_SECS',
           'DELETE_WAIT_SECS', 'WorkerGroupError', 'WorkerGroupSpec',
           'attempt_name', 'hostnames', 'job_manifest', 'service_manifest',
           'pod_owner', 'RBAC_RULES', 'RBAC_NAME', 'rbac_manifests', 'Plan',
           'plan', 'announce', 'KubernetesGroups', 'launched']

SPEC_ENV = 'TFX_TPU_TRAINER_WORKER_GROUP'
# The driver pod's name: Kubernetes sets HOSTNAME to it.
POD_NAME_ENV = 'HOSTNAME'
NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace'
NAME_PREFIX = 'tpu-workers-'
GROUP_LABEL = 'tfx-tpu-trainer/worker-group'
DRIVER_LABEL = 'tfx-tpu-trainer/driver-pod'
JOB_TTL_SECS = 600
DELETE_WAIT_SECS = 120


class WorkerGroupError(errors.TPUTrainerError, RuntimeError):
  """The worker group could not be created or deleted."""


@dataclasses.dataclass(frozen=True)
class WorkerGroupSpec:
  """What every worker pod of the slice gets (written by the compile).

  Attributes:
    hosts: pods, one per host of the slice.
    chips_per_host: each pod's `google.com/tpu` limit.
    image: the worker image (the TPU image).
    node_selector: label -> value (the slice's accelerator and topology).
    tolerations: Kubernetes tolerations (dicts).
    env: the TPU runtime's environment (name, value) pairs.
    port: the worker server's port.
    driver_timeout: seconds a worker waits without a driver heartbeat.
  """
  hosts: int
  chips_per_host: int
  image: str
  node_selector: Tuple[Tuple[str, str], ...] = ()
  tolerations: Tuple[Tuple[Tuple[str, str], ...], ...] = ()
  env: Tuple[Tuple[str, str], ...] = ()
  port: int = config_lib.TPU_WORKER_PORT
  driver_timeout: int = 600

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> 'WorkerGroupSpec':
    """Raises WorkerGroupError naming the variable when it does not parse."""
    try:
      value = json.loads(text)
      return cls(
          hosts=int(value['hosts']),
          chips_per_host=int(value['chips_per_host']),
          image=str(value['image']),
          node_selector=tuple(tuple(p) for p in value.get('node_selector',
                                                          ())),
          tolerations=tuple(tuple(tuple(p) for p in t)
                            for t in value.get('tolerations', ())),
          env=tuple(tuple(p) for p in value.get('env', ())),
          port=int(value.get('port', config_lib.TPU_WORKER_PORT)),
          driver_timeout=int(value.get('driver_timeout', 600)))
    except (ValueError, KeyError, TypeError) as e:
      raise WorkerGroupError(
          f'{SPEC_ENV} is not a worker group spec ({type(e).__name__}: {e}): '
          f'{text[:200]!r}. It is written by tfx-tpu-trainer compile; '
          'recompile the pipeline.') from e


def attempt_name(pod_name: str) -> str:
  """The group's name for the attempt that runs in `pod_name`.

  A DNS label short enough for `<name>-<index>` (63 characters).
  """
  digest = hashlib.sha256(pod_name.encode()).hexdigest()[:12]
  return NAME_PREFIX + digest


def hostnames(spec: WorkerGroupSpec, name: str, namespace: str) -> List[str]:
  """`<name>-<i>.<name>.<namespace>.svc:<port>`, pod i's DNS name."""
  return [f'{name}-{i}.{name}.{namespace}.svc:{spec.port}'
          for i in range(spec.hosts)]


def _labels(name: str, driver_pod: str) -> Dict[str, str]:
  return {GROUP_LABEL: name, DRIVER_LABEL: driver_pod[:63]}


def job_manifest(spec: WorkerGroupSpec, name: str, namespace: str,
                 driver_pod: str,
                 owner: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
  """The Indexed Job whose pod i serves the TPU of host i."""
  container = {
      'name': 'tpu-worker',
      'image': spec.image,
      'command': ['python', '-m', 'tfx_tpu_trainer.tpu.worker',
                  '--port', str(spec.port),
                  '--driver-timeout', str(spec.driver_timeout)],
      'ports': [{'containerPort': spec.port, 'name': 'tpu-worker'}],
      'resources': {'limits': {facts.TPU_RESOURCE: str(spec.chips_per_host)}},
      'env': [{'name': k, 'value': v} for k, v in spec.env],
  }
  pod_spec = {
      'subdomain': name,
      'restartPolicy': 'Never',
      'nodeSelector': dict(spec.node_selector),
      'tolerations': [dict(t) for t in spec.tolerations],
      'containers': [container],
  }
  return {
      'apiVersion': 'batch/v1',
      'kind': 'Job',
      'metadata': _metadata(name, namespace, driver_pod, owner),
      'spec': {
          'completionMode': 'Indexed',
          'completions': spec.hosts,
          'parallelism': spec.hosts,
          'backoffLimit': 0,
          'ttlSecondsAfterFinished': JOB_TTL_SECS,
          'template': {
              'metadata': {'labels': _labels(name, driver_pod)},
              'spec': pod_spec,
          },
      },
  }


def service_manifest(spec: WorkerGroupSpec, name: str, namespace: str,
                     driver_pod: str,
                     owner: Optional[Dict[str, Any]] = None
                    ) -> Dict[str, Any]:
  """The headless Service that gives pod i its DNS name."""
  return {
      'apiVersion': 'v1',
      'kind': 'Service',
      'metadata': _metadata(name, namespace, driver_pod, owner),
      'spec': {
          'clusterIP': 'None',
          'publishNotReadyAddresses': True,
          'selector': {GROUP_LABEL: name},
          'ports': [{'name': 'tpu-worker', 'port': spec.port,
                     'targetPort': spec.port}],
      },
  }


def _metadata(name: str, namespace: str, driver_pod: str,
              owner: Optional[Dict[str, Any]]) -> Dict[str, Any]:
  metadata = {'name': name, 'namespace': namespace,
              'labels': _labels(name, driver_pod)}
  if owner:
    metadata['ownerReferences'] = [owner]
  return metadata


def pod_owner(pod_name: str, pod_uid: str) -> Dict[str, Any]:
  """An ownerReference to the driver pod: its deletion deletes the group."""
  return {'apiVersion': 'v1', 'kind': 'Pod', 'name': pod_name,
          'uid': pod_uid, 'blockOwnerDeletion': False, 'controller': False}


# What the driver does with the API (KubernetesGroups): read its own pod
# (the owner reference's uid), create, list and delete the Job and Service.
RBAC_RULES = (
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get']},
    {'apiGroups': [''], 'resources': ['services'],
     'verbs': ['get', 'list', 'create', 'delete']},
    {'apiGroups': ['batch'], 'resources': ['jobs'],
     'verbs': ['get', 'list', 'create', 'delete']},
)
RBAC_NAME = 'tfx-tpu-trainer-worker-group'


def rbac_manifests(namespace: str = 'kubeflow',
                   service_account: str = 'pipeline-runner'
                  ) -> List[Dict[str, Any]]:
  """The Role and RoleBinding the trainer step's service account needs.

  Defaults: KFP's standalone install (namespace `kubeflow`, steps run as
  `pipeline-runner`); a multi-user install runs steps in the user's
  namespace as `default-editor`.
  """
  return [
      {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'Role',
       'metadata': {'name': RBAC_NAME, 'namespace': namespace},
       'rules': [dict(rule) for rule in RBAC_RULES]},
      {'apiVersion': 'rbac.authorization.k8s.io/v1', 'kind': 'RoleBinding',
       'metadata': {'name': RBAC_NAME, 'namespace': namespace},
       'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role',
                   'name': RBAC_NAME},
       'subjects': [{'kind': 'ServiceAccount', 'name': service_account,
                     'namespace': namespace}]},
  ]


@dataclasses.dataclass(frozen=True)
class Plan:
  """The group of this attempt: where and under which name."""
  spec: WorkerGroupSpec
  name: str
  namespace: str
  driver_pod: str

  @property
  def hostnames(self) -> List[str]:
    return hostnames(self.spec, self.name, self.namespace)


def plan(environ: Optional[Mapping[str, str]] = None,
         namespace_file: str = NAMESPACE_FILE) -> Optional[Plan]:
  """This attempt's group, from the compiled spec; None without one.

  Raises:
    WorkerGroupError: a spec outside a pod (no HOSTNAME or namespace).
  """
  environ = os.environ if environ is None else environ
  text = environ.get(SPEC_ENV)
  if not text:
    return None
  spec = WorkerGroupSpec.from_json(text)
  pod = environ.get(POD_NAME_ENV)
  try:
    with open(namespace_file) as f:
      namespace = f.read().strip()
  except OSError as e:
    raise WorkerGroupError(
        f'{SPEC_ENV} asks for a TPU worker group, but {namespace_file} '
        f'cannot be read ({e}): the trainer step must run in a Kubernetes '
        'pod with a service account token mounted.') from e
  if not pod or not namespace:
    raise WorkerGroupError(
        f'{SPEC_ENV} asks for a TPU worker group, but the pod name '
        f'({POD_NAME_ENV}) or the namespace is empty.')
  return Plan(spec, attempt_name(pod), namespace, pod)


def announce(group: Optional[Plan], environ=None) -> None:
  """Sets TPU_WORKER_HOSTNAMES to the group's names (what the driver reads)."""
  environ = os.environ if environ is None else environ
  if group is not None:
    environ[config_lib.TPU_WORKER_HOSTNAMES_ENV] = ','.join(group.hostnames)


class KubernetesGroups:
  """Creates and deletes a group through the Kubernetes API (in-cluster)."""

  def __init__(self, core_api: Any = None, batch_api: Any = None):
    if core_api is None or batch_api is None:
      from kubernetes import client, config  # pylint: disable=g-import-not-at-top
      config.load_incluster_config()
      core_api, batch_api = client.CoreV1Api(), client.BatchV1Api()
    self.core = core_api
    self.batch = batch_api

  def owner(self, group: Plan) -> Dict[str, Any]:
    pod = self.core.read_namespaced_pod(group.driver_pod, group.namespace)
    return pod_owner(group.driver_pod, pod.metadata.uid)

  def create(self, group: Plan) -> None:
    """Creates the Service and the Job; an earlier one of this attempt is replaced."""
    owner = self.owner(group)
    service = service_manifest(group.spec, group.name, group.namespace,
                               group.driver_pod, owner)
    job = job_manifest(group.spec, group.name, group.namespace,
                       group.driver_pod, owner)
    if self._exists(group):
      logging.warning('TPU worker group %s exists already (an earlier try of '
                      'this attempt); replacing it.', group.name)
      self.delete(group)
    self.core.create_namespaced_service(group.namespace, service)
    self.batch.create_namespaced_job(group.namespace, job)

  def _exists(self, group: Plan) -> bool:
    return bool(self.batch.list_namespaced_job(
        group.namespace,
        label_selector=f'{GROUP_LABEL}={group.name}').items) or bool(
            self.core.list_namespaced_service(
                group.namespace,
                label_selector=f'{GROUP_LABEL}={group.name}').items)

  def delete(self, group: Plan) -> None:
    """Deletes the Job (and its pods) and the Service; waits until gone."""
    for delete in (
        lambda: self.batch.delete_namespaced_job(
            group.name, group.namespace, propagation_policy='Foreground'),
        lambda: self.core.delete_namespaced_service(group.name,
                                                    group.namespace)):
      try:
        delete()
      except Exception as e:  # pylint: disable=broad-except
        if getattr(e, 'status', None) != 404:
          raise
    start = time.monotonic()
    while self._exists(group):
      if time.monotonic() - start > DELETE_WAIT_SECS:
        raise WorkerGroupError(
            f'TPU worker group {group.name} in {group.namespace} was still '
            f'there {DELETE_WAIT_SECS} s after its deletion; delete it with '
            f'kubectl delete job,service -l {GROUP_LABEL}={group.name}.')
      time.sleep(2)


@contextlib.contextmanager
def launched(group: Optional[Plan],
             groups: Optional[KubernetesGroups] = None) -> Iterator[None]:
  """The group exists inside, and is deleted after, however it ends."""
  if group is None:
    yield
    return
  groups = groups or KubernetesGroups()
  logging.info('Creating TPU worker group %s (%d hosts) in %s: %s.',
               group.name, group.spec.hosts, group.namespace,
               ', '.join(group.hostnames))
  try:
    groups.create(group)
  except Exception as e:  # pylint: disable=broad-except
    with contextlib.suppress(Exception):
      groups.delete(group)
    raise WorkerGroupError(
        f'Could not create TPU worker group {group.name} in '
        f'{group.namespace}: {type(e).__name__}: {errors.first_line(e)}. The '
        'trainer step\'s service account needs the Role of '
        'kubeflow/rbac/tpu-worker-group.yaml (docs/guide/tpu_slices.md, '
        '"What a cluster admin applies").') from e
  try:
    yield
  finally:
    logging.info('Deleting TPU worker group %s.', group.name)
    groups.delete(group)
