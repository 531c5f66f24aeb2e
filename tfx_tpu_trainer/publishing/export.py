"""Exports the dual-tag SavedModel where TFX's Evaluator and Pusher find it."""

import os
from typing import List, Optional, Tuple
import uuid

from absl import logging
import tensorflow as tf
from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-direct-tensorflow-import
from tfx.dsl.io import fileio

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.publishing import serving
from tfx_tpu_trainer.tpu import facts as tpu_facts
from tfx_tpu_trainer.training import disk_full

__all__ = ['SERVE_TAGS', 'SERVE_TPU_TAGS', 'STAGING_PREFIX', 'ExportError',
           'export_serving_model', 'no_tpu_inference_message',
           'has_tpu_inference', 'check_tpu_graph',
           'remove_recorded_staging_dirs', 'saved_model_tag_sets']

SERVE_TAGS = (tf.saved_model.SERVING,)
SERVE_TPU_TAGS = (tf.saved_model.SERVING, tf.saved_model.TPU)
# The hidden directory beside Format-Serving that an export is staged in.
STAGING_PREFIX = '.export-'


def export_serving_model(estimator: tf.compat.v1.estimator.tpu.TPUEstimator,
                         serving_input_receiver_fn: serving.ServingInputReceiverFn,
                         serving_model_dir: str,
                         staging_record: Optional[str] = None,
                         source: str = 'the model_fn',
                         cpu_only_estimator: Optional[
                             tf.compat.v1.estimator.tpu.TPUEstimator] = None
                         ) -> str:
  """Exports the latest checkpoint as a SavedModel at `serving_model_dir`.

  The estimator writes `{serve}` (and `{serve, tpu}` when `export_to_tpu`)
  into a timestamped directory under a temporary parent beside
  `serving_model_dir`, with a transform graph `{serve}` also gets the
  `transform_features` signature (serving.py); the finished model is then
  renamed into place, so
  `serving_model_dir` exists only complete
  (`path_utils.serving_model_path(model.uri)` returns it).

  A failed export removes its staging directory; a killed one cannot, so
  with `staging_record` (a file beside the resumable checkpoints) each
  staging directory is listed there before it is created, and the next
  attempt of the same run removes the ones earlier attempts left.

  Args:
    estimator: the trained TPUEstimator.
    serving_input_receiver_fn: the serving input.
    serving_model_dir: `path_utils.serving_model_dir(model.uri)`.
    staging_record: the record file, or None (no retry can follow).
    source: how errors name the model_fn (e.g. 'model_fn in m.py').
    cpu_only_estimator: the same model exporting `{serve}` alone: when the
      dual-tag export fails (a model with TPU embeddings whose
      `{serve, tpu}` graph TF cannot build), its `{serve}` is exported
      instead and the reason logged.

  Returns:
    `serving_model_dir`.

  Raises:
    FileExistsError: when `serving_model_dir` already exists.
    disk_full.DiskFullError: when the disk fills during the export.
    ExportError: the `{serve, tpu}` graph holds no TPU op (`check_tpu_graph`);
      nothing is left under `serving_model_dir`.
  """
  if fileio.exists(serving_model_dir):
    raise FileExistsError(
        f'{serving_model_dir} already exists; a model artifact is written '
        'once.')
  parent = os.path.dirname(serving_model_dir.rstrip('/'))
  staging_dir = os.path.join(parent, f'{STAGING_PREFIX}{uuid.uuid4().hex}')
  if staging_record:
    remove_recorded_staging_dirs(staging_record)
    with fileio.open(staging_record, 'w') as f:
      f.write(staging_dir + '\n')
  try:
    with disk_full.translate_disk_full(
        f'exporting the model to {serving_model_dir}', staging_dir,
        f'Free space on the file system of the model artifact ({parent}) '
        'and retry: the checkpoints are kept, so a retry of this pipeline '
        'run exports without training again. The staging directory was '
        'removed: nothing was left under Format-Serving.',
        written=lambda: disk_full.bytes_under(staging_dir)):
      fileio.makedirs(staging_dir)
      exported = _export_saved_model(estimator, serving_input_receiver_fn,
                                     staging_dir, cpu_only_estimator)
      check_tpu_graph(exported, source)
      serving.add_transform_features_signature(exported)
      fileio.rename(exported, serving_model_dir)
  finally:
    if fileio.exists(staging_dir):
      fileio.rmtree(staging_dir)
  logging.info('Exported the serving model to %s.', serving_model_dir)
  return serving_model_dir


