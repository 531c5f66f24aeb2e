"""Builds the TPU RunConfig and the TPUEstimator from a TrainerConfig."""

import copy
import os
from typing import Any, Callable, Dict, Optional, Union

from absl import logging
import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=g-direct-tensorflow-import
from tensorflow_estimator.python.estimator import run_config as estimator_run_config  # pylint: disable=g-direct-tensorflow-import

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import cluster
from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.training import host_loop
from tfx_tpu_trainer.training import tpu_slice

__all__ = ['ResolverFactory', 'build_run_config', 'warm_start_settings',
           'build_estimator']

_INPUT_PIPELINE_CONFIGS = {
    'PER_SHARD_V1': tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_SHARD_V1,
    'PER_HOST_V1': tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V1,
    'PER_HOST_V2': tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2,
    'BROADCAST': tf.compat.v1.estimator.tpu.InputPipelineConfig.BROADCAST,
}

ResolverFactory = Callable[..., Any]


def _default_resolver_factory(**kwargs):
  return tf.distribute.cluster_resolver.TPUClusterResolver(**kwargs)


def build_run_config(
    config: config_lib.TrainerConfig,
    model_dir: str,
    resolver_factory: ResolverFactory = _default_resolver_factory,
    embedding_lookups_on_cpu: bool = False,
) -> tf.compat.v1.estimator.tpu.RunConfig:
  """The TPU RunConfig of a run.

  A named TPU is resolved and passed as `master=`, never as `cluster=`: with
  a cluster, `train_and_evaluate` takes its distributed branch and never
  evaluates (tensorflow/tpu#606). The resolver's cluster spec still reaches
  the session through `session_config.cluster_def`, as `cluster=` would do.

  Args:
    config: the validated trainer config.
    model_dir: where checkpoints and TensorBoard events go.
    resolver_factory: builds the cluster resolver from tpu/zone/project.
    embedding_lookups_on_cpu: the model's TPU embedding columns look their
      ids up on CPU (use_tpu=False): Grappler's arithmetic optimizer is
      turned off (`_without_full_table_reads`).

  Returns:
    The RunConfig.
  """
  cluster.check_cluster(config.use_tpu)
  master = None
  session_config = None
  # A multi-host slice: master, cluster def (and off TPU the device_fn).
  slice_args = tpu_slice.run_config_args(
      config.use_tpu, tpu_slice.worker_addresses(config))
  if slice_args:
    master = slice_args.pop('master')
    session_config = slice_args.pop('session_config')
  elif config.use_tpu and config.tpu is not None:
    try:
      resolver = resolver_factory(
          tpu=config.tpu.name, zone=config.tpu.zone,
          project=config.tpu.project)
      master = resolver.master()
      cluster_spec = resolver.cluster_spec()
      if config.tpu.name == 'local' and not resolver.num_accelerators().get(
          'TPU'):
        raise RuntimeError(
            'no TPU on this host (a TPU VM: a pod on a GKE TPU node, with '
            'TensorFlow\'s TPU runtime, libtpu, in its image)')
    except Exception as e:  # pylint: disable=broad-except
      raise errors.TPUTrainerError(
          f'Could not resolve TPU {config.tpu.name!r} (zone '
          f'{config.tpu.zone!r}, project {config.tpu.project!r}): '
          f'{type(e).__name__}: {e}. Check custom_config["tpu"] (or '
          'TPU_NAME), that the TPU exists and this job may reach it, or set '
          'use_tpu=False to train on CPU/GPU.') from e
    # A Cloud TPU pod named by name: its hosts are known only now.
    config.check_input_mode(_worker_count(cluster_spec))
    if cluster_spec and cluster_spec.as_dict():
      session_config = tf.compat.v1.ConfigProto(
          allow_soft_placement=True, isolate_session_state=True)
      session_config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())
    logging.info('TPU %s resolved to master %s.', config.tpu.name, master)

  tpu_config = tf.compat.v1.estimator.tpu.TPUConfig(
      # Off TPU, TPUEstimator logs and writes step-rate summaries every
      # ceil(log_step_count_steps / iterations_per_loop) global steps; 1
      # keeps that at every 100th step (100 would log every step:
      # CHANGELOG.md, "Performance, round one (issue 7)"). The host loop's
      # hooks read the step after the loop (host_loop.py), so with any loop
      # length that divides 100 the log comes at exactly every 100th step.
      iterations_per_loop=config.iterations_per_loop if config.use_tpu else 1,
      num_shards=config.num_shards,
      per_host_input_for_training=_INPUT_PIPELINE_CONFIGS[
          config.per_host_input],
      initial_infeed_sleep_secs=config.initial_infeed_sleep_secs,
      experimental_host_call_every_n_steps=(
          config.experimental_host_call_every_n_steps),
      experimental_allow_per_host_v2_parallel_get_next=(
          config.experimental_allow_per_host_v2_parallel_get_next))
  optional = {}
  if config.tf_random_seed is not None:
    optional['tf_random_seed'] = config.tf_random_seed
  if config.save_checkpoints_steps is not None:
    optional['save_checkpoints_steps'] = config.save_checkpoints_steps
  if config.keep_checkpoint_max is not None:
    optional['keep_checkpoint_max'] = config.keep_checkpoint_max
  # With TF_CONFIG workers: variables on the chief (cluster.py).
  optional.update(cluster.run_config_overrides())
  optional.update(slice_args)
  session_config = optional.pop('session_config', session_config)
  if embedding_lookups_on_cpu:
    session_config = _without_full_table_reads(session_config)
  return tf.compat.v1.estimator.tpu.RunConfig(
      tpu_config=tpu_config,
      master=master,
      model_dir=model_dir,
      session_config=session_config,
      **optional)


