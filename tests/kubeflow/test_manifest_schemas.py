"""The worker group's manifests and the RBAC Role against the Kubernetes API.

The schemas are the Kubernetes 1.31 API's, vendored in
tests/fixtures/k8s_schemas (generate.py says from where), checked with
jsonschema: every field known and of its type, the required ones there.
The group checked is the one a compiled v1 step creates.
"""

import copy
import json

import jsonschema
import pytest
from tfx import v1 as tfx

from tfx_tpu_trainer.kubeflow import compiled_files
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.kubeflow import tpu_slices
from tfx_tpu_trainer.tpu import worker_group

from tests.fixtures.k8s_schemas import generate

with open(generate.OUTPUT) as _f:
  SCHEMAS = json.load(_f)


def _validate(manifest):
  kind = manifest['kind']
  schema = dict(SCHEMAS['kinds'][kind], definitions=SCHEMAS['definitions'])
  jsonschema.Draft7Validator(schema).validate(manifest)


def _compiled_group(tmp_path, accelerator, topology):
  from tfx_tpu_trainer import TPUTrainer  # pylint: disable=g-import-not-at-top
  with compiler.user_modules_not_packaged():
    example_gen = tfx.components.CsvExampleGen(input_base='gs://b/data')
    trainer = TPUTrainer(module_file='/m.py',
                         examples=example_gen.outputs['examples'],
                         train_args=tfx.proto.TrainArgs(num_steps=1),
                         eval_args=tfx.proto.EvalArgs(num_steps=1))
  result = compiler.compile_pipeline(
      tfx.dsl.Pipeline(pipeline_name='slice', pipeline_root='gs://b/root',
                       components=[example_gen, trainer]),
      str(tmp_path / 'slice.tar.gz'),
      compiler.KubeflowOptions(
          trainer_pod=scheduling.TrainerPod(
              tpu=tpu_slices.tpu_request(accelerator, topology)),
          trainer_image='gcr.io/p/tpu-{runtime}:1'))
  step = compiled_files.argo_step(
      compiled_files.read_argo_workflow(result.path), 'TPUTrainer')
  (namespace_file := tmp_path / 'namespace').write_text('kubeflow')
  environ = {e['name']: e['value'] for e in step['container']['env']
             if 'value' in e}
  environ[worker_group.POD_NAME_ENV] = 'slice-abcde-3141592653'
  return worker_group.plan(environ, str(namespace_file))


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
