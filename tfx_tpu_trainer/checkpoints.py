"""Where a TPUTrainer execution keeps checkpoints so that a retry resumes.

TFX gives every execution new output URIs, so checkpoints kept in `model_run`
are lost to a retry: a trainer pod preempted mid-training would start again
from step 0. TPUTrainer trains in a directory that only depends on the
pipeline, the pipeline run and the component:

  <base>/<pipeline name>/<pipeline run id>/<component id>

where <base> is `custom_config['checkpoint_dir']` (e.g. a gs:// path) or,
by default, `<pipeline root>/_checkpoints`. A retry in the same pipeline run
finds the checkpoints and resumes; a new pipeline run starts fresh. After a
successful export the checkpoints and TensorBoard events are in `model_run`
and the directory is removed; a run that failed for good leaves
its directory behind (see the README on cleaning it).
"""

import os
import re
from typing import Optional

from absl import logging
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.utils import io_utils

DEFAULT_DIR_NAME = '_checkpoints'


def _safe(name: str) -> str:
  return re.sub(r'[^A-Za-z0-9._-]', '_', name)


def resumable_model_dir(context: Optional[base_executor.BaseExecutor.Context],
                        model_uri: str, checkpoint_dir: Optional[str]
                       ) -> Optional[str]:
  """The resumable training directory, or None without a pipeline context.

  Args:
    context: the executor's context (pipeline info, node, run id).
    model_uri: the `model` output URI, `<pipeline root>/<node>/model/<id>`.
    checkpoint_dir: `custom_config['checkpoint_dir']`, or None.

  Returns:
    The directory, or None when the execution is not part of a pipeline run
    (a direct `Do()` call), which then trains in `model_run`.
  """
  if (context is None or not context.pipeline_run_id or
      context.pipeline_node is None or context.pipeline_info is None):
    return None
  node_id = context.pipeline_node.node_info.id
  pipeline_name = context.pipeline_info.id
  if not node_id or not pipeline_name:
    return None
  if checkpoint_dir is None:
    node_dir = os.path.dirname(os.path.dirname(model_uri.rstrip('/')))
    checkpoint_dir = os.path.join(os.path.dirname(node_dir), DEFAULT_DIR_NAME)
  return os.path.join(checkpoint_dir, _safe(pipeline_name),
                      _safe(context.pipeline_run_id), _safe(node_id))


def copy_into_model_run(model_dir: str, model_run_dir: str) -> None:
  """Copies checkpoints and events from `model_dir` into `model_run_dir`."""
  fileio.makedirs(model_run_dir)
  for name in fileio.listdir(model_dir):
    source = os.path.join(model_dir, name.rstrip('/'))
    destination = os.path.join(model_run_dir, name.rstrip('/'))
    if fileio.isdir(source):
      io_utils.copy_dir(source, destination)
    else:
      fileio.copy(source, destination, overwrite=True)
  logging.info('Copied checkpoints and events from %s to %s.', model_dir,
               model_run_dir)


def remove(model_dir: str) -> None:
  """Deletes a finished run's checkpoints; a failure only warns."""
  try:
    fileio.rmtree(model_dir)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('Could not remove %s (%s); delete it by hand.', model_dir,
                    e)


def latest_step(model_dir: str) -> int:
  """The global step of the newest checkpoint in `model_dir` (0 if none)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  latest = tf.train.latest_checkpoint(model_dir)
  if not latest:
    return 0
  return int(tf.train.load_variable(latest,
                                    tf.compat.v1.GraphKeys.GLOBAL_STEP))
