"""The worker group of a compiled multi-host step: names, lifecycle, RBAC.

`KubernetesGroups` talks through the real `kubernetes` client to an API
server stand-in (tests/fixtures/kube_api_server.py) that authorises each
call against the Role, validates manifests against the Kubernetes 1.31
schemas and answers 403/404/409/422 as an API server does. The driver pods
it reads are those Argo makes of compiled steps.
"""

import os

import pytest
import yaml

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.tpu import worker_group
from tfx_tpu_trainer.training import tpu_slice

from tests.conftest import REPO_ROOT
from tests.fixtures import kube_api_server
from tests.fixtures import slice_steps

SPEC = worker_group.WorkerGroupSpec(
    hosts=4, chips_per_host=4, image='gcr.io/p/tpu-pjrt:1',
    node_selector=(('cloud.google.com/gke-tpu-accelerator',
                    'tpu-v5-lite-podslice'),
                   ('cloud.google.com/gke-tpu-topology', '4x4')),
    tolerations=((('key', 'google.com/tpu'), ('operator', 'Exists'),
                  ('effect', 'NoSchedule')),),
    env=(('TFX_TPU_TRAINER_TPU_RUNTIME', 'pjrt'),))
NAMESPACE = 'team-a'
# A KFP v2 driver pod's name: `<pipeline>-<run hash>-system-container-impl`
# style names pass 63 characters, which HOSTNAME is cut to.
DRIVER_POD = ('taxi-chicago-tips-tpu-training-pipeline-x7k2p-system-container-'
              'impl-3141592653')


def _driver_pod(name=DRIVER_POD, service_account='default-editor',
                container=None, volumes=()):
  container = container or {'name': 'main', 'image': 'gcr.io/p/tfx:1', 'env': [
      {'name': worker_group.SPEC_ENV, 'value': SPEC.to_json()}]}
  return kube_api_server.driver_pod_from_argo_step(
      {'container': container, 'volumes': list(volumes)}, name, NAMESPACE,
      service_account)


def _plan(tmp_path, environ=None):
  namespace_file = tmp_path / 'namespace'
  namespace_file.write_text(NAMESPACE + '\n')
  environ = environ or {worker_group.SPEC_ENV: SPEC.to_json(),
                        worker_group.POD_NAME_ENV: DRIVER_POD,
                        worker_group.HOSTNAME_ENV: DRIVER_POD[:63]}
  return worker_group.plan(environ, str(namespace_file))


@pytest.fixture
def api():
  with kube_api_server.KubeApiServer(NAMESPACE, 'default-editor') as server:
    server.add_pod(_driver_pod())
    yield server


@pytest.fixture
def group(tmp_path):
  return _plan(tmp_path)


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
    group, api):
  groups = worker_group.KubernetesGroups(api.api_client())
  with worker_group.launched(group, groups):
    job, = api.kind('jobs')
    service, = api.kind('services')
    uid = api.objects[('pods', NAMESPACE, DRIVER_POD)]['metadata']['uid']
    for body in (job, service):
      assert body['metadata']['ownerReferences'] == [{
          'apiVersion': 'v1', 'kind': 'Pod', 'name': DRIVER_POD,
          'uid': uid, 'blockOwnerDeletion': False, 'controller': False}]
    container = job['spec']['template']['spec']['containers'][0]
    assert container['command'][:3] == ['python', '-m',
                                        'tfx_tpu_trainer.tpu.worker']
    assert container['resources']['limits'] == {'google.com/tpu': '4'}
  assert api.kind('jobs') == api.kind('services') == []


def test_the_group_is_deleted_when_training_fails(group, api):
  with pytest.raises(RuntimeError, match='training failed'):
    with worker_group.launched(
        group, worker_group.KubernetesGroups(api.api_client())):
      raise RuntimeError('training failed')
  assert api.kind('jobs') == api.kind('services') == []


def test_a_second_try_in_one_attempt_replaces_the_group_never_doubles_it(
    group, api):
  groups = worker_group.KubernetesGroups(api.api_client())
  groups.create(group)  # An earlier try in this pod, never cleaned up.
  with worker_group.launched(group, groups):
    assert len(api.kind('jobs')) == len(api.kind('services')) == 1
  assert api.kind('jobs') == api.kind('services') == []
  # An Argo retry is a new pod: a new name, so never the old group.
  assert worker_group.attempt_name(DRIVER_POD + 'r') != group.name


