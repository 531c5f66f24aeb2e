"""The worker group of a compiled multi-host step: names, lifecycle, RBAC.

The Kubernetes API does not run here: `InMemoryApi` keeps the objects the
driver creates, with the API's answers for a name taken (409) or missing
(404), so the lifecycle (one group per attempt, deleted however training
ends) is checked through `KubernetesGroups` itself.
"""

import os
import types

import pytest
import yaml

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.tpu import worker_group
from tfx_tpu_trainer.training import tpu_slice

from tests.conftest import REPO_ROOT

SPEC = worker_group.WorkerGroupSpec(
    hosts=4, chips_per_host=4, image='gcr.io/p/tpu-pjrt:1',
    node_selector=(('cloud.google.com/gke-tpu-accelerator',
                    'tpu-v5-lite-podslice'),
                   ('cloud.google.com/gke-tpu-topology', '4x4')),
    tolerations=((('key', 'google.com/tpu'), ('operator', 'Exists'),
                  ('effect', 'NoSchedule')),),
    env=(('TFX_TPU_TRAINER_TPU_RUNTIME', 'pjrt'),))
DRIVER_POD = 'taxi-tpu-x7k2p-1234567890'


class ApiError(Exception):

  def __init__(self, status):
    super().__init__(f'HTTP {status}')
    self.status = status


class InMemoryApi:
  """CoreV1Api and BatchV1Api, for the calls KubernetesGroups makes."""

  def __init__(self):
    self.objects = {}  # (kind, namespace, name) -> manifest
    self.created = []

  def read_namespaced_pod(self, name, namespace):
    return types.SimpleNamespace(metadata=types.SimpleNamespace(
        uid=f'uid-of-{name}'))

  def _create(self, kind, namespace, body):
    key = (kind, namespace, body['metadata']['name'])
    if key in self.objects:
      raise ApiError(409)
    self.objects[key] = body
    self.created.append(key)

  def _delete(self, kind, name, namespace):
    if self.objects.pop((kind, namespace, name), None) is None:
      raise ApiError(404)

  def _list(self, kind, namespace, label_selector):
    key, value = label_selector.split('=')
    return types.SimpleNamespace(items=[
        body for (k, ns, _), body in self.objects.items()
        if k == kind and ns == namespace and
        body['metadata']['labels'].get(key) == value])

  def create_namespaced_service(self, namespace, body):
    self._create('Service', namespace, body)

  def create_namespaced_job(self, namespace, body):
    self._create('Job', namespace, body)

  def delete_namespaced_service(self, name, namespace):
    self._delete('Service', name, namespace)

  def delete_namespaced_job(self, name, namespace, propagation_policy=None):
    assert propagation_policy == 'Foreground'  # The pods go with the Job.
    self._delete('Job', name, namespace)

  def list_namespaced_service(self, namespace, label_selector):
    return self._list('Service', namespace, label_selector)

  def list_namespaced_job(self, namespace, label_selector):
    return self._list('Job', namespace, label_selector)


@pytest.fixture
def group(tmp_path):
  namespace_file = tmp_path / 'namespace'
  namespace_file.write_text('team-a\n')
  return worker_group.plan(
      {worker_group.SPEC_ENV: SPEC.to_json(),
       worker_group.POD_NAME_ENV: DRIVER_POD}, str(namespace_file))