class ExportError(errors.TPUTrainerError, ValueError):
  """The exported SavedModel is not what its tags promise."""


def no_tpu_inference_message(source: str) -> str:
  """Why a `{serve, tpu}` graph without TPU ops is refused, and the fix."""
  return (
      f"{source} does no TPU inference: with custom_config"
      "['export_saved_model_api_version']=2 TPUEstimator calls it in PREDICT "
      "mode with params['use_tpu']=True and leaves the TPU rewrite to it, "
      'but the graph it built holds no TPU op (TPUPartitionedCall), so the '
      '{serve, tpu} meta graph would be a CPU graph tagged for TPU serving. '
      "When mode is PREDICT and params['use_tpu'] is true, return "
      'tpu_estimator.model_fn_inference_on_tpu(model_fn, features, labels, '
      'config, params) (tensorflow_estimator.python.estimator.tpu), or '
      'build the model under tf.compat.v1.tpu.rewrite yourself; or use '
      'export_saved_model_api_version=1 (the default), where TPUEstimator '
      'rewrites the model_fn for the TPU itself.')


def has_tpu_inference(graph_def: tf.compat.v1.GraphDef) -> bool:
  """Whether a graph (its function library included) runs a TPU program."""
  types = {node.op for node in graph_def.node}
  for function in graph_def.library.function:
    types.update(node.op for node in function.node_def)
  return bool(types & tpu_facts.TPU_INFERENCE_OPS)


def check_tpu_graph(saved_model_dir: str, source: str = 'the model_fn'
                   ) -> None:
  """Refuses a `{serve, tpu}` meta graph that holds no TPU op.

  Raises:
    ExportError: naming `source` and what to change.
  """
  tpu_tags = ','.join(SERVE_TPU_TAGS)
  if tuple(sorted(SERVE_TPU_TAGS)) not in saved_model_tag_sets(
      saved_model_dir):
    return
  meta_graph = saved_model_utils.get_meta_graph_def(saved_model_dir, tpu_tags)
  if not has_tpu_inference(meta_graph.graph_def):
    raise ExportError(no_tpu_inference_message(source))


def _export_saved_model(estimator, serving_input_receiver_fn,
                        staging_dir: str, cpu_only_estimator) -> str:
  """The estimator's export under `staging_dir`; {serve} alone as fallback."""
  try:
    exported = estimator.export_saved_model(
        export_dir_base=staging_dir,
        serving_input_receiver_fn=serving_input_receiver_fn)
  except (disk_full.DiskFullError, tf.errors.ResourceExhaustedError, OSError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    if cpu_only_estimator is None:
      raise
    logging.warning(
        'The {serve, tpu} graph of this model with TPU embeddings cannot be '
        'exported (%s: %s); exporting {serve} alone, its embeddings looked '
        'up on CPU. Serve it on CPU (the TPUBulkInferrer with use_tpu=false).',
        type(e).__name__, errors.first_line(e))
    # Beside what the failed export left (its timestamped temp directory).
    exported = cpu_only_estimator.export_saved_model(
        export_dir_base=os.path.join(staging_dir, 'serve-only'),
        serving_input_receiver_fn=serving_input_receiver_fn)
  return exported.decode() if isinstance(exported, bytes) else exported


def remove_recorded_staging_dirs(staging_record: str) -> List[str]:
  """Removes the staging directories listed in `staging_record`, if any."""
  if not fileio.exists(staging_record):
    return []
  with fileio.open(staging_record, 'r') as f:
    listed = [line.strip() for line in f.read().splitlines() if line.strip()]
  removed = []
  for staging_dir in listed:
    if (os.path.basename(staging_dir.rstrip('/')).startswith(STAGING_PREFIX)
        and fileio.exists(staging_dir)):
      fileio.rmtree(staging_dir)
      removed.append(staging_dir)
  fileio.remove(staging_record)
  if removed:
    logging.info('Removed the export staging directories of earlier '
                 'attempts: %s', removed)
  return removed


def saved_model_tag_sets(saved_model_dir: str) -> List[Tuple[str, ...]]:
  """The tag sets of the meta graphs in a SavedModel, each sorted."""
  saved_model = saved_model_utils.read_saved_model(saved_model_dir)
  return sorted(
      tuple(sorted(meta_graph.meta_info_def.tags))
      for meta_graph in saved_model.meta_graphs)