def test_the_driver_finds_its_pod_by_its_uncut_name(tmp_path, api):
  # Kubernetes sets HOSTNAME to the pod's name cut to 63 characters; KFP
  # sets KFP_POD_NAME to the whole name (the downward API).
  group = _plan(tmp_path)
  assert group.driver_pod == DRIVER_POD and len(DRIVER_POD) > 63
  with worker_group.launched(
      group, worker_group.KubernetesGroups(api.api_client())):
    job, = api.kind('jobs')
    assert job['metadata']['ownerReferences'][0]['name'] == DRIVER_POD
  # Without KFP_POD_NAME, a HOSTNAME of 63 characters may be cut: refused,
  # saying what to set, before any call.
  with pytest.raises(worker_group.WorkerGroupError) as raised:
    _plan(tmp_path, {worker_group.SPEC_ENV: SPEC.to_json(),
                     worker_group.HOSTNAME_ENV: DRIVER_POD[:63]})
  assert 'has 63 characters' in str(raised.value)
  assert 'Set KFP_POD_NAME from the downward API' in str(raised.value)
  # A shorter HOSTNAME is the whole name.
  assert _plan(tmp_path, {worker_group.SPEC_ENV: SPEC.to_json(),
                          worker_group.HOSTNAME_ENV: 'taxi-x7k2p-1'}
              ).driver_pod == 'taxi-x7k2p-1'


def test_a_pod_name_cut_on_a_dash_still_makes_valid_labels(tmp_path):
  name = 'a' * 62 + '-b-3141592653'  # Its first 63 characters end with '-'.
  with kube_api_server.KubeApiServer(NAMESPACE, 'default-editor') as api:
    api.add_pod(_driver_pod(name))
    group = _plan(tmp_path, {worker_group.SPEC_ENV: SPEC.to_json(),
                             worker_group.POD_NAME_ENV: name})
    with worker_group.launched(
        group, worker_group.KubernetesGroups(api.api_client())):
      job, = api.kind('jobs')
  assert job['metadata']['labels'][worker_group.DRIVER_LABEL] == 'a' * 62


def test_workers_get_the_storage_access_of_a_use_gcp_secret_driver(
    tmp_path, group):
  # The driver pod Argo makes of a step compiled with --use-gcp-secret
  # (kfp.gcp.use_gcp_secret: the user-gcp-sa secret volume, its mount and
  # GOOGLE_APPLICATION_CREDENTIALS).
  step = slice_steps.compiled_driver_step(tmp_path, use_gcp_sa=True)
  with kube_api_server.KubeApiServer(NAMESPACE, 'pipeline-runner') as api:
    api.add_pod(kube_api_server.driver_pod_from_argo_step(
        step, DRIVER_POD, NAMESPACE, 'pipeline-runner'))
    with worker_group.launched(
        group, worker_group.KubernetesGroups(api.api_client())):
      job, = api.kind('jobs')
  pod_spec = job['spec']['template']['spec']
  container, = pod_spec['containers']
  assert pod_spec['serviceAccountName'] == 'pipeline-runner'
  assert pod_spec['volumes'] == [{'name': 'gcp-credentials-user-gcp-sa',
                                  'secret': {'secretName': 'user-gcp-sa'}}]
  assert container['volumeMounts'] == [{
      'name': 'gcp-credentials-user-gcp-sa',
      'mountPath': '/secret/gcp-credentials', 'readOnly': True}]
  env = {e['name']: e.get('value') for e in container['env']}
  assert env['GOOGLE_APPLICATION_CREDENTIALS'] == (
      '/secret/gcp-credentials/user-gcp-sa.json')
  assert env['CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE'] == (
      '/secret/gcp-credentials/user-gcp-sa.json')
  # Nothing else of the driver's: not its group spec, nor KFP's variables.
  assert worker_group.SPEC_ENV not in env and 'KFP_POD_NAME' not in env


def test_workers_run_as_the_workload_identity_service_account(group):
  with kube_api_server.KubeApiServer(NAMESPACE, 'default-editor') as api:
    api.add_pod(_driver_pod(service_account='tpu-trainer'))
    with worker_group.launched(
        group, worker_group.KubernetesGroups(api.api_client())):
      job, = api.kind('jobs')
  pod_spec = job['spec']['template']['spec']
  assert pod_spec['serviceAccountName'] == 'tpu-trainer'
  assert 'volumes' not in pod_spec


