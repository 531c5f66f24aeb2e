"""The TPUTrainer executor: trains a TPUEstimator from a user module."""

import contextlib
import dataclasses
import os
import time
from typing import Any, Dict, List, Optional

from absl import logging
import tensorflow as tf
from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.trainer import fn_args_utils
from tfx.dsl.io import fileio
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer import user_module as user_module_lib
from tfx_tpu_trainer.data import data_checks
from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import embedding_feed
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.preflight import checks as preflight_checks
from tfx_tpu_trainer.preflight import cpu_graphs
from tfx_tpu_trainer.preflight import embedding_checks
from tfx_tpu_trainer.preflight import label_range
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.publishing import secrets
from tfx_tpu_trainer.publishing import step_outputs as kfp_outputs
from tfx_tpu_trainer.publishing import training_report
from tfx_tpu_trainer.publishing import v2_metrics
from tfx_tpu_trainer.tpu import worker_group
from tfx_tpu_trainer.training import checkpoints
from tfx_tpu_trainer.training import cluster
from tfx_tpu_trainer.training import disk_full
from tfx_tpu_trainer.training import estimator_builder
from tfx_tpu_trainer.training import finite_variables
from tfx_tpu_trainer.training import schedule
from tfx_tpu_trainer.training import tpu_connect
from tfx_tpu_trainer.training import tpu_slice

__all__ = ['is_chief', 'Executor']


def is_chief() -> bool:
  """True unless TF_CONFIG names this task a non-chief (cluster.py)."""
  return cluster.is_chief()


