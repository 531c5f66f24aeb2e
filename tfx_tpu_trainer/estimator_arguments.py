"""What becomes of TPUEstimator's arguments and a TPU model's flags."""

from typing import Any, Mapping, Optional

__all__ = ['KEYS_TAKEN_ELSEWHERE', 'RUN_PARAMS', 'param_disagreement']

# The params TPUTrainer sets from the run (prepare.build_params), beside
# those it sets from the config (`TrainerConfig.config_params`): a
# tensorflow/tpu model reads them where it read its FLAGS
# (docs/reference/tpu_estimator.md, "Where flags go").
RUN_PARAMS = ('train_steps', 'eval_steps', 'model_dir')
# Where a param TPUTrainer sets comes from, as errors name it (default:
# the custom_config key of its name).
_PARAM_SOURCES = {
    'train_steps': 'train_args.num_steps',
    'eval_steps': 'eval_args.num_steps',
    'model_dir': "the training directory (custom_config['checkpoint_dir'] "
                 'moves it)',
    'precision': "custom_config['bfloat16']",
    'use_bfloat16': "custom_config['bfloat16']",
}
# TPUEstimator / TPUConfig / RunConfig / WarmStartSettings arguments that
# are no key: what TPUTrainer does instead, or why it refuses them. A user
# who writes one into custom_config reads this rather than "unknown key";
# docs/reference/tpu_estimator.md tells every argument
# (tests/test_tpu_estimator_doc.py checks both against the installed
# signatures).
KEYS_TAKEN_ELSEWHERE = {
    # Refused: what TPUTrainer does not run.
    'num_cores_per_replica': (
        'model parallelism is not supported: TPUTrainer trains one replica '
        'per TPU core (data parallelism); its preflight, batch-size checks '
        'and export assume it. Leave it out: each core holds the whole model.'),
    'input_partition_dims': (
        'spatial partitioning is not supported: it needs model parallelism '
        '(num_cores_per_replica), which TPUTrainer does not run. Leave it '
        'out, or shrink the inputs (e.g. smaller images) to fit one core.'),
    'embedding_config_spec': (
        'TPU embedding tables are not supported yet: TPUTrainer passes no '
        'EmbeddingConfigSpec. Embed inside the model_fn (dense variables).'),
    'var_name_to_vocab_info': (
        'vocabulary remapping is not supported: warm-started embeddings '
        'must keep the base model\'s vocabulary.'),
    'train_distribute': 'TPUEstimator replicates over the TPU cores itself; '
                        'distribution strategies do not apply to it.',
    'eval_distribute': 'TPUEstimator replicates over the TPU cores itself; '
                       'distribution strategies do not apply to it.',
    'experimental_distribute': 'TPUEstimator replicates over the TPU cores '
                               'itself; distribution strategies do not apply '
                               'to it.',
    'experimental_feed_hook': (
        'a Python class cannot travel in custom_config (JSON); TPUEstimator '
        'runs its own infeed/outfeed hook.'),
    'batch_axis': (
        'batches split on their first axis (TPUEstimator ignores batch_axis '
        'with PER_HOST_V2, the default, and with PER_SHARD_V1).'),
    # Set by TPUTrainer, from the pipeline or the TPU.
    'model_fn': ('define model_fn(features, labels, mode, params) in the '
                 'module_file (or build_keras_model(params)).'),
    'model_dir': (
        'TPUTrainer picks the training directory (custom_config'
        "['checkpoint_dir'] moves it); model_fns read it as "
        "params['model_dir']."),
    'config': 'TPUTrainer builds the RunConfig and TPUConfig from the keys.',
    'tpu_config': 'TPUTrainer builds the TPUConfig from the keys.',
    'master': "set from the TPU named by custom_config['tpu'] (or TPU_NAME).",
    'evaluation_master': ("set from the TPU named by custom_config['tpu'] "
                          '(or TPU_NAME), as master.'),
    'cluster': (
        'never passed: with cluster= train_and_evaluate would not evaluate '
        "(tensorflow/tpu#606); custom_config['tpu'] is resolved into master "
        'and the session\'s cluster.'),
    'session_config': ('set by TPUTrainer (the TPU\'s or the slice\'s '
                       'cluster, a TF_CONFIG cluster).'),
    'device_fn': ('set by TPUTrainer for TF_CONFIG workers and CPU '
                  'rehearsals of a slice.'),
    'tpu_job_name': ('TPUEstimator infers it (or reads TF_CONFIG\'s '
                     'service.tpu_worker_job_name).'),
    'export_to_cpu': ('always true: the {serve} graph is the one the '
                      'Evaluator and Pusher load.'),
    'train_steps': "set it as TrainArgs(num_steps=N) (params['train_steps']).",
    'eval_steps': "set it as EvalArgs(num_steps=N) (params['eval_steps']).",
    'warm_start_from': (
        "give the model to start from as the TPUTrainer's base_model input; "
        'vars_to_warm_start and var_name_to_prev_var_name select and rename '
        'its variables.'),
    'ckpt_to_initialize_from': (
        "the TPUTrainer's base_model input is the model warm-started from."),
    'per_host_input_for_training': "use custom_config['per_host_input'].",
    'precision': "use custom_config['bfloat16']: true (params['precision'] "
                 "is then 'bfloat16').",
    'use_bfloat16': "use custom_config['bfloat16'].",
    # RunConfig's defaults, kept.
    'eval_training_input_configuration': (
        'kept at PER_HOST_V1 (TPUConfig\'s default): evaluation input '
        "follows custom_config['per_host_input']."),
    'save_checkpoints_secs': (
        "checkpoints follow custom_config['save_checkpoints_steps'] (or "
        'eval_every_steps); without either, RunConfig\'s default of every '
        '600 s.'),
    'save_summary_steps': "RunConfig's default (every 100 steps) is kept.",
    'log_step_count_steps': (
        "RunConfig's default (every 100 steps) is kept; the host loop ends "
        'at its multiples.'),
    'keep_checkpoint_every_n_hours': "RunConfig's default is kept; use "
                                     "custom_config['keep_checkpoint_max'].",
    'protocol': "RunConfig's default (grpc) is kept.",
    'experimental_max_worker_delay_secs': "RunConfig's default is kept.",
    'session_creation_timeout_secs': "RunConfig's default (7200 s) is kept.",
    'checkpoint_save_graph_def': "RunConfig's default (true) is kept.",
}


def _param_source(key: str) -> str:
  return _PARAM_SOURCES.get(key, f'custom_config[{key!r}]')


def _same(value: Any, derived: Any) -> bool:
  return value == derived and isinstance(value, bool) == isinstance(
      derived, bool)


def param_disagreement(given: Mapping[str, Any], derived: Mapping[str, Any],
                       where: str) -> Optional[str]:
  """What is wrong when a param the user gave differs from TPUTrainer's.

  Args:
    given: params from the user (custom_config['params'], hyperparameters).
    derived: the values TPUTrainer sets for the model (from the config and
      the run).
    where: how the message names `given` (e.g. "custom_config['params']").

  Returns:
    The message for the first param (by name) whose values differ, naming
    both values, where each comes from and what to do; None when all agree.
  """
  for key in sorted(set(given) & set(derived)):
    if not _same(given[key], derived[key]):
      return (
          f'{where} sets {key!r}={given[key]!r}, but TPUTrainer sets '
          f"params[{key!r}]={derived[key]!r} from {_param_source(key)}, "
          'which the estimator uses: the model would read one value while '
          f'training runs with the other. Set {_param_source(key)} instead, '
          f'and drop {key!r} from {where}.')
  return None
