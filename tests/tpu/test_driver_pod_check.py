"""`tfx-tpu-trainer tpu-check` in the driver pod of a compiled multi-host step.

The command runs as a process with the compiled step's environment and a
kubeconfig naming the API server stand-in (tests/fixtures/kube_api_server.py),
which answers the SelfSubjectAccessReviews from the Role it holds.
"""

import os
import subprocess
import sys

import pytest

from tfx_tpu_trainer.tpu import worker_group

from tests.conftest import REPO_ROOT
from tests.fixtures import kube_api_server
from tests.fixtures import slice_steps

NAMESPACE = 'kubeflow'
POD = 'slice-x7k2p-system-container-impl-3141592653'


@pytest.fixture(scope='module')
def step(tmp_path_factory):
  return slice_steps.compiled_driver_step(tmp_path_factory.mktemp('compile'),
                                          use_gcp_sa=True)


def _tpu_check(step, api, tmp_path, pod_name=POD):
  environ = dict(os.environ, **slice_steps.step_environ(step, pod_name))
  environ.pop('KUBERNETES_SERVICE_HOST', None)  # Not in a cluster: kubeconfig.
  environ['KFP_NAMESPACE'] = NAMESPACE
  environ['KUBECONFIG'] = api.write_kubeconfig(str(tmp_path / 'kubeconfig'))
  return subprocess.run(
      [sys.executable, '-m', 'tfx_tpu_trainer_cli', 'tpu-check'],
      cwd=REPO_ROOT, env=environ, capture_output=True, text=True)


def _server(step, rules=worker_group.RBAC_RULES):
  api = kube_api_server.KubeApiServer(NAMESPACE, 'pipeline-runner', rules)
  api.add_pod(kube_api_server.driver_pod_from_argo_step(
      step, POD, NAMESPACE, 'pipeline-runner'))
  return api


def test_a_driver_pod_that_can_create_its_group_passes(step, tmp_path):
  with _server(step) as api:
    result = _tpu_check(step, api, tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  assert ('tpu-check: worker group: 2 pods x google.com/tpu: 4, image '
          'gcr.io/p/tpu-se:1, port 8470, on nodes '
          'cloud.google.com/gke-tpu-accelerator=tpu-v4-podslice, '
          'cloud.google.com/gke-tpu-topology=2x2x2') in out
  assert (f'tpu-check: driver pod: {POD} in {NAMESPACE} (found by '
          'KFP_POD_NAME)') in out
  assert ('worker pods get the driver\'s storage access: service account '
          'pipeline-runner, secret user-gcp-sa at /secret/gcp-credentials, '
          'env GOOGLE_APPLICATION_CREDENTIALS') in out
  assert ('tpu-check: RBAC: allowed in kubeflow: pods get; services list, '
          'create, delete; jobs.batch list, create, delete') in out
  assert 'tpu-check: the driver pod can create its worker group.' in out
  # Asked, never done: the check creates nothing.
  assert {verb for verb, *_ in api.requests} == {'get'}


def test_a_verb_the_role_lacks_is_named(step, tmp_path):
  rules = [dict(rule, verbs=['list', 'create']) if rule['resources'] == [
      'jobs'] else rule for rule in worker_group.RBAC_RULES]
  with _server(step, rules) as api:
    result = _tpu_check(step, api, tmp_path)
  assert result.returncode == 1
  assert ('tpu-check: FAILED  This pod\'s service account may not delete '
          f'jobs.batch in namespace {NAMESPACE}. Apply the Role and '
          f'RoleBinding of {worker_group.RBAC_MANIFEST}') in result.stderr


def test_a_pod_not_found_names_where_its_name_came_from(step, tmp_path):
  with _server(step) as api:
    result = _tpu_check(step, api, tmp_path, pod_name='slice-other-1')
  assert result.returncode == 1
  assert ("Reading the driver pod 'slice-other-1' in kubeflow (its name from "
          'KFP_POD_NAME; is it this pod\'s name, uncut?): the Kubernetes API '
          'answered 404 Not Found') in result.stderr