class Executor(trainer_executor.GenericExecutor):
  """Trains a TPUEstimator from the module's model_fn; exports serve+tpu."""

  @errors.fail_on_exit(user_module_lib.module_name)
  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Validates, trains and evaluates, exports, and records metrics.

    Every check of config, module and data runs before training; the model
    appears under `Format-Serving` only complete, as the last step, so a
    failure anywhere leaves no model.

    Args:
      input_dict: examples, and optionally transform_graph, schema,
        base_model, hyperparameters.
      output_dict: model, model_run and (when declared) metrics.
      exec_properties: the Trainer's: module_file or module_path,
        train_args, eval_args, custom_config (see config.py); and
        user_module_file, how errors name the module
        (component.TPUTrainerSpec).
    """
    # Secrets in custom_config or Beam args never reach the log.
    secrets.mask_logs()
    self._log_startup(input_dict, output_dict, exec_properties)
    # A compiled multi-host step: the worker group's names, for the config.
    worker_group.announce(worker_group.plan())
    # Check: every input, before anything is built.
    _check_splits(input_dict, exec_properties)
    fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
    config = config_lib.TrainerConfig.from_custom_config(fn_args.custom_config)
    config.check_steps(fn_args.train_steps, fn_args.eval_steps)
    config.check_warm_start(fn_args.base_model is not None)
    tpu_slice.check_driver(config, {
        'train data': fn_args.train_files, 'eval data': fn_args.eval_files,
        'custom_config[\'checkpoint_dir\']': [config.checkpoint_dir],
        'the model_run artifact': [fn_args.model_run_dir]})
    # A TPU named by address answers before anything is built (a bounded
    # wait, custom_config['tpu_wait_secs']), not at step 0.
    tpu_connect.wait_for_tpu(config)
    module = user_module_lib.load_user_module(exec_properties)
    schemas = schemas_lib.load_schemas(fn_args.schema_path,
                                       fn_args.transform_graph_path)
    model = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.MODEL_KEY])
    # Where the estimator will train (created later): params['model_dir'].
    model_dir = checkpoints.resumable_dir_path(
        self._context, model.uri, config.checkpoint_dir) or (
            fn_args.model_run_dir)
    # Prepare: label key, params, model_fn, input and serving functions.
    run = prepare.prepare_run(config, module, schemas,
                              fn_args.hyperparameters, fn_args,
                              model_dir=model_dir)
    train_input_fn, eval_input_fn = _build_input_fns(
        fn_args, config, run, cache_dir=checkpoints.input_cache_dir(
            self._context, model.uri, config.checkpoint_dir))
    # Preflight: the data's first batches, and the graphs as TPUEstimator
    # will build them (XLA-compiled as on a TPU when use_tpu).
    _check_before_training(fn_args, config, run)
    # Train.
    resumable_dir = checkpoints.resumable_model_dir(self._context, model.uri,
                                                    config.checkpoint_dir)
    train_start = time.time()
    # One attempt at a time trains, exports and marks the directory (the
    # chief's: workers of a distributed run share it with their chief).
    with checkpoints.hold(resumable_dir if is_chief() else None):
      estimator, final_metrics = _train(fn_args, config, run, train_input_fn,
                                        eval_input_fn,
                                        resumable_dir or fn_args.model_run_dir)
      if not is_chief():
        logging.info('Not the chief: export and metrics are left to the '
                     'chief.')
        return
      # Publish: metrics and report, then the model (the commit point), then
      # MLMD; only finite weights (finite_variables.py).
      if not config.allow_nonfinite_variables:
        finite_variables.check_final_variables(estimator.model_dir,
                                               run.module.module_file)
      _publish(estimator, run.serving_input_receiver_fn, final_metrics, model,
               fn_args, resumable_dir,
               cpu_only_estimator=_cpu_only_estimator(fn_args, config, run,
                                                      estimator.model_dir),
               report_config=_report_config(config, fn_args, run),
               timings={'training and evaluation': time.time() - train_start},
               metrics_output=_single_output(output_dict,
                                             v2_metrics.OUTPUT_KEY),
               source=prepare.model_fn_source(run.module))


def _check_before_training(fn_args: fn_args_utils.FnArgs,
                           config: config_lib.TrainerConfig,
                           run: prepare.PreparedRun) -> None:
  """Everything that can fail before the first step, in seconds.

  Both splits yield a first batch; with use_tpu the TPU preflight
  XLA-compiles the train, eval and predict steps as a TPU would; on CPU the
  eval and export graphs, which training reaches only at its end, are built
  as TPUEstimator will build them, and TPU embedding tables are checked
  against the data, the model_fn and the memory (the TPU preflight checks
  them too). Last, the labels of the first batches
  are checked against what the model's loss accepts (label_range.py).
  """
  data_checks.check_first_batch(fn_args.train_files, 'train',
                                config.train_batch_size, 'train_batch_size')
  data_checks.check_first_batch(fn_args.eval_files, 'eval',
                                config.eval_batch_size, 'eval_batch_size')
  sample_train_fn, sample_eval_fn = _build_input_fns(fn_args, config, run,
                                                     cache='none', fed=False)
  if config.use_tpu:
    preflight_checks.check_before_training(run, config, sample_train_fn)
  else:
    if run.embedding is not None:
      embedding_checks.check_before_training(run, config, sample_train_fn)
    cpu_graphs.check_graphs_before_training(run, config, sample_eval_fn)
  label_range.check_first_labels(run, config, [
      label_range.SplitSample('train', fn_args.train_files, sample_train_fn,
                              config.train_batch_size),
      label_range.SplitSample('eval', fn_args.eval_files, sample_eval_fn,
                              config.eval_batch_size)])


def _train(fn_args: fn_args_utils.FnArgs, config: config_lib.TrainerConfig,
           run: prepare.PreparedRun, train_input_fn, eval_input_fn,
           model_dir: str):
  """Trains in `model_dir`; returns the estimator and the final metrics."""
  with worker_group.launched(worker_group.plan()), tpu_slice.driving(
      tpu_slice.worker_addresses(config), model_dir, checkpoints.latest_step):
    return _train_on(fn_args, config, run, train_input_fn, eval_input_fn,
                     model_dir)


def _train_on(fn_args, config, run, train_input_fn, eval_input_fn, model_dir):
  """`_train` once a multi-host slice's workers answered."""
  estimator = _build_estimator(fn_args, config, run, model_dir)
  logging.info('Training from step %d to %d in %s (eval_strategy=%s, '
               'use_tpu=%s).', checkpoints.latest_step(model_dir),
               fn_args.train_steps, model_dir, config.eval_strategy,
               config.use_tpu)
  with _explain_training_errors(fn_args, run, os.path.join(
      model_dir, checkpoints.INPUT_CACHE_DIR)), disk_full.translate_disk_full(
      f'training (writing checkpoints and events to {model_dir})', model_dir,
      'Free space there, or set custom_config[\'checkpoint_dir\'] to a file '
      'system with more room (keep_checkpoint_max bounds how many '
      'checkpoints are kept); a retry of this pipeline run resumes from the '
      'last complete checkpoint. No model was exported.',
      clean_up=lambda: disk_full.remove_partial_writes(model_dir),
      written=lambda: disk_full.bytes_under(model_dir)):
    final_metrics = schedule.train_and_evaluate(
        estimator, config, train_input_fn, eval_input_fn,
        fn_args.train_steps, fn_args.eval_steps)
  return estimator, final_metrics


