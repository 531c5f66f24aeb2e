"""What a compiled pipeline says: read back from the files a compile wrote."""

import json
import os
import re
import tarfile
from typing import Any, Dict, List, Sequence

import yaml

from tfx_tpu_trainer.slice import worker_group
from tfx_tpu_trainer.tpu import runtimes

KUBERNETES_PLATFORM = 'kubernetes'


def read_argo_workflow(path: str) -> Dict[str, Any]:
  """The workflow of a `KubeflowDagRunner` output (.tar.gz/.tgz/.zip/.yaml)."""
  if path.endswith(('.tar.gz', '.tgz')):
    with tarfile.open(path) as package:
      return yaml.safe_load(package.extractfile('pipeline.yaml'))
  if path.endswith('.zip'):
    import zipfile  # pylint: disable=g-import-not-at-top
    with zipfile.ZipFile(path) as package:
      return yaml.safe_load(package.read('pipeline.yaml'))
  with open(path) as f:
    return yaml.safe_load(f)


def argo_step_name(component_id: str) -> str:
  """The Argo template name of a component's step (lower case, `-`)."""
  return re.sub(r'[^a-z0-9-]+', '-', component_id.lower()).strip('-')


def argo_step(workflow: Dict[str, Any], component_id: str) -> Dict[str, Any]:
  """The container template of a component's step."""
  for template in workflow['spec']['templates']:
    if ('container' in template and
        template['name'] == argo_step_name(component_id)):
      return template
  raise KeyError(component_id)


def component_of(spec: Dict[str, Any], task_id: str) -> Dict[str, Any]:
  """The component spec of a task of a pipeline spec (JSON)."""
  task = spec['root']['dag']['tasks'][task_id]
  return spec['components'][task['componentRef']['name']]


def trainer_executor_label(spec: Dict[str, Any], trainer_id: str) -> str:
  """The executor label of a component's task in a pipeline spec."""
  return component_of(spec, trainer_id)['executorLabel']


def container(spec: Dict[str, Any], executor: str) -> Dict[str, Any]:
  """The container of an executor in a pipeline spec (JSON)."""
  return spec['deploymentSpec']['executors'][executor]['container']


def containers(spec: Dict[str, Any]) -> List[Dict[str, Any]]:
  """Every executor container of a pipeline spec (JSON)."""
  return [e['container'] for e in spec['deploymentSpec']['executors'].values()
          if 'container' in e]


def describe_v1_trainer(path: str, trainer_id: str) -> str:
  """One line: what the trainer's step in a KFP v1 workflow carries."""
  step = argo_step(read_argo_workflow(path), trainer_id)
  step_container = step['container']
  resources = step_container.get('resources') or {}
  return _describe(os.path.basename(path), step_container['image'],
                   resources.get('limits') or {},
                   resources.get('requests') or {},
                   step.get('nodeSelector') or {},
                   step.get('tolerations') or [],
                   (step.get('metadata') or {}).get('annotations') or {},
                   step_container.get('env') or [])


def describe_kfp_v2_trainer(path: str, trainer_id: str) -> str:
  """One line: what the trainer's executor in a KFP v2 spec carries."""
  with open(path) as f:
    documents = list(yaml.safe_load_all(f))
  executor = trainer_executor_label(documents[0], trainer_id)
  executor_container = container(documents[0], executor)
  resources = executor_container.get('resources') or {}
  accelerator = resources.get('accelerator') or {}
  limits = ({accelerator['resourceType']: accelerator['resourceCount']}
            if accelerator else {})
  requests = {k: resources[f] for k, f in (('cpu', 'resourceCpuRequest'),
                                           ('memory', 'resourceMemoryRequest'))
              if f in resources}
  config = {}
  if len(documents) > 1:
    config = documents[1]['platforms'][KUBERNETES_PLATFORM]['deploymentSpec'][
        'executors'].get(executor, {})
  return _describe(os.path.basename(path), executor_container['image'], limits,
                   requests, (config.get('nodeSelector') or {}).get(
                       'labels', {}), config.get('tolerations') or [], {},
                   executor_container.get('env') or [])


def describe_vertex_trainer(path: str, trainer_id: str) -> str:
  """One line: what the trainer's executor in a Vertex AI job carries."""
  with open(path) as f:
    spec = json.load(f)['pipelineSpec']
  executor_container = container(spec, trainer_executor_label(spec,
                                                              trainer_id))
  resources = executor_container.get('resources') or {}
  accelerator = resources.get('accelerator') or {}
  limits = {accelerator['type']: accelerator['count']} if accelerator else {}
  for name, field, unit in (('cpu', 'cpuLimit', ''),
                            ('memory', 'memoryLimit', 'G')):
    if field in resources:
      limits[name] = f'{resources[field]:g}{unit}'
  return _describe(os.path.basename(path), executor_container['image'], limits,
                   {}, {}, [], {}, executor_container.get('env') or [])


def _describe(name: str, image: str, limits: Dict[str, Any],
              requests: Dict[str, Any], node_selector: Dict[str, str],
              tolerations: List[Dict[str, Any]],
              annotations: Dict[str, str],
              env: Sequence[Dict[str, Any]] = ()) -> str:
  parts = [f'image {image}']
  if limits:
    parts.append('limits ' + ', '.join(f'{k}: {v}' for k, v in limits.items()))
  if requests:
    parts.append('requests ' + ', '.join(f'{k}: {v}'
                                         for k, v in requests.items()))
  if node_selector:
    parts.append('node selector ' + ', '.join(
        f'{k}={v}' for k, v in node_selector.items()))
  if tolerations:
    parts.append('tolerations ' + ', '.join(
        f'{t.get("key")}{"=" + t["value"] if t.get("value") else ""}:'
        f'{t.get("effect")}' for t in tolerations))
  if annotations:
    parts.append('annotations ' + ', '.join(
        f'{k}: {v}' for k, v in annotations.items()))
  runtime_env = [f'{e.get("name")}={e.get("value")}' for e in env
                 if e.get('name') in runtimes.STEP_ENV_NAMES]
  if runtime_env:
    parts.append('TPU runtime env ' + ', '.join(runtime_env))
  group = [e.get('value') for e in env
           if e.get('name') == worker_group.SPEC_ENV]
  if group:  # A multi-host slice: the driver creates the worker pods.
    spec = worker_group.WorkerGroupSpec.from_json(group[0])
    parts.append(
        f'no TPU on this driver; it creates {spec.hosts} worker pods (image '
        f'{spec.image}, {worker_group.TPU_RESOURCE}: {spec.chips_per_host} '
        'each, node selector ' + ', '.join(f'{k}={v}'
                                           for k, v in spec.node_selector) +
        ', runtime env ' + ', '.join(f'{k}={v}' for k, v in spec.env) + ')')
  elif not any('tpu' in str(k).lower() for k in limits):
    parts.append('no TPU')
  return f'{name}: ' + '; '.join(parts)