def _worker_count(cluster_spec) -> int:
  """The hosts of a resolved TPU (its `worker` tasks; 1 when none listed)."""
  jobs = cluster_spec.as_dict() if cluster_spec else {}
  return max(len(jobs.get('worker', ())), 1)


def warm_start_settings(
    config: config_lib.TrainerConfig, base_model: Optional[str]
) -> Union[None, str, tf.estimator.WarmStartSettings]:
  """What TPUEstimator warm-starts from: the base model, as the keys select.

  Without `vars_to_warm_start` / `var_name_to_prev_var_name` the path itself
  (every trainable variable, as TPUEstimator takes a path). With them, a
  `WarmStartSettings` whose checkpoint is the SavedModel's variables, as
  TPUEstimator finds it for a path.

  Args:
    config: the validated trainer config.
    base_model: the base model's SavedModel (or checkpoint), or None.

  Returns:
    The `warm_start_from` argument of TPUEstimator.

  Raises:
    ConfigError: warm-start keys without a base model.
  """
  config.check_warm_start(base_model is not None)
  if base_model is None or not (config.vars_to_warm_start or
                                config.var_name_to_prev_var_name):
    return base_model
  checkpoint = base_model
  if tf.io.gfile.exists(os.path.join(base_model, 'variables',
                                     'variables.index')):
    checkpoint = os.path.join(base_model, 'variables', 'variables')
  vars_to_warm_start = config.vars_to_warm_start
  if isinstance(vars_to_warm_start, tuple):
    vars_to_warm_start = list(vars_to_warm_start)
  return tf.estimator.WarmStartSettings(
      ckpt_to_initialize_from=checkpoint,
      vars_to_warm_start=(vars_to_warm_start if vars_to_warm_start is not None
                          else '.*'),
      var_name_to_prev_var_name=dict(config.var_name_to_prev_var_name) or None)


def _without_full_table_reads(
    session_config: Optional[tf.compat.v1.ConfigProto]
) -> tf.compat.v1.ConfigProto:
  """The session config with Grappler's arithmetic optimizer off.

  Its SimplifyEmbeddingLookupStage rewrites the gather of an
  `embedding_lookup_sparse` (what an embedding column runs on CPU) into a
  read of the whole table variable each step: a copy of every row per
  lookup, 25 ms of a 2^20 x 8 table's step here
  (docs/guide/tpu_embeddings.md, "Measured"). TF 2.15's RewriterConfig has
  no switch for that stage alone.
  """
  session_config = (
      estimator_run_config.get_default_session_config()
      if session_config is None else copy.deepcopy(session_config))
  session_config.graph_options.rewrite_options.arithmetic_optimization = (
      rewriter_config_pb2.RewriterConfig.OFF)
  return session_config


def build_estimator(
    model_fn: Callable[..., Any],
    config: config_lib.TrainerConfig,
    run_config: tf.compat.v1.estimator.tpu.RunConfig,
    params: Dict[str, Any],
    warm_start_from: Union[None, str, tf.estimator.WarmStartSettings] = None,
    train_steps: Optional[int] = None,
    embedding_config_spec: Optional[Any] = None,
) -> tf.compat.v1.estimator.tpu.TPUEstimator:
  """The TPUEstimator, with all three batch sizes set.

  A mode without a batch size would hand `input_fn` params without
  `batch_size` at all, so all three are always set. Off TPU with
  `host_iterations_per_loop` > 1, training runs that many steps per
  session.run (host_loop.py; by default a length chosen in config.py, which
  also ends a loop at every point of the training curves).

  Args:
    model_fn: the TPU model_fn.
    config: the validated trainer config.
    run_config: from `build_run_config`.
    params: what model_fn and input_fn receive (besides batch_size, use_tpu).
    warm_start_from: a checkpoint or SavedModel directory (the base model),
      or `warm_start_settings` of one.
    train_steps: the step training ends at, for the curves' cadence.
    embedding_config_spec: the module's TPU embedding tables
      (`tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec`).

  Returns:
    The estimator.
  """
  iterations = config.host_loop_length(
      None if train_steps is None else
      curves.cadence_steps(train_steps, run_config.save_summary_steps))
  if iterations > 1:
    model_fn = host_loop.wrap_model_fn(model_fn, iterations,
                                       auto=config.host_loop_is_auto)
  estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
      model_fn=model_fn,
      config=run_config,
      params=dict(params),
      use_tpu=config.use_tpu,
      train_batch_size=config.train_batch_size,
      eval_batch_size=config.eval_batch_size,
      predict_batch_size=config.predict_batch_size,
      eval_on_tpu=config.eval_on_tpu,
      export_to_tpu=config.export_to_tpu,
      export_to_cpu=True,
      warm_start_from=warm_start_from,
      embedding_config_spec=embedding_config_spec,
      export_saved_model_api_version=config.export_saved_model_api_version)
  if iterations > 1:
    host_loop.enable(estimator, iterations)
  return estimator
