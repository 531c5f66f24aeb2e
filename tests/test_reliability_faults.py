"""Reliability, round two (issue #14): retries keep metrics and checkpoints,
no silent success, bad inputs named before training, no leftovers."""

import json
import os
import re

import numpy as np
import pytest
from tfx.components.util import udf_utils
from tfx.dsl.components.base import base_executor
from tfx.proto.orchestration import pipeline_pb2
from tfx.utils import path_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.training import checkpoints
from tfx_tpu_trainer.training import evaluation

from tests.conftest import TEST_MODULES_DIR
from tests.fixtures import pipeline_outputs
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES

from_custom_config = config_lib.TrainerConfig.from_custom_config


def _context(run_id, node_id='TPUTrainer', pipeline_name='taxi'):
  return base_executor.BaseExecutor.Context(
      pipeline_info=pipeline_pb2.PipelineInfo(id=pipeline_name),
      pipeline_node=pipeline_pb2.PipelineNode(
          node_info=pipeline_pb2.NodeInfo(id=node_id)),
      pipeline_run_id=run_id)


def _metrics_json(run):
  with open(os.path.join(run.model_run.uri,
                         metrics_lib.METRICS_FILE_NAME)) as f:
    return json.load(f)


# Item 1, 2, 5: a retry after the export keeps the metrics and checkpoints;
# checkpoints and staging directories are tidied when no retry needs them.
@pytest.mark.slow
def test_retry_after_export_resumes_and_publishes_final_metrics(
    taxi_artifacts, tmp_path):
  base = str(tmp_path / 'checkpoints')
  config = dict(SMALL_BATCHES, checkpoint_dir=base)
  run_dir = os.path.join(base, 'taxi', 'run-1')
  model_dir = os.path.join(run_dir, 'TPUTrainer')

  def attempt(name, run_id):
    run = pipeline_outputs.trainer_run(
        taxi_artifacts, str(tmp_path / name), LINEAR_MODULE,
        custom_config=config, train_steps=12, eval_steps=2)
    executor.Executor(_context(run_id)).Do(run.input_dict, run.output_dict,
                                            run.exec_properties)
    return run

  first = attempt('attempt1', 'run-1')
  assert _metrics_json(first)['global_step'] == 12
  # The executor ended but the orchestrator has not published yet: the
  # checkpoints stay, so a retry of this run does not start from step 0.
  assert checkpoints.latest_step(model_dir) == 12
  assert os.path.exists(os.path.join(model_dir, checkpoints.EXPORTED_MARKER))
  # As an export killed mid-way would leave it: a recorded staging dir.
  stale = os.path.join(first.model.uri, export.STAGING_PREFIX + 'killed')
  os.makedirs(os.path.join(stale, 'partial'))
  with open(os.path.join(model_dir, checkpoints.STAGING_RECORD), 'w') as f:
    f.write(stale + '\n')

  retry = attempt('attempt2', 'run-1')  # Nothing left to train.
  metrics = _metrics_json(retry)
  assert metrics['global_step'] == 12
  assert 'loss' in metrics and 'accuracy' in metrics
  assert retry.model.get_int_custom_property('eval_global_step') == 12
  assert os.path.isdir(path_utils.serving_model_dir(retry.model.uri))
  assert not os.path.exists(stale)

  later = attempt('attempt3', 'run-2')  # A later pipeline run tidies run-1.
  assert _metrics_json(later)['global_step'] == 12
  assert not os.path.exists(run_dir)
  assert os.listdir(os.path.join(base, 'taxi')) == ['run-2']


def test_finished_runs_are_removed_and_unfinished_kept(tmp_path):
  pipeline_dir = tmp_path / 'ckpt' / 'taxi'
  for run, marker in (('done', True), ('failed', False), ('now', False)):
    node = pipeline_dir / run / 'TPUTrainer'
    node.mkdir(parents=True)
    (node / 'model.ckpt-5.index').write_text('x')
    if marker:
      (node / checkpoints.EXPORTED_MARKER).write_text('/model/1')
  (pipeline_dir / 'empty-old-run').mkdir()  # Left by earlier versions.
  removed = checkpoints.remove_finished_runs(
      str(pipeline_dir / 'now' / 'TPUTrainer'))
  assert removed == [str(pipeline_dir / 'done' / 'TPUTrainer')]
  assert sorted(os.listdir(pipeline_dir)) == ['failed', 'now']


