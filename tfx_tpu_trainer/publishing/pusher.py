"""A Pusher executor whose every push gets its own model version.

TFX's Pusher names a filesystem push by `int(time.time())`: two runs that
push in the same second get the same version; the second one finds the
directory, skips the copy and still reports the first run's directory as
its push, so its own model is never served (and two copies racing into one
directory could mix files). This executor, used by the bundled pipelines,
stages the whole model in a hidden directory beside the versions and renames
it into place under the first free version at or after the current second:
the rename onto an existing version directory fails, so each push claims a
version of its own, and a model server (which loads numeric directories
only) sees a version only complete. On an object store (gs://) the rename
is a copy, so the claim is not atomic there.
"""

import os
import time
from typing import Any, Dict, List
import uuid

from absl import logging
from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils

from tfx_tpu_trainer import config as config_lib

STAGING_PREFIX = '.push-'
_SAVED_MODEL_PB = 'saved_model.pb'


def push_new_version(model_path: str, base_directory: str) -> str:
  """Copies the SavedModel at `model_path` to a new version under the base.

  Args:
    model_path: the SavedModel directory.
    base_directory: the push destination's base directory.

  Returns:
    The version directory the model now lives in.
  """
  fileio.makedirs(base_directory)
  staging = os.path.join(base_directory, f'{STAGING_PREFIX}{uuid.uuid4().hex}')
  try:
    io_utils.copy_dir(model_path, staging,
                      deny_regex_patterns=[r'saved_model\.pb'])
    if fileio.exists(os.path.join(model_path, _SAVED_MODEL_PB)):
      io_utils.copy_file(os.path.join(model_path, _SAVED_MODEL_PB),
                         os.path.join(staging, _SAVED_MODEL_PB))
    version = int(time.time())
    taken = []
    while True:
      serving_path = os.path.join(base_directory, str(version))
      if not fileio.exists(serving_path) and _claim(staging, serving_path):
        break
      taken.append(version)
      version += 1
  finally:
    if fileio.exists(staging):
      fileio.rmtree(staging)
  if taken:
    logging.warning('Model version(s) %s under %s were already taken (another '
                    'push in the same second); pushed as version %d.',
                    taken, base_directory, version)
  return serving_path


def _claim(staging: str, serving_path: str) -> bool:
  """Renames staging to serving_path; False when another push got there."""
  try:
    if config_lib.is_uri(serving_path):
      fileio.rename(staging, serving_path, overwrite=False)
    else:
      os.rename(staging, serving_path)  # Fails onto a non-empty directory.
  except OSError:
    if fileio.exists(serving_path):
      return False
    raise
  return True


class Executor(pusher_executor.Executor):
  """TFX's Pusher, but each filesystem push claims its own version."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Pushes a blessed model to a version of its own (see the module doc)."""
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
    serving_path = push_new_version(
        model_path, push_destination.filesystem.base_directory)
    logging.info('Model written to serving path %s.', serving_path)
    io_utils.copy_dir(model_path, model_push.uri)
    self._MarkPushed(model_push, pushed_destination=serving_path,
                     pushed_version=os.path.basename(serving_path))
    logging.info('Model pushed to %s.', model_push.uri)