def _create_error(group, api):
  with pytest.raises(worker_group.WorkerGroupError) as raised:
    with worker_group.launched(
        group, worker_group.KubernetesGroups(api.api_client())):
      pass
  return str(raised.value)


def test_a_403_names_the_call_and_the_role(group):
  rules = [dict(rule, verbs=[v for v in rule['verbs'] if v != 'create'])
           if rule['resources'] == ['jobs'] else rule
           for rule in worker_group.RBAC_RULES]
  with kube_api_server.KubeApiServer(NAMESPACE, 'default-editor',
                                     rules) as api:
    api.add_pod(_driver_pod())
    message = _create_error(group, api)
    assert api.kind('jobs') == api.kind('services') == []  # Cleaned up.
  assert (f'Creating Job {group.name} in team-a: the Kubernetes API answered '
          '403 Forbidden: jobs.batch is forbidden: User '
          '"system:serviceaccount:team-a:default-editor" cannot create '
          'resource "jobs" in API group "batch"') in message
  assert worker_group.RBAC_MANIFEST in message


def test_a_404_is_a_missing_pod_not_a_missing_role(tmp_path, api):
  group = _plan(tmp_path, {worker_group.SPEC_ENV: SPEC.to_json(),
                           worker_group.POD_NAME_ENV: 'taxi-gone-1'})
  message = _create_error(group, api)
  assert ("Reading the driver pod 'taxi-gone-1' in team-a (its name from "
          'KFP_POD_NAME; is it this pod\'s name, uncut?): the Kubernetes API '
          'answered 404 Not Found: pods "taxi-gone-1" not found.') in message
  assert 'Role' not in message


def test_a_422_says_what_the_api_server_refused(tmp_path, api):
  # A spec of another compiler version with a field this API lacks.
  spec = worker_group.WorkerGroupSpec(
      hosts=2, chips_per_host=4, image='i',
      tolerations=((('key', 'google.com/tpu'), ('operatorr', 'Exists')),))
  group = _plan(tmp_path, {worker_group.SPEC_ENV: spec.to_json(),
                           worker_group.POD_NAME_ENV: DRIVER_POD})
  message = _create_error(group, api)
  assert 'the Kubernetes API answered 422 Unprocessable Entity: Job' in (
      message)
  assert "'operatorr' was unexpected" in message
  assert 'Role' not in message


def test_the_role_grants_exactly_the_calls_the_driver_makes(group, api):
  groups = worker_group.KubernetesGroups(api.api_client())
  groups.create(group)  # Then a second try, replacing it.
  with worker_group.launched(group, groups):
    pass
  made = {(g, resource, verb) for verb, g, resource, _ in api.requests}
  granted = {(rule['apiGroups'][0], resource, verb)
             for rule in worker_group.RBAC_RULES
             for resource in rule['resources'] for verb in rule['verbs']}
  assert made == granted


def test_a_spec_outside_a_pod_is_refused(tmp_path):
  with pytest.raises(worker_group.WorkerGroupError, match='cannot be read'):
    worker_group.plan({worker_group.SPEC_ENV: SPEC.to_json(),
                       worker_group.POD_NAME_ENV: DRIVER_POD},
                      str(tmp_path / 'absent'))
  with pytest.raises(worker_group.WorkerGroupError, match='recompile'):
    worker_group.plan({worker_group.SPEC_ENV: '{"hosts": 2}'},
                      str(tmp_path / 'absent'))
  assert worker_group.plan({}) is None
  # KFP v1 steps carry their namespace (the downward API) too.
  assert worker_group.plan({worker_group.SPEC_ENV: SPEC.to_json(),
                            worker_group.POD_NAME_ENV: DRIVER_POD,
                            worker_group.NAMESPACE_ENV: 'team-b'},
                           str(tmp_path / 'absent')).namespace == 'team-b'


def test_the_shipped_rbac_manifest_is_the_rendered_one():
  with open(os.path.join(REPO_ROOT, worker_group.RBAC_MANIFEST)) as f:
    assert list(yaml.safe_load_all(f)) == worker_group.rbac_manifests()