def test_the_driver_resolves_the_dns_names_of_the_group(group):
  environ = {}
  worker_group.announce(group, environ)
  name = worker_group.attempt_name(DRIVER_POD)
  expected = [f'{name}-{i}.{name}.team-a.svc:8470' for i in range(4)]
  assert environ['TPU_WORKER_HOSTNAMES'] == ','.join(expected)
  # What the trainer then drives: exactly those, in task order.
  config = config_lib.TrainerConfig.from_custom_config({}, environ=environ)
  assert config.use_tpu
  assert list(tpu_slice.worker_addresses(config, environ)) == expected
  # The manifests give pod i that name: <job>-<i> in the Service's subdomain.
  job = worker_group.job_manifest(SPEC, name, 'team-a', DRIVER_POD)
  service = worker_group.service_manifest(SPEC, name, 'team-a', DRIVER_POD)
  assert job['spec']['completionMode'] == 'Indexed'
  assert job['spec']['completions'] == job['spec']['parallelism'] == 4
  assert job['spec']['template']['spec']['subdomain'] == service[
      'metadata']['name'] == job['metadata']['name'] == name
  assert service['spec']['clusterIP'] == 'None'
  assert service['spec']['publishNotReadyAddresses'] is True
  assert service['spec']['selector'].items() <= job['spec']['template'][
      'metadata']['labels'].items()
  assert len(f'{name}-{SPEC.hosts - 1}') <= 63  # A pod hostname's limit.


def test_the_group_exists_only_while_training_and_is_owned_by_the_driver(
    group):
  api = InMemoryApi()
  groups = worker_group.KubernetesGroups(api, api)
  with worker_group.launched(group, groups):
    job = api.objects[('Job', 'team-a', group.name)]
    service = api.objects[('Service', 'team-a', group.name)]
    for body in (job, service):
      assert body['metadata']['ownerReferences'] == [{
          'apiVersion': 'v1', 'kind': 'Pod', 'name': DRIVER_POD,
          'uid': f'uid-of-{DRIVER_POD}', 'blockOwnerDeletion': False,
          'controller': False}]
    container = job['spec']['template']['spec']['containers'][0]
    assert container['command'][:3] == ['python', '-m',
                                        'tfx_tpu_trainer.tpu.worker']
    assert container['resources']['limits'] == {'google.com/tpu': '4'}
  assert api.objects == {}


def test_the_group_is_deleted_when_training_fails(group):
  api = InMemoryApi()
  with pytest.raises(RuntimeError, match='training failed'):
    with worker_group.launched(group, worker_group.KubernetesGroups(api, api)):
      raise RuntimeError('training failed')
  assert api.objects == {}


def test_a_second_try_in_one_attempt_replaces_the_group_never_doubles_it(
    group):
  api = InMemoryApi()
  groups = worker_group.KubernetesGroups(api, api)
  groups.create(group)  # An earlier try in this pod, never cleaned up.
  with worker_group.launched(group, groups):
    assert len(api.objects) == 2  # One Job and one Service, not two each.
  assert api.objects == {}
  # An Argo retry is a new pod: a new name, so never the old group.
  assert worker_group.attempt_name(DRIVER_POD + 'r') != group.name


def test_a_spec_outside_a_pod_is_refused(tmp_path):
  with pytest.raises(worker_group.WorkerGroupError, match='cannot be read'):
    worker_group.plan({worker_group.SPEC_ENV: SPEC.to_json(),
                       worker_group.POD_NAME_ENV: DRIVER_POD},
                      str(tmp_path / 'absent'))
  with pytest.raises(worker_group.WorkerGroupError, match='recompile'):
    worker_group.plan({worker_group.SPEC_ENV: '{"hosts": 2}'},
                      str(tmp_path / 'absent'))
  assert worker_group.plan({}) is None


def test_the_shipped_rbac_manifest_is_the_rendered_one():
  path = os.path.join(REPO_ROOT, 'tfx_tpu_trainer', 'kubeflow', 'rbac',
                      'tpu-worker-group.yaml')
  with open(path) as f:
    assert list(yaml.safe_load_all(f)) == worker_group.rbac_manifests()
  # Every call KubernetesGroups makes is allowed by the Role.
  rules = {(rule['apiGroups'][0], resource): set(rule['verbs'])
           for rule in worker_group.RBAC_RULES
           for resource in rule['resources']}
  assert rules[('', 'pods')] >= {'get'}
  assert rules[('', 'services')] >= {'create', 'delete', 'list'}
  assert rules[('batch', 'jobs')] >= {'create', 'delete', 'list'}
