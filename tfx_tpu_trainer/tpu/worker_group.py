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
from tfx_tpu_trainer.tpu import kube_api
from tfx_tpu_trainer.training import slice_exit

__all__ = ['SPEC_ENV', 'POD_NAME_ENV', 'HOSTNAME_ENV', 'NAMESPACE_ENV',
           'NAMESPACE_FILE', 'NAME_PREFIX', 'GROUP_LABEL', 'DRIVER_LABEL',
           'JOB_TTL_SECS', 'DELETE_WAIT_SECS', 'WorkerGroupError',
           'WorkerGroupSpec', 'attempt_name', 'hostnames', 'StorageAccess',
           'storage_access', 'job_manifest', 'service_manifest', 'pod_owner',
           'RBAC_RULES', 'RBAC_NAME', 'RBAC_MANIFEST', 'rbac_manifests', 'Plan',
           'plan', 'announce', 'KubernetesGroups', 'launched']

SPEC_ENV = config_lib.WORKER_GROUP_ENV
# The driver pod's name, uncut: the downward API's metadata.name, which KFP
# sets on every step (v1: TFX's `add-pod-env` label; v2: the backend).
POD_NAME_ENV = 'KFP_POD_NAME'
# Kubernetes sets HOSTNAME to the pod's name cut to 63 characters.
HOSTNAME_ENV = 'HOSTNAME'
HOSTNAME_MAX = 63
NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace'
# The pod's namespace from the downward API (KFP v1 steps have it).
NAMESPACE_ENV = 'KFP_NAMESPACE'
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
    driver_start_timeout: seconds a worker waits for the driver's first
      word (the driver's whole wait for its workers, and then some).
  """
  hosts: int
  chips_per_host: int
  image: str
  node_selector: Tuple[Tuple[str, str], ...] = ()
  tolerations: Tuple[Tuple[Tuple[str, str], ...], ...] = ()
  env: Tuple[Tuple[str, str], ...] = ()
  port: int = config_lib.TPU_WORKER_PORT
  driver_timeout: int = 600
  driver_start_timeout: int = 2400

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
          driver_timeout=int(value.get('driver_timeout', 600)),
          driver_start_timeout=int(value.get('driver_start_timeout', 2400)))
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


def _label_value(text: str) -> str:
  """`text` as a label value: at most 63 characters, alphanumeric ends."""
  return text[:63].strip('-_.')


def _labels(name: str, driver_pod: str) -> Dict[str, str]:
  return {GROUP_LABEL: name, DRIVER_LABEL: _label_value(driver_pod)}


@dataclasses.dataclass(frozen=True)
class StorageAccess:
  """What the driver's pod has to reach storage, for the worker pods.

  The workers read the examples and write the checkpoints on `gs://`
  themselves: they run as the driver's service account (Workload Identity
  maps it to a Google service account) with its secret volumes, their
  mounts, and the environment that names them (`use_gcp_secret`'s
  GOOGLE_APPLICATION_CREDENTIALS) or comes from a secret.

  Attributes:
    service_account: the driver pod's service account, if any.
    volumes: its secret volumes (API dicts).
    mounts: the driver container's mounts of them.
    env: its variables pointing into them or read from a secret.
    env_from: its `envFrom` entries of secrets.
    image_pull_secrets: its pull secrets (the worker image's registry).
  """
  service_account: Optional[str] = None
  volumes: Tuple[Dict[str, Any], ...] = ()
  mounts: Tuple[Dict[str, Any], ...] = ()
  env: Tuple[Dict[str, Any], ...] = ()
  env_from: Tuple[Dict[str, Any], ...] = ()
  image_pull_secrets: Tuple[Dict[str, Any], ...] = ()

  def describe(self) -> str:
    parts = [f'service account {self.service_account or "default"}']
    mounted = {m['name']: m['mountPath'] for m in self.mounts}
    parts += [f'secret {v["secret"].get("secretName")} at '
              f'{mounted.get(v["name"], "(not mounted)")}'
              for v in self.volumes]
    parts += [f'env {e["name"]}' for e in self.env]
    parts += [f'env from secret {e["secretRef"].get("name")}'
              for e in self.env_from]
    return ', '.join(parts)


def _driver_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any]:
  """The trainer's container: the one given the group spec, else `main`."""
  containers = pod_spec.get('containers') or [{}]
  for container in containers:
    if any(e.get('name') == SPEC_ENV for e in container.get('env') or ()):
      return container
  return next((c for c in containers if c.get('name') == 'main'),
              containers[0])


def storage_access(pod: Mapping[str, Any]) -> StorageAccess:
  """What the driver pod (an API dict) has for storage (`StorageAccess`)."""
  spec = pod.get('spec') or {}
  container = _driver_container(spec)
  volumes = tuple(v for v in spec.get('volumes') or () if v.get('secret'))
  names = {v['name'] for v in volumes}
  mounts = tuple(dict(m, readOnly=True)
                 for m in container.get('volumeMounts') or ()
                 if m.get('name') in names)
  paths = tuple(m['mountPath'].rstrip('/') + '/' for m in mounts)
  env = tuple(
      e for e in container.get('env') or ()
      if ((e.get('valueFrom') or {}).get('secretKeyRef') or
          any(str(e.get('value', '')).startswith(p) for p in paths)))
  return StorageAccess(
      service_account=(spec.get('serviceAccountName') or
                       spec.get('serviceAccount')),
      volumes=volumes, mounts=mounts, env=env,
      env_from=tuple(e for e in container.get('envFrom') or ()
                     if e.get('secretRef')),
      image_pull_secrets=tuple(spec.get('imagePullSecrets') or ()))


def job_manifest(spec: WorkerGroupSpec, name: str, namespace: str,
                 driver_pod: str,
                 owner: Optional[Dict[str, Any]] = None,
                 access: StorageAccess = StorageAccess()) -> Dict[str, Any]:
  """The Indexed Job whose pod i serves the TPU of host i."""
  container = {
      'name': 'tpu-worker',
      'image': spec.image,
      'command': ['python', '-m', 'tfx_tpu_trainer.tpu.worker',
                  '--port', str(spec.port),
                  '--driver-timeout', str(spec.driver_timeout),
                  '--driver-start-timeout', str(spec.driver_start_timeout)],
      'ports': [{'containerPort': spec.port, 'name': 'tpu-worker'}],
      'resources': {'limits': {facts.TPU_RESOURCE: str(spec.chips_per_host)}},
      'env': [{'name': k, 'value': v} for k, v in spec.env] + list(access.env),
  }
  if access.mounts:
    container['volumeMounts'] = list(access.mounts)
  if access.env_from:
    container['envFrom'] = list(access.env_from)
  pod_spec = {
      'subdomain': name,
      'restartPolicy': 'Never',
      'nodeSelector': dict(spec.node_selector),
      'tolerations': [dict(t) for t in spec.tolerations],
      'containers': [container],
  }
  if access.service_account:
    pod_spec['serviceAccountName'] = access.service_account
  if access.volumes:
    pod_spec['volumes'] = list(access.volumes)
  if access.image_pull_secrets:
    pod_spec['imagePullSecrets'] = list(access.image_pull_secrets)
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


# What the driver does with the API (KubernetesGroups), nothing more: read
# its own pod (the owner reference's uid, its storage access), create, list
# and delete the Job and Service.
RBAC_RULES = (
    {'apiGroups': [''], 'resources': ['pods'], 'verbs': ['get']},
    {'apiGroups': [''], 'resources': ['services'],
     'verbs': ['list', 'create', 'delete']},
    {'apiGroups': ['batch'], 'resources': ['jobs'],
     'verbs': ['list', 'create', 'delete']},
)
RBAC_NAME = 'tfx-tpu-trainer-worker-group'
# The Role and RoleBinding as a file (rendered from rbac_manifests; a test
# keeps them equal).
RBAC_MANIFEST = 'tfx_tpu_trainer/kubeflow/rbac/tpu-worker-group.yaml'


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
  """The group of this attempt: where and under which name.

  Attributes:
    spec: the compiled worker group spec.
    name: the group's name (`attempt_name` of the driver pod).
    namespace: the driver pod's namespace.
    driver_pod: the driver pod's name.
    pod_name_from: the variable the pod's name came from.
  """
  spec: WorkerGroupSpec
  name: str
  namespace: str
  driver_pod: str
  pod_name_from: str = POD_NAME_ENV

  @property
  def hostnames(self) -> List[str]:
    return hostnames(self.spec, self.name, self.namespace)


def _driver_pod_name(environ: Mapping[str, str]) -> Tuple[str, str]:
  """(the driver pod's name, the variable it came from).

  Raises:
    WorkerGroupError: no name, or only a HOSTNAME that may be cut.
  """
  if environ.get(POD_NAME_ENV):
    return environ[POD_NAME_ENV], POD_NAME_ENV
  hostname = environ.get(HOSTNAME_ENV, '')
  if not hostname:
    raise WorkerGroupError(
        f'{SPEC_ENV} asks for a TPU worker group, but neither {POD_NAME_ENV} '
        f'nor {HOSTNAME_ENV} names the driver pod. Set {POD_NAME_ENV} from '
        'the downward API (env valueFrom fieldRef metadata.name), as KFP '
        'does on its steps.')
  if len(hostname) >= HOSTNAME_MAX:
    raise WorkerGroupError(
        f'{SPEC_ENV} asks for a TPU worker group, and only {HOSTNAME_ENV} '
        f'names the driver pod: {hostname!r} has {len(hostname)} characters, '
        'where Kubernetes cuts a pod\'s name for its hostname, so the pod '
        f'may not be found by it. Set {POD_NAME_ENV} from the downward API '
        '(env valueFrom fieldRef metadata.name), as KFP does on its steps.')
  return hostname, HOSTNAME_ENV


def _namespace(environ: Mapping[str, str], namespace_file: str) -> str:
  try:
    with open(namespace_file) as f:
      namespace = f.read().strip()
  except OSError as e:
    namespace = environ.get(NAMESPACE_ENV, '')
    if not namespace:
      raise WorkerGroupError(
          f'{SPEC_ENV} asks for a TPU worker group, but {namespace_file} '
          f'cannot be read ({e}) and {NAMESPACE_ENV} is not set: the trainer '
          'step must run in a Kubernetes pod with a service account token '
          'mounted.') from e
  if not namespace:
    raise WorkerGroupError(
        f'{SPEC_ENV} asks for a TPU worker group, but {namespace_file} is '
        'empty.')
  return namespace


def plan(environ: Optional[Mapping[str, str]] = None,
         namespace_file: str = NAMESPACE_FILE) -> Optional[Plan]:
  """This attempt's group, from the compiled spec; None without one.

  Raises:
    WorkerGroupError: a spec outside a pod (no pod name or namespace).
  """
  environ = os.environ if environ is None else environ
  text = environ.get(SPEC_ENV)
  if not text:
    return None
  spec = WorkerGroupSpec.from_json(text)
  pod, pod_name_from = _driver_pod_name(environ)
  namespace = _namespace(environ, namespace_file)
  return Plan(spec, attempt_name(pod), namespace, pod, pod_name_from)


def announce(group: Optional[Plan], environ=None) -> None:
  """Sets TPU_WORKER_HOSTNAMES to the group's names (what the driver reads)."""
  environ = os.environ if environ is None else environ
  if group is not None:
    environ[config_lib.TPU_WORKER_HOSTNAMES_ENV] = ','.join(group.hostnames)


def _api_error(what: str, error: BaseException) -> WorkerGroupError:
  """`what` failed, with what the API server said; the Role for a 403 only."""
  advice = ''
  if kube_api.status(error) == kube_api.FORBIDDEN:
    advice = (' The trainer step\'s service account needs the Role of '
              f'{RBAC_MANIFEST} in this namespace '
              '(docs/guide/tpu_slices.md, "GKE checklist"); '
              '`tfx-tpu-trainer tpu-check` in the driver pod lists what it '
              'may do.')
  elif kube_api.status(error) == kube_api.INVALID:
    advice = (' The API server refused the manifest: the message names '
              'the field (the GKE checklist in docs/guide/tpu_slices.md has '
              'the Kubernetes version the group needs).')
  return WorkerGroupError(
      f'{what}: the Kubernetes API answered {kube_api.describe_failure(error)}'
      f'.{advice}')


class KubernetesGroups:
  """Creates and deletes a group through the Kubernetes API.

  Args:
    api_client: a `kubernetes.client.ApiClient`; default: the pod's own
      (in-cluster), else kubeconfig's (`kube_api.api_client`).
  """

  def __init__(self, api_client: Any = None):
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    api_client = api_client or kube_api.api_client()
    self.core = client.CoreV1Api(api_client)
    self.batch = client.BatchV1Api(api_client)

  def driver_pod(self, group: Plan) -> Dict[str, Any]:
    """The driver pod as an API dict.

    Raises:
      WorkerGroupError: what the API said; for a 404, where the name came
        from.
    """
    try:
      pod = self.core.read_namespaced_pod(group.driver_pod, group.namespace)
    except Exception as e:  # pylint: disable=broad-except
      what = f'Reading the driver pod {group.driver_pod!r} in {group.namespace}'
      if kube_api.status(e) == kube_api.NOT_FOUND:
        what += (f' (its name from {group.pod_name_from}; is it this pod\'s '
                 'name, uncut?)')
      raise _api_error(what, e) from e
    return self.core.api_client.sanitize_for_serialization(pod)

  def create(self, group: Plan) -> None:
    """Creates the Service and the Job; an earlier one of this attempt is replaced.

    Raises:
      WorkerGroupError: what the API said, naming the call.
    """
    pod = self.driver_pod(group)
    owner = pod_owner(group.driver_pod, pod['metadata']['uid'])
    access = storage_access(pod)
    logging.info('TPU worker pods get the driver pod\'s storage access: %s.',
                 access.describe())
    service = service_manifest(group.spec, group.name, group.namespace,
                               group.driver_pod, owner)
    job = job_manifest(group.spec, group.name, group.namespace,
                       group.driver_pod, owner, access)
    if self._exists(group):
      logging.warning('TPU worker group %s exists already (an earlier try of '
                      'this attempt); replacing it.', group.name)
      self.delete(group)
    for what, create in (
        (f'Creating Service {group.name}',
         lambda: self.core.create_namespaced_service(group.namespace,
                                                     service)),
        (f'Creating Job {group.name}',
         lambda: self.batch.create_namespaced_job(group.namespace, job))):
      try:
        create()
      except Exception as e:  # pylint: disable=broad-except
        raise _api_error(f'{what} in {group.namespace}', e) from e

  def _exists(self, group: Plan) -> bool:
    selector = f'{GROUP_LABEL}={group.name}'
    try:
      return bool(self.batch.list_namespaced_job(
          group.namespace, label_selector=selector).items) or bool(
              self.core.list_namespaced_service(
                  group.namespace, label_selector=selector).items)
    except Exception as e:  # pylint: disable=broad-except
      raise _api_error(f'Listing the group {group.name} in {group.namespace}',
                       e) from e

  def delete(self, group: Plan) -> None:
    """Deletes the Job (and its pods) and the Service; waits until gone."""
    for what, delete in (
        (f'Deleting Job {group.name}',
         lambda: self.batch.delete_namespaced_job(
             group.name, group.namespace, propagation_policy='Foreground')),
        (f'Deleting Service {group.name}',
         lambda: self.core.delete_namespaced_service(group.name,
                                                     group.namespace))):
      try:
        delete()
      except Exception as e:  # pylint: disable=broad-except
        if kube_api.status(e) != kube_api.NOT_FOUND:
          raise _api_error(f'{what} in {group.namespace}', e) from e
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
  """The group exists inside, and is deleted after, however it ends.

  Also when the process is ended because training is stuck in TensorFlow
  (slice_exit.end_process).

  Raises:
    WorkerGroupError: the group could not be created (what the API said,
      and the Role only for a 403).
  """
  if group is None:
    yield
    return
  groups = groups or KubernetesGroups()
  logging.info('Creating TPU worker group %s (%d hosts) in %s: %s.',
               group.name, group.spec.hosts, group.namespace,
               ', '.join(group.hostnames))
  try:
    groups.create(group)
  except WorkerGroupError as e:
    with contextlib.suppress(Exception):
      groups.delete(group)
    raise WorkerGroupError(
        f'Could not create TPU worker group {group.name} in '
        f'{group.namespace}. {e}') from e

  def delete():
    logging.info('Deleting TPU worker group %s.', group.name)
    groups.delete(group)

  try:
    with slice_exit.cleanup_on_hard_exit(delete):
      yield
  finally:
    delete()