def _publish(estimator, serving_input_receiver_fn, final_metrics, model,
             fn_args, resumable_dir, report_config=None, timings=None,
             metrics_output=None, source='the model_fn',
             cpu_only_estimator=None) -> None:
  """Fills model_run, exports the model last, then marks the checkpoints.

  The training report (report.py) is written into model_run before the
  export; a failure to write it is logged, never raised.

  The checkpoints stay until a later pipeline run (checkpoints.py): the
  orchestrator has yet to publish this execution, and a retry of this run
  must resume from them rather than from step 0.
  """
  metrics = metrics_lib.to_python(final_metrics or {})
  with _explain_full_model_run(fn_args.model_run_dir, resumable_dir):
    if resumable_dir:
      checkpoints.copy_into_model_run(resumable_dir, fn_args.model_run_dir)
    metrics_path = metrics_lib.write_metrics_json(metrics,
                                                  fn_args.model_run_dir)
  report_path = training_report.write_report_safely(
      fn_args.model_run_dir, final_metrics=metrics, config=report_config,
      timings=timings)
  export.export_serving_model(
      estimator, serving_input_receiver_fn, fn_args.serving_model_dir,
      staging_record=(os.path.join(resumable_dir, checkpoints.STAGING_RECORD)
                      if resumable_dir else None), source=source,
      cpu_only_estimator=cpu_only_estimator)
  metrics_lib.record_on_artifact(metrics, model)
  v2_metrics.record_metrics(metrics, metrics_output)
  kfp_outputs.write_kfp_ui_outputs(metrics, fn_args.model_run_dir,
                                   report_path=report_path)
  logging.info('Final evaluation: %s (written to %s).', metrics, metrics_path)
  if resumable_dir:
    checkpoints.mark_exported(resumable_dir, model.uri)
    # The model is out: no attempt trains from the parsed split again.
    checkpoints.remove_input_cache(resumable_dir)


def _explain_full_model_run(model_run_dir: str,
                            resumable_dir: Optional[str]):
  """A full disk while filling model_run: one error, model_run emptied."""
  kept = (f'the checkpoints in {resumable_dir} are kept, so a retry of this '
          'pipeline run exports without training again'
          if resumable_dir else 'the training has to run again')

  def empty_model_run():
    if not fileio.isdir(model_run_dir):
      return
    for name in fileio.listdir(model_run_dir):
      path = os.path.join(model_run_dir, name.rstrip('/'))
      if fileio.isdir(path):
        fileio.rmtree(path)
      else:
        fileio.remove(path)

  return disk_full.translate_disk_full(
      'filling model_run (checkpoint copies and metrics)', model_run_dir,
      f'Free space on the file system of the model_run artifact and retry: '
      f'{kept}. model_run was emptied and no model was exported.',
      clean_up=empty_model_run,
      written=lambda: disk_full.bytes_under(model_run_dir))


def _single_output(output_dict, key: str) -> Optional[types.Artifact]:
  """The one artifact of an optional output (None when not declared)."""
  artifacts = output_dict.get(key) or []
  return artifacts[0] if len(artifacts) == 1 else None


def _report_config(config: config_lib.TrainerConfig,
                   fn_args: fn_args_utils.FnArgs,
                   run: prepare.PreparedRun) -> Dict[str, Any]:
  """The settings the training report lists."""
  settings = {f'custom_config.{name}': value
              for name, value in dataclasses.asdict(config).items()}
  settings.update({
      'train_args.num_steps': fn_args.train_steps,
      'eval_args.num_steps': fn_args.eval_steps,
      'module_file': run.module.module_file,
      'label_key': run.label_key,
  })
  return settings