def test_bookkeeping_files_are_not_copied_into_model_run(tmp_path):
  model_dir = tmp_path / 'ckpt'
  model_dir.mkdir()
  (model_dir / 'checkpoint').write_text('x')
  (model_dir / checkpoints.EXPORTED_MARKER).write_text('/m')
  (model_dir / checkpoints.STAGING_RECORD).write_text('/m/.export-1')
  checkpoints.copy_into_model_run(str(model_dir), str(tmp_path / 'run'))
  assert os.listdir(tmp_path / 'run') == ['checkpoint']


def test_only_recorded_staging_dirs_are_removed(tmp_path):
  record = tmp_path / 'record'
  stale = tmp_path / 'model' / '.export-abc'
  stale.mkdir(parents=True)
  other = tmp_path / 'model' / 'Format-Serving'
  other.mkdir()
  record.write_text(f'{stale}\n{other}\n')
  assert export.remove_recorded_staging_dirs(str(record)) == [str(stale)]
  assert other.exists() and not record.exists()


# Item 6: an exit from the user module fails the execution, naming it.
def test_module_that_exits_on_import_fails_naming_it():
  path = os.path.join(TEST_MODULES_DIR, 'exits_on_import.py')
  with pytest.raises(user_module.UserModuleError) as error:
    user_module.load_user_module({'module_file': path})
  assert (f"module_file '{path}' failed to import: it called sys.exit(0)"
          in str(error.value))


@pytest.mark.slow
@pytest.mark.parametrize('module_name,error_type,pattern', [
    ('exits_on_import.py', user_module.UserModuleError,
     r"module_file '.*exits_on_import.py' failed to import: it called "
     r'sys.exit\(0\)'),
    ('exits_in_model_fn.py', errors.ModuleExitError,
     r'The execution was ended by SystemExit\(0\) while running '
     r'.*exits_in_model_fn.py'),
])
def test_module_exit_fails_the_execution(taxi_artifacts, tmp_path,
                                         module_name, error_type, pattern):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'),
      os.path.join(TEST_MODULES_DIR, module_name),
      custom_config=SMALL_BATCHES, train_steps=5, eval_steps=1)
  with pytest.raises(error_type, match=pattern):
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))


@pytest.mark.slow
def test_module_exit_in_a_packaged_run_names_the_users_module_file(
    taxi_artifacts, tmp_path):
  # As in a pipeline run: TFX packages module_file as a wheel and passes
  # 'name@wheel'; TPUTrainer names the user's path in an exec property.
  module_file = os.path.join(TEST_MODULES_DIR, 'exits_in_model_fn.py')
  _, module_path = udf_utils.package_user_module_file(
      'TPUTrainer', module_file, str(tmp_path / 'root'))
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), module_file,
      custom_config=SMALL_BATCHES, train_steps=5, eval_steps=1)
  exec_properties = dict(run.exec_properties, module_path=module_path,
                         **{user_module.USER_MODULE_FILE_KEY: module_file})
  del exec_properties['module_file']
  with pytest.raises(errors.ModuleExitError) as error:
    executor.Executor().Do(run.input_dict, run.output_dict, exec_properties)
  assert f'while running {module_file} (' in str(error.value)
  assert '.whl' not in str(error.value)


# Item 7: checkpoint_dir is absolute or a URI, created and probed first.
def test_relative_checkpoint_dir_is_refused():
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['checkpoint_dir'\]='ckpt' is a "
                     'relative path'):
    from_custom_config({'checkpoint_dir': 'ckpt'}, environ={})
  assert from_custom_config({'checkpoint_dir': 'gs://b/c'},
                            environ={}).checkpoint_dir == 'gs://b/c'


