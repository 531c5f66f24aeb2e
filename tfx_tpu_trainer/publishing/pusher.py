"""A Pusher executor whose every push gets its own model version."""

import os
from typing import Any, Dict, Iterable, List

from absl import logging
from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils

from tfx_tpu_trainer.publishing import secrets
from tfx_tpu_trainer.publishing import versions

__all__ = ['Executor', 'own_versions_for_stock_pushers']


class Executor(pusher_executor.Executor):
  """TFX's Pusher, but each filesystem push claims its own version."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Pushes a blessed model to a version of its own (see the module doc)."""
    secrets.mask_logs()
    push_destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.PUSH_DESTINATION_KEY],
        push_destination)
    if push_destination.WhichOneof('destination') != 'filesystem':
      super().Do(input_dict, output_dict, exec_properties)
      return
    self._log_startup(input_dict, output_dict, exec_properties)
    model_push = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.PUSHED_MODEL_KEY])
    if not self.CheckBlessing(input_dict):
      self._MarkNotPushed(model_push)
      return
    model_path = self.GetModelPath(input_dict)
    serving_path = versions.push_new_version(
        model_path, push_destination.filesystem.base_directory)
    logging.info('Model written to serving path %s.', serving_path)
    io_utils.copy_dir(model_path, model_push.uri)
    self._MarkPushed(model_push, pushed_destination=serving_path,
                     pushed_version=os.path.basename(serving_path))
    logging.info('Model pushed to %s.', model_push.uri)


def own_versions_for_stock_pushers(components: Iterable[Any]) -> List[str]:
  """Gives TFX's stock Pushers among `components` this Executor.

  TFX's own Pusher names a version by the second it pushes in and skips
  the push when that folder exists: two Pushers into one serving directory
  in the same second publish one model, and the second is marked pushed
  with the first one's version. With this Executor each claims its own.

  Returns:
    The ids of the Pushers changed.
  """
  changed = []
  for node in components:
    spec = getattr(node, 'executor_spec', None)
    if (isinstance(spec, executor_spec.ExecutorClassSpec) and
        spec.executor_class is pusher_executor.Executor):
      own = executor_spec.ExecutorClassSpec(Executor)
      own.extra_flags = list(spec.extra_flags)
      node.executor_spec = own
      changed.append(node.id)
  return changed
