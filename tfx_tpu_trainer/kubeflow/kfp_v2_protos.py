"""KFP v2's current protobufs, loaded beside the pinned kfp's older ones.

kfp 1.8.22's kfp-pipeline-spec 0.1.16 has no `PlatformSpec` (where a KFP v2
backend reads node selectors and tolerations) and no CPU/memory requests,
and kfp-kubernetes needs kfp 2. So the published protos are loaded from a
descriptor set into a private pool: both define `ml_pipelines.PipelineSpec`,
which would clash in the default pool.
"""

import base64
import functools
from typing import Any, Dict, Type

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import json_format
from google.protobuf import message
from google.protobuf import message_factory

from tfx_tpu_trainer.kubeflow import _kfp_v2_descriptors

PIPELINE_SPEC = 'ml_pipelines.PipelineSpec'
PLATFORM_SPEC = 'ml_pipelines.PlatformSpec'
KUBERNETES_EXECUTOR_CONFIG = 'kfp_kubernetes.KubernetesExecutorConfig'


@functools.lru_cache(maxsize=None)
def _factory() -> message_factory.MessageFactory:
  files = descriptor_pb2.FileDescriptorSet.FromString(
      base64.b64decode(_kfp_v2_descriptors.DESCRIPTOR_SET_B64))
  pool = descriptor_pool.DescriptorPool()
  for file_proto in files.file:
    pool.Add(file_proto)
  return message_factory.MessageFactory(pool)


def message_class(full_name: str) -> Type[message.Message]:
  """The generated class of `full_name` (e.g. `PLATFORM_SPEC`)."""
  factory = _factory()
  return factory.GetPrototype(factory.pool.FindMessageTypeByName(full_name))


def parse(document: Dict[str, Any], full_name: str) -> message.Message:
  """`document` (JSON-style dict) as the message `full_name`; strict.

  Raises:
    google.protobuf.json_format.ParseError: for a field the message lacks
      or a value of the wrong type.
  """
  return json_format.ParseDict(document, message_class(full_name)())


def to_dict(proto: message.Message) -> Dict[str, Any]:
  """The message as KFP writes it (camelCase JSON names)."""
  return json_format.MessageToDict(proto)
