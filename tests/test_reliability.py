"""Reliability: resume after a kill, atomic outputs, bad input loses nothing."""

import glob
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf
from tfx.dsl.components.base import base_executor
from tfx.proto.orchestration import pipeline_pb2
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_tpu_trainer import errors
from tfx_tpu_trainer import executor
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer.training import checkpoints

from tests.fixtures import pipeline_outputs
from tests.conftest import REPO_ROOT
from tests.conftest import TEST_MODULES_DIR
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES



def _context(run_id, node_id='TPUTrainer', pipeline_name='taxi'):
  return base_executor.BaseExecutor.Context(
      pipeline_info=pipeline_pb2.PipelineInfo(id=pipeline_name),
      pipeline_node=pipeline_pb2.PipelineNode(
          node_info=pipeline_pb2.NodeInfo(id=node_id)),
      pipeline_run_id=run_id)


def test_resumable_dir_depends_on_pipeline_run_and_component():
  model_uri = '/root/pipelines/taxi/TPUTrainer/model/7'
  default = checkpoints.resumable_dir_path(_context('run-1'), model_uri, None)
  assert default == '/root/pipelines/taxi/_checkpoints/taxi/run-1/TPUTrainer'
  # A retry (new execution, new URIs) of the same run finds the same place.
  assert checkpoints.resumable_dir_path(
      _context('run-1'), '/root/pipelines/taxi/TPUTrainer/model/9',
      None) == default
  assert checkpoints.resumable_dir_path(_context('run-2'), model_uri,
                                         None) != default
  assert checkpoints.resumable_dir_path(
      _context('2026-11-29T19:17:21.872016'), model_uri,
      'gs://bucket/ckpt') == (
          'gs://bucket/ckpt/taxi/2026-11-29T19_17_21.872016/TPUTrainer')
  assert checkpoints.resumable_dir_path(None, model_uri, None) is None


@pytest.mark.parametrize('tf_config,chief', [
    (None, True),
    ({'cluster': {}, 'task': {'type': 'worker', 'index': 1}}, True),
    ({'cluster': {'chief': ['a:1'], 'worker': ['b:1']},
      'task': {'type': 'chief', 'index': 0}}, True),
    ({'cluster': {'chief': ['a:1'], 'worker': ['b:1']},
      'task': {'type': 'worker', 'index': 0}}, False),
    ({'cluster': {'master': ['a:1'], 'worker': ['b:1']},
      'task': {'type': 'master', 'index': 0}}, True),
    ({'cluster': {'chief': ['a:1'], 'evaluator': ['c:1']},
      'task': {'type': 'evaluator', 'index': 0}}, False),
])
def test_only_the_chief_publishes(monkeypatch, tf_config, chief):
  if tf_config is None:
    monkeypatch.delenv('TF_CONFIG', raising=False)
  else:
    monkeypatch.setenv('TF_CONFIG', json.dumps(tf_config))
  assert executor.is_chief() is chief


def _write_spec(path, run, run_id):
  spec = {
      'input_dict': artifact_utils.jsonify_artifact_dict(run.input_dict),
      'output_dict': artifact_utils.jsonify_artifact_dict(run.output_dict),
      'exec_properties': run.exec_properties,
      'pipeline_name': 'taxi',
      'pipeline_run_id': run_id,
      'node_id': 'TPUTrainer',
  }
  path.write_text(json.dumps(spec))
  return str(path)


def _start_executor(spec_path, log_path):
  log = open(log_path, 'w')
  return subprocess.Popen(
      [sys.executable, '-m', 'tests.fixtures.executor_subprocess', spec_path],
      cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)


def _checkpoint_step(model_dir):
  state = os.path.join(model_dir, 'checkpoint')
  if not os.path.exists(state):
    return 0
  match = re.search(r'model_checkpoint_path: ".*model.ckpt-(\d+)"',
                    open(state).read())
  return int(match.group(1)) if match else 0


