"""The worker group's manifests and the RBAC Role against the Kubernetes API.

The schemas are the Kubernetes 1.31 API's, vendored in
tests/fixtures/k8s_schemas (generate.py says from where), checked with
jsonschema: every field known and of its type, the required ones there.
The group checked is the one a compiled v1 step creates.
"""

import copy

import jsonschema
import pytest

from tfx_tpu_trainer.tpu import worker_group

from tests.fixtures import kube_api_server
from tests.fixtures import slice_steps

_validate = kube_api_server.validate


def _compiled_group(tmp_path, accelerator, topology):
  step = slice_steps.compiled_driver_step(tmp_path, accelerator, topology)
  (namespace_file := tmp_path / 'namespace').write_text('kubeflow')
  return worker_group.plan(
      slice_steps.step_environ(step, 'slice-abcde-3141592653'),
      str(namespace_file))


@pytest.mark.parametrize('accelerator,topology,hosts', [
    ('tpu-v4-podslice', '2x2x2', 2), ('tpu-v5-lite-podslice', '4x4', 4)])
def test_compiled_worker_group_validates_against_the_kubernetes_api(
    tmp_path, accelerator, topology, hosts):
  group = _compiled_group(tmp_path, accelerator, topology)
  assert group.spec.hosts == hosts
  owner = worker_group.pod_owner(group.driver_pod, 'uid-1')
  job = worker_group.job_manifest(group.spec, group.name, group.namespace,
                                  group.driver_pod, owner)
  service = worker_group.service_manifest(group.spec, group.name,
                                          group.namespace, group.driver_pod,
                                          owner)
  _validate(job)
  _validate(service)
  # The names in them are the ones the driver resolves (TPU_WORKER_HOSTNAMES).
  pod_hosts = [f'{job["metadata"]["name"]}-{i}.'
               f'{job["spec"]["template"]["spec"]["subdomain"]}.'
               f'{service["metadata"]["namespace"]}.svc:'
               f'{service["spec"]["ports"][0]["port"]}'
               for i in range(job['spec']['completions'])]
  environ = {}
  worker_group.announce(group, environ)
  assert environ['TPU_WORKER_HOSTNAMES'].split(',') == pod_hosts


def test_the_rbac_manifests_validate_against_the_kubernetes_api():
  for manifest in worker_group.rbac_manifests():
    _validate(manifest)


@pytest.mark.parametrize('path,value', [
    (('spec', 'completionsMode'), 'Indexed'),  # A misspelt field.
    (('spec', 'completions'), '4'),  # A string where the API has an int.
    (('spec', 'template', 'spec', 'containers', 0, 'name'), None),  # Required.
])
def test_the_schemas_catch_what_the_api_server_would_refuse(path, value):
  spec = worker_group.WorkerGroupSpec(hosts=2, chips_per_host=4, image='i')
  job = copy.deepcopy(worker_group.job_manifest(spec, 'g', 'ns', 'pod'))
  target = job
  for key in path[:-1]:
    target = target[key]
  if value is None:
    del target[path[-1]]
  else:
    target[path[-1]] = value
  with pytest.raises(jsonschema.ValidationError):
    _validate(job)
