"""Multi-task training from a TF_CONFIG cluster: which layouts work, and how."""

import json
import os
from typing import Any, Dict, Mapping, Optional

from tfx_tpu_trainer import errors

__all__ = ['DEFAULT_THROTTLE_SECS', 'is_chief', 'check_cluster',
           'run_config_overrides', 'eval_throttle_secs']

TF_CONFIG_ENV = 'TF_CONFIG'
CHIEF, MASTER, WORKER, PS, EVALUATOR = (
    'chief', 'master', 'worker', 'ps', 'evaluator')
# The EvalSpec default: local training evaluates at most every 10 minutes.
DEFAULT_THROTTLE_SECS = 600
# An evaluator task polls for new checkpoints this often; with the default
# it would sleep 10 minutes between polls, long after training ended.
EVALUATOR_THROTTLE_SECS = 1


class ClusterError(errors.TPUTrainerError, ValueError):
  """The TF_CONFIG cluster is one TPUTrainer cannot train with."""


def tf_config(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
  """The parsed TF_CONFIG ({} when unset)."""
  environ = os.environ if environ is None else environ
  text = environ.get(TF_CONFIG_ENV) or '{}'
  try:
    value = json.loads(text)
  except ValueError as e:
    raise ClusterError(f'{TF_CONFIG_ENV} is not valid JSON ({e}): '
                       f'{text[:200]!r}.') from e
  if not isinstance(value, dict):
    raise ClusterError(f'{TF_CONFIG_ENV} must be a JSON object, got '
                       f'{text[:200]!r}.')
  return value


def task(environ: Optional[Mapping[str, str]] = None):
  """(task type, index) of this process; (None, 0) without a cluster."""
  config = tf_config(environ)
  if not config.get('cluster'):
    return None, 0
  entry = config.get('task') or {}
  return entry.get('type'), int(entry.get('index', 0))


def is_chief(environ: Optional[Mapping[str, str]] = None) -> bool:
  """True unless TF_CONFIG names this task something other than the chief."""
  task_type, index = task(environ)
  return task_type is None or task_type == CHIEF or (
      task_type == MASTER and index == 0)


def check_cluster(use_tpu: bool,
                  environ: Optional[Mapping[str, str]] = None) -> None:
  """Refuses the TF_CONFIG layouts that cannot finish (see module doc).

  Raises:
    ClusterError: naming the layout, why it cannot work, what to do.
  """
  config = tf_config(environ)
  cluster = config.get('cluster') or {}
  if not cluster:
    return
  jobs = {name: len(addresses or []) for name, addresses in cluster.items()}
  layout = ', '.join(f'{name} x{count}' for name, count in sorted(jobs.items()))
  if jobs.get(PS):
    raise ClusterError(
        f'{TF_CONFIG_ENV} names ps tasks (cluster: {layout}). TPUTrainer '
        'keeps the variables on the chief; an Estimator ps task serves until '
        'it is killed, so its step would never end. Remove the ps tasks '
        'from the cluster (chief, worker and evaluator tasks are supported).')
  trainers = sum(count for name, count in jobs.items() if name != EVALUATOR)
  if use_tpu and trainers > 1:
    raise ClusterError(
        f'{TF_CONFIG_ENV} names several training tasks (cluster: {layout}) '
        'but use_tpu is true: a TPU is driven by one host program. Run one '
        'task (chief); for a multi-host TPU slice, that task drives every '
        'host: name their workers in custom_config[\'tpu_workers\'] (or '
        'TPU_WORKER_HOSTNAMES), each host running python -m '
        'tfx_tpu_trainer.slice.worker. Or set use_tpu=False for multi-worker '
        'CPU/GPU training.')
  if jobs.get(WORKER) and not jobs.get(CHIEF) and not jobs.get(MASTER):
    raise ClusterError(
        f'{TF_CONFIG_ENV} names worker tasks but no chief (cluster: '
        f'{layout}): the chief initialises the variables, writes the '
        'checkpoints and exports the model. Add a chief task.')


def run_config_overrides(environ: Optional[Mapping[str, str]] = None
                        ) -> Dict[str, Any]:
  """RunConfig arguments that keep the variables on the chief.

  Returns:
    {} outside a cluster with workers; else `device_fn` (variables on
    `/job:chief`, ops on this task) and `session_config` (this task talks to
    the chief and itself only).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = tf_config(environ)
  cluster = config.get('cluster') or {}
  task_type, index = task(environ)
  if not cluster.get(WORKER) or task_type not in (CHIEF, WORKER):
    return {}
  chief_job = CHIEF if CHIEF in cluster else MASTER
  this_task = f'/job:{task_type}/task:{index}'
  device_fn = tf.compat.v1.train.replica_device_setter(
      ps_device=f'/job:{chief_job}',
      worker_device=this_task,
      merge_devices=True,
      cluster=tf.train.ClusterSpec({chief_job: cluster[chief_job]}))
  session_config = tf.compat.v1.ConfigProto(
      allow_soft_placement=True,
      device_filters=[f'/job:{chief_job}', this_task])
  return {'device_fn': device_fn, 'session_config': session_config}


def eval_throttle_secs(environ: Optional[Mapping[str, str]] = None) -> int:
  """The EvalSpec's throttle_secs for this task."""
  task_type, _ = task(environ)
  return (EVALUATOR_THROTTLE_SECS if task_type == EVALUATOR
          else DEFAULT_THROTTLE_SECS)