@pytest.mark.slow
@pytest.mark.heavy
def test_killed_trainer_resumes_from_its_checkpoint(taxi_artifacts, tmp_path):
  checkpoint_base = str(tmp_path / 'checkpoints')
  config = dict(SMALL_BATCHES, checkpoint_dir=checkpoint_base,
                save_checkpoints_steps=25, params={'step_seconds': 0.02})
  model_dir = os.path.join(checkpoint_base, 'taxi', 'run-1', 'TPUTrainer')
  first = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'attempt1'), LINEAR_MODULE,
      custom_config=config, train_steps=300, eval_steps=2)
  process = _start_executor(
      _write_spec(tmp_path / 'spec1.json', first, 'run-1'),
      tmp_path / 'attempt1.log')
  deadline = time.time() + 240
  while _checkpoint_step(model_dir) < 50:
    assert process.poll() is None, open(tmp_path / 'attempt1.log').read()
    assert time.time() < deadline, 'no checkpoint past step 50 in time'
    time.sleep(0.05)
  process.send_signal(signal.SIGKILL)  # As a preempted pod.
  process.wait()
  killed_at = _checkpoint_step(model_dir)
  assert 50 <= killed_at < 300
  assert not os.path.exists(path_utils.serving_model_dir(first.model.uri))

  retry = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'attempt2'), LINEAR_MODULE,
      custom_config=config, train_steps=300, eval_steps=2)
  process = _start_executor(
      _write_spec(tmp_path / 'spec2.json', retry, 'run-1'),
      tmp_path / 'attempt2.log')
  assert process.wait(timeout=300) == 0, open(tmp_path / 'attempt2.log').read()
  log = open(tmp_path / 'attempt2.log').read()
  resumed_from = int(re.search(r'Training from step (\d+) to 300', log).group(1))
  assert resumed_from >= killed_at
  metrics = json.load(open(os.path.join(retry.model_run.uri,
                                        metrics_lib.METRICS_FILE_NAME)))
  assert metrics['global_step'] == 300
  assert tf.train.latest_checkpoint(retry.model_run.uri).endswith(
      'model.ckpt-300')
  # Copied into model_run; kept (marked exported) until a later run, in case
  # the orchestrator's publish fails and this run is retried.
  assert os.path.exists(os.path.join(model_dir, checkpoints.EXPORTED_MARKER))
  exported = glob.glob(str(tmp_path / 'attempt*' / 'model' / 'Format-Serving'))
  assert exported == [path_utils.serving_model_dir(retry.model.uri)]


def _copy_examples(source, destination, splits=('train', 'eval')):
  """Copies an Examples artifact's splits; returns the new artifact."""
  examples = standard_artifacts.Examples()
  examples.uri = destination
  examples.split_names = artifact_utils.encode_split_names(list(splits))
  for split in splits:
    shutil.copytree(artifact_utils.get_split_uri([source], split),
                    artifact_utils.get_split_uri([examples], split))
  return examples


def _only_file(examples, split):
  files = glob.glob(os.path.join(
      artifact_utils.get_split_uri([examples], split), '*'))
  assert len(files) == 1
  return files[0]


def _rewrite_records(path, edit, keep_first=0):
  """Rewrites a gzip TFRecord file, editing every record after keep_first."""
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      path, compression_type='GZIP')]
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for index, record in enumerate(records):
      if index >= keep_first:
        example = tf.train.Example.FromString(record)
        edit(example)
        record = example.SerializeToString()
      writer.write(record)


def _truncate_mid_record(path):
  """Rewrites a gzip TFRecord file so that its last record is cut short.

  Cutting the compressed bytes is not reliable: a cut that decompresses to a
  whole number of records reads as a clean end of file.
  """
  plain = path + '.plain'
  with tf.io.TFRecordWriter(plain) as writer:
    for record in tf.data.TFRecordDataset(path, compression_type='GZIP'):
      writer.write(record.numpy())
  data = open(plain, 'rb').read()
  os.remove(plain)
  with gzip.open(path, 'wb') as f:
    f.write(data[:-20])


def _drop_label(example):
  del example.features.feature['big_tipper']


def _label_as_text(example):
  example.features.feature['big_tipper'].Clear()
  example.features.feature['big_tipper'].bytes_list.value.append(b'yes')