def _unwritable_dirs(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')
  cases = [(str(blocker / 'ckpt'), 'under a regular file'),
           ('/proc/tfx_tpu_trainer_ckpt', 'read-only file system')]
  if os.geteuid() != 0:  # root writes through permission bits.
    read_only = tmp_path / 'read_only'
    read_only.mkdir()
    read_only.chmod(0o555)
    cases.append((str(read_only / 'ckpt'), 'read-only directory'))
  return cases


def test_unwritable_checkpoint_dir_is_one_clear_error(tmp_path):
  for base, case in _unwritable_dirs(tmp_path):
    with pytest.raises(checkpoints.CheckpointDirError) as error:
      checkpoints.resumable_model_dir(_context('run-1'), '/p/T/model/1', base)
    message = str(error.value)
    assert message.startswith(
        f'Cannot create the checkpoint directory {base}/taxi/run-1/'
        f"TPUTrainer (custom_config['checkpoint_dir']={base!r}): "), case
    assert 'point checkpoint_dir at a writable directory' in message, case


def test_checkpoint_dir_is_created_and_probed(tmp_path):
  model_dir = checkpoints.resumable_model_dir(
      _context('run-1'), '/p/T/model/1', str(tmp_path / 'ckpt'))
  # The probe is gone; the run's start is recorded (earlier runs are told
  # from later ones by it).
  assert os.path.isdir(model_dir) and os.listdir(model_dir) == [
      checkpoints.STARTED_MARKER]


@pytest.mark.slow
def test_unwritable_checkpoint_dir_fails_before_training(taxi_artifacts,
                                                         tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('x')
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), LINEAR_MODULE,
      custom_config=dict(SMALL_BATCHES, checkpoint_dir=str(blocker / 'c')),
      train_steps=5, eval_steps=1)
  with pytest.raises(checkpoints.CheckpointDirError,
                     match=r"custom_config\['checkpoint_dir'\]="):
    executor.Executor(_context('run-1')).Do(
        run.input_dict, run.output_dict, run.exec_properties)
  assert not os.path.exists(run.model_run.uri)


# Item 9: NaN or infinite final eval metrics fail the execution.
def test_non_finite_metrics_are_refused_unless_allowed():
  with pytest.raises(evaluation.NonFiniteMetricsError) as error:
    evaluation.check_finite({'accuracy': np.float32('nan'), 'loss': 0.5,
                             'auc': float('inf'), 'global_step': 10})
  assert "non-finite metrics {'accuracy': nan, 'auc': inf}" in str(error.value)
  assert "custom_config['allow_nonfinite_metrics']=true" in str(error.value)
  evaluation.check_finite({'loss': 0.5, 'global_step': 10})
  assert from_custom_config({'allow_nonfinite_metrics': True},
                            environ={}).allow_nonfinite_metrics
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['allow_nonfinite_metrics'\] must "
                     'be true or false'):
    from_custom_config({'allow_nonfinite_metrics': 'yes'}, environ={})


@pytest.mark.slow
def test_nan_eval_metrics_fail_the_execution(taxi_artifacts, tmp_path):
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'),
      os.path.join(TEST_MODULES_DIR, 'nan_eval_module.py'),
      custom_config=SMALL_BATCHES, train_steps=5, eval_steps=1)
  with pytest.raises(evaluation.NonFiniteMetricsError,
                     match=r"non-finite metrics \{'accuracy': nan, 'loss': "
                     r'nan\}, so no model was published'):
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))


# Item 10: the small ones.
@pytest.mark.parametrize('custom_config,message', [
    ({'train_batch_size': 2**63},
     f"custom_config['train_batch_size']={2**63} is too large"),
    ({'eval_batch_size': 2**70},
     "custom_config['eval_batch_size']"),
    ({'keep_checkpoint_max': -1},
     "custom_config['keep_checkpoint_max'] must be an integer >= 0"),
])
def test_out_of_range_values_are_config_errors(custom_config, message):
  with pytest.raises(config_lib.ConfigError) as error:
    from_custom_config(custom_config, environ={})
  assert message in str(error.value)


def test_keep_checkpoint_max_zero_keeps_all():
  from tfx_tpu_trainer.training import estimator_builder  # pylint: disable=g-import-not-at-top
  config = from_custom_config({'keep_checkpoint_max': 0}, environ={})
  assert config.keep_checkpoint_max == 0
  assert estimator_builder.build_run_config(
      config, '/tmp/unused').keep_checkpoint_max == 0


def test_huge_train_steps_are_refused():
  config = from_custom_config({}, environ={})
  with pytest.raises(config_lib.ConfigError,
                     match=r'train_args.num_steps=\d+ does not fit'):
    config.check_steps(2**63, 1)


def test_uncompressed_tfrecord_is_named_as_such(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.data import data_checks  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'data-00000-of-00001')
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(3):
      writer.write(tf.train.Example().SerializeToString())
  with pytest.raises(data_checks.DataError) as error:
    data_checks.check_first_batch([path], 'train', 2, 'train_batch_size')
  assert re.search(rf'{re.escape(path)} is an uncompressed TFRecord file; '
                   'TPUTrainer reads GZIP-compressed TFRecords',
                   str(error.value)), str(error.value)

