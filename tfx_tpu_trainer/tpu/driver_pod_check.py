"""`tpu-check` in a compiled multi-host step's pod: its own pod, the Role's
verbs (SelfSubjectAccessReviews), the worker group's spec."""

from typing import Any, Callable, List, Mapping, Optional, Tuple

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.tpu import facts
from tfx_tpu_trainer.tpu import kube_api
from tfx_tpu_trainer.tpu import worker_group

__all__ = ['DriverPodCheckError', 'rbac_verbs', 'denied_verbs',
           'check_driver_pod']

Report = Callable[[str], None]


class DriverPodCheckError(errors.TPUTrainerError, RuntimeError):
  """The driver pod cannot create its worker group."""


def rbac_verbs() -> List[Tuple[str, str, str]]:
  """(API group, resource, verb) of every call the driver makes."""
  return [(rule['apiGroups'][0], resource, verb)
          for rule in worker_group.RBAC_RULES
          for resource in rule['resources'] for verb in rule['verbs']]


def denied_verbs(api_client: Any, namespace: str
                ) -> List[Tuple[str, str, str, str]]:
  """Each verb the API server does not allow, with its reason.

  Raises:
    DriverPodCheckError: the review itself failed (what the API said).
  """
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  api = client.AuthorizationV1Api(api_client)
  denied = []
  for group, resource, verb in rbac_verbs():
    body = {'apiVersion': 'authorization.k8s.io/v1',
            'kind': 'SelfSubjectAccessReview',
            'spec': {'resourceAttributes': {
                'namespace': namespace, 'group': group,
                'resource': resource, 'verb': verb}}}
    try:
      review = api.create_self_subject_access_review(body)
    except Exception as e:  # pylint: disable=broad-except
      raise DriverPodCheckError(
          f'Asking the API server whether this pod may {verb} {resource}: it '
          f'answered {kube_api.describe_failure(e)}.') from e
    if not review.status.allowed:
      denied.append((group, resource, verb, review.status.reason or ''))
  return denied


def _resource(group: str, resource: str) -> str:
  return f'{resource}.{group}' if group else resource


def _rbac_line(api_client: Any, group: worker_group.Plan) -> str:
  denied = denied_verbs(api_client, group.namespace)
  if denied:
    raise DriverPodCheckError(
        'This pod\'s service account may not ' + '; '.join(
            f'{verb} {_resource(g, resource)}' + (f' ({reason})'
                                                  if reason else '')
            for g, resource, verb, reason in denied) +
        f' in namespace {group.namespace}. Apply the Role and RoleBinding of '
        f'{worker_group.RBAC_MANIFEST} there, bound to this service account '
        '(docs/guide/tpu_slices.md, "GKE checklist").')
  by_resource = {}
  for g, resource, verb in rbac_verbs():
    by_resource.setdefault(_resource(g, resource), []).append(verb)
  return ('RBAC: allowed in ' + group.namespace + ': ' + '; '.join(
      f'{resource} {", ".join(verbs)}'
      for resource, verbs in by_resource.items()))


def _spec_line(spec: worker_group.WorkerGroupSpec) -> str:
  if not spec.image:
    raise DriverPodCheckError(
        f'{worker_group.SPEC_ENV} names no worker image; recompile the '
        'pipeline with --trainer-image (the TPU image).')
  selector = ', '.join(f'{k}={v}' for k, v in spec.node_selector)
  return (f'worker group: {spec.hosts} pods x {facts.TPU_RESOURCE}: '
          f'{spec.chips_per_host}, image {spec.image}, port {spec.port}, '
          f'on nodes {selector or "(no selector)"}')


def check_driver_pod(report: Report,
                     environ: Optional[Mapping[str, str]] = None,
                     namespace_file: str = worker_group.NAMESPACE_FILE,
                     api_client: Any = None) -> None:
  """Reports each check as it passes.

  Raises:
    DriverPodCheckError: naming what failed and what to do.
  """
  try:
    group = worker_group.plan(environ, namespace_file)
  except worker_group.WorkerGroupError as e:
    raise DriverPodCheckError(str(e)) from e
  report(_spec_line(group.spec))
  try:
    api_client = api_client or kube_api.api_client()
    pod = worker_group.KubernetesGroups(api_client).driver_pod(group)
  except (worker_group.WorkerGroupError, kube_api.KubeApiError) as e:
    raise DriverPodCheckError(str(e)) from e
  report(f'driver pod: {group.driver_pod} in {group.namespace} (found by '
         f'{group.pod_name_from}), uid {pod["metadata"].get("uid")}; the '
         f'group will be {group.name}')
  report('worker pods get the driver\'s storage access: ' +
         worker_group.storage_access(pod).describe())
  report(_rbac_line(api_client, group))
  report('not checked from here: the slice\'s node pool and TPU quota, the '
         'worker image in its registry, TCP port '
         f'{group.spec.port} between the pods (`tpu-check --workers` once '
         'the workers run); see the GKE checklist in docs/guide/tpu_slices.md')