def _run_with_examples(taxi_artifacts, tmp_path, examples, **kwargs):
  data = pipeline_outputs.DataArtifacts(
      raw_examples=taxi_artifacts.raw_examples,
      transformed_examples=examples,
      schema=taxi_artifacts.schema,
      transform_graph=taxi_artifacts.transform_graph,
      data_dir=taxi_artifacts.data_dir)
  kwargs.setdefault('custom_config', SMALL_BATCHES)
  kwargs.setdefault('module_file', LINEAR_MODULE)
  return pipeline_outputs.trainer_run(data, str(tmp_path / 'out'), **kwargs)


def _assert_fails_and_leaves_no_model(run, error_type, pattern):
  with pytest.raises(error_type) as error:
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
  assert re.search(pattern, str(error.value)), str(error.value)
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))
  assert not glob.glob(os.path.join(run.model.uri, '.export-*'))
  return str(error.value)


@pytest.mark.slow
@pytest.mark.parametrize('case', [
    'empty_split', 'missing_split', 'garbage_file', 'truncated_file',
    'missing_label', 'label_wrong_type', 'batch_larger_than_split'])
def test_bad_examples(taxi_artifacts, tmp_path, case):
  transformed = taxi_artifacts.transformed_examples
  examples = _copy_examples(
      transformed, str(tmp_path / 'examples'),
      splits=('train',) if case == 'missing_split' else ('train', 'eval'))
  custom_config = dict(SMALL_BATCHES)
  if case == 'missing_split':
    pattern = (r"The examples at .*/examples have no split\(s\) \['eval'\] "
               r"\(splits: \['train'\]\)\. Set eval_args\.splits")
  else:
    train_file = _only_file(examples, 'train')
    if case == 'empty_split':
      with tf.io.TFRecordWriter(train_file, options='GZIP'):
        pass
      pattern = r"The 'train' split is empty: its files \[.*\] hold no examples"
    elif case == 'garbage_file':
      with open(train_file, 'wb') as f:
        f.write(b'this is not a gzip tfrecord file')
      pattern = (rf'The examples file {re.escape(train_file)} is corrupt or '
                 r'truncated after record 0')
    elif case == 'truncated_file':
      _truncate_mid_record(train_file)
      pattern = (rf'The examples file {re.escape(train_file)} is corrupt or '
                 r'truncated after record \d+')
    elif case == 'missing_label':
      _rewrite_records(train_file, _drop_label, keep_first=40)
      pattern = (rf"Record 40 of {re.escape(train_file)} \(split 'train'\) "
                 r'does not match the schema: .*big_tipper.*')
    elif case == 'label_wrong_type':
      _rewrite_records(train_file, _label_as_text, keep_first=40)
      pattern = (rf"Record 40 of {re.escape(train_file)} \(split 'train'\) "
                 r'does not match the schema: .*big_tipper.*')
    else:
      custom_config['train_batch_size'] = 100000
      pattern = (r"The 'train' split holds only \d+ examples, fewer than "
                 r'train_batch_size=100000')
  run = _run_with_examples(taxi_artifacts, tmp_path, examples,
                           custom_config=custom_config, train_steps=30,
                           eval_steps=2)
  _assert_fails_and_leaves_no_model(run, errors.TPUTrainerError, pattern)


@pytest.mark.slow
@pytest.mark.parametrize('module_file,train_steps,pattern', [
    (os.path.join(TEST_MODULES_DIR, 'nan_loss_module.py'), 30,
     r'Training stopped: the loss of model_fn in .*nan_loss_module.py became '
     r'NaN, so no model was exported'),
    ('/no/such/module.py', 30,
     r"module_file '/no/such/module.py' does not exist"),
    (os.path.join(TEST_MODULES_DIR, 'broken_serving_module.py'), 5,
     r'serving_input_receiver_fn in .*broken_serving_module.py raised '
     r'RuntimeError: the serving signature cannot be built'),
    (LINEAR_MODULE, -5, r'train_args.num_steps must be a positive integer, '
     r'got -5'),
])
def test_failures_leave_no_model(taxi_artifacts, tmp_path, module_file,
                                 train_steps, pattern):
  run = _run_with_examples(taxi_artifacts, tmp_path,
                           taxi_artifacts.transformed_examples,
                           module_file=module_file, train_steps=train_steps,
                           eval_steps=2)
  _assert_fails_and_leaves_no_model(run, errors.TPUTrainerError, pattern)