def _check_splits(input_dict, exec_properties) -> None:
  """Names a missing split before TFX's own lookup fails less clearly."""
  examples = input_dict[standard_component_specs.EXAMPLES_KEY]
  for key, proto, default in (
      (standard_component_specs.TRAIN_ARGS_KEY, trainer_pb2.TrainArgs(),
       'train'),
      (standard_component_specs.EVAL_ARGS_KEY, trainer_pb2.EvalArgs(), 'eval')):
    proto_utils.json_to_proto(exec_properties[key], proto)
    data_checks.check_splits(examples, list(proto.splits) or [default], key)


@contextlib.contextmanager
def _explain_training_errors(fn_args: fn_args_utils.FnArgs,
                             run: prepare.PreparedRun, cache_dir: str):
  """Data errors name their file and record (or the damaged block of the
  input cache in `cache_dir`); NaN loss says so plainly."""
  try:
    with data_checks.explain_data_errors(
        {'train': fn_args.train_files, 'eval': fn_args.eval_files},
        schemas_lib.feature_spec(run.schemas.examples), run.label_key
    ), disk_cache.explain_damage(cache_dir):
      yield
  except tf.compat.v1.train.NanLossDuringTrainingError as e:
    raise errors.TPUTrainerError(
        f'Training stopped: the loss of model_fn in {run.module.module_file} '
        'became NaN, so no model was exported. Lower the learning rate, clip '
        'gradients, or check the inputs for NaN/inf values.') from e


def _build_estimator(fn_args: fn_args_utils.FnArgs,
                     config: config_lib.TrainerConfig,
                     run: prepare.PreparedRun, model_dir: str):
  run_config = estimator_builder.build_run_config(
      config, model_dir,
      embedding_lookups_on_cpu=run.embedding is not None and not config.use_tpu)
  return estimator_builder.build_estimator(
      run.model_fn,
      config,
      run_config,
      run.params,
      warm_start_from=estimator_builder.warm_start_settings(
          config, fn_args.base_model),
      train_steps=fn_args.train_steps,
      embedding_config_spec=run.embedding.spec if run.embedding else None)


def _cpu_only_estimator(fn_args, config, run, model_dir):
  """With TPU embeddings: the estimator that exports {serve} alone.

  TPUEstimator's {serve, tpu} graph of some embedding columns (sequence
  columns, lookups on the TensorCore) fails to build in TF 2.15; the export
  then keeps the CPU graph (publishing/export.py). None without embeddings
  or when no {serve, tpu} graph is asked for.
  """
  if run.embedding is None or not config.export_to_tpu:
    return None
  return _build_estimator(
      fn_args, dataclasses.replace(config, export_to_tpu=False), run,
      model_dir)


def _build_input_fns(fn_args: fn_args_utils.FnArgs,
                     config: config_lib.TrainerConfig,
                     run: prepare.PreparedRun,
                     cache: Optional[str] = None,
                     cache_dir: Optional[str] = None,
                     fed: bool = True):
  """Train and eval input_fns; `cache` overrides config.input_cache.

  `cache_dir` holds input_cache="disk"'s parsed split (None: it streams).
  With `fed` (the estimator's input), the features of TPU embedding columns
  reach a TPU as their sparse ids (data/embedding_feed.py); the checks
  before training read the raw features.
  """
  cache = cache or config.input_cache
  if run.module.input_fn is None:
    input_fns.check_cache_mode(cache,
                               schemas_lib.feature_spec(run.schemas.examples))
  train_input_fn = run.input_fn(
      fn_args.train_files, fn_args.data_accessor, training=True, repeat=True,
      cache=cache, shuffle=config.input_shuffle, cache_dir=cache_dir,
      table_first=config.eval_strategy == 'alternate')
  eval_input_fn = run.input_fn(
      fn_args.eval_files, fn_args.data_accessor, training=False,
      repeat=fn_args.eval_steps is not None, cache=cache,
      shuffle=config.input_shuffle)
  if fed and run.embedding is not None and config.use_tpu:
    # On a TPU the embedding ids go to TPU embedding as sparse rows; off it
    # (and for an evaluation off the TPU) the columns look raw features up.
    columns = run.embedding.columns
    train_input_fn = embedding_feed.fed_input_fn(train_input_fn, columns)
    if config.eval_on_tpu:
      eval_input_fn = embedding_feed.fed_input_fn(eval_input_fn, columns)
  return train_input_fn, eval_input_fn
