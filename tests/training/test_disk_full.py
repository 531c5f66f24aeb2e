"""Item 11 of issue 25: a disk that fills gives one clear error, no leftovers.

A real full disk without root: a tmpfs of a few hundred KB mounted in a
child's own user and mount namespace (`unshare -rm`, tests/fixtures/
full_disk.py), and a file-size limit (RLIMIT_FSIZE, EFBIG) in a child.
"""

import os
import re

import pytest
from tfx.utils import path_utils

from tests import test_reliability as reliability
from tests.fixtures import full_disk
from tests.fixtures import pipeline_outputs
from tests.fixtures.run_settings import LINEAR_MODULE
from tests.fixtures.run_settings import SMALL_BATCHES


@pytest.fixture
def tmpfs_dir(tmp_path):
  directory = tmp_path / 'small_disk'
  directory.mkdir()
  if not full_disk.can_mount_tmpfs(str(directory)):
    pytest.skip('unshare -rm cannot mount a tmpfs here (no user namespaces)')
  return str(directory)


def test_a_tensorflow_write_on_a_full_disk_is_one_clear_error(tmpfs_dir):
  path = os.path.join(tmpfs_dir, 'big.bin')
  result = full_disk.run_on_tmpfs('64k', tmpfs_dir,
                                  ['write', path, str(200 * 1024)])
  assert result['error_type'] == 'DiskFullError', result
  assert re.fullmatch(
      rf'The disk filled while writing the test file: writing '
      rf'{re.escape(path)} failed with "No space left on device"\. Its '
      r'file system has [\d.]+ (bytes|KB) free of 64\.0 KB; '
      rf'{re.escape(tmpfs_dir)} held [\d.]+ (bytes|KB) when the write '
      r'failed\. Free some space\.', result['message']), result['message']
  # tf.io.write_file writes in place: the partial file is what is left;
  # atomic writes' temporaries are removed.
  assert not [name for name in result['files'][tmpfs_dir]
              if '.tmp' in name], result['files']


def test_a_file_size_limit_efbig_is_one_clear_error(tmp_path):
  path = str(tmp_path / 'big.bin')
  result = full_disk.run_with_file_size_limit(
      ['file-size-limit', path, str(200 * 1024), str(64 * 1024)])
  assert result['error_type'] == 'DiskFullError', result
  assert re.match(r'A file reached the file-size limit while writing the test '
                  rf'file: writing {re.escape(path)} failed with "File too '
                  r'large"\.',
                  result['message']), result['message']


def test_a_push_onto_a_full_disk_is_one_clear_error_and_publishes_nothing(
    tmpfs_dir, tmp_path):
  model = tmp_path / 'model'
  (model / 'variables').mkdir(parents=True)
  (model / 'saved_model.pb').write_bytes(b'p' * 1024)
  (model / 'variables' / 'variables.data-00000-of-00001').write_bytes(
      b'v' * 200 * 1024)
  base = os.path.join(tmpfs_dir, 'serving')
  result = full_disk.run_on_tmpfs('64k', tmpfs_dir,
                                  ['push', str(model), base])
  assert result['error_type'] == 'DiskFullError', result
  assert re.match(
      r'The disk filled while pushing the model: writing .*variables\.data-'
      r'00000-of-00001 failed with "No space left on device"\. Its file '
      r'system has [\d.]+ (bytes|KB) free of 64\.0 KB; '
      rf'{re.escape(base)} held [\d.]+ KB when the write failed\. No version '
      r'was published and the partial copy was removed\.',
      result['message']), result['message']
  assert result['files'] == {base: []}  # No version, no staging, no lock.


def _executor_on_tmpfs(taxi_artifacts, tmp_path, full, size):
  """Trains the linear module with `full` ('checkpoints', 'model' or
  'model_run') on a tmpfs of `size`; returns the run, its result, the dirs."""
  run = pipeline_outputs.trainer_run(
      taxi_artifacts, str(tmp_path / 'out'), LINEAR_MODULE,
      custom_config=dict(SMALL_BATCHES,
                         checkpoint_dir=str(tmp_path / 'checkpoints')),
      train_steps=20, eval_steps=2)
  checkpoint_dir = str(tmp_path / 'checkpoints' / 'taxi' / 'run-1' /
                       'TPUTrainer')
  dirs = {'checkpoints': checkpoint_dir, 'model': run.model.uri,
          'model_run': run.model_run.uri}
  for directory in dirs.values():
    os.makedirs(directory, exist_ok=True)
  if not full_disk.can_mount_tmpfs(dirs[full]):
    pytest.skip('unshare -rm cannot mount a tmpfs here (no user namespaces)')
  spec = reliability._write_spec(tmp_path / 'spec.json', run, 'run-1')  # pylint: disable=protected-access
  result = full_disk.run_on_tmpfs(size, dirs[full],
                                  ['executor', spec, *dirs.values()])
  return run, result, dirs


@pytest.mark.slow
def test_nearly_full_checkpoint_dir_past_the_probe(taxi_artifacts, tmp_path):
  # 200 KB: the 4 KB write probe passes; graph.pbtxt (~400 KB) does not fit.
  run, result, dirs = _executor_on_tmpfs(taxi_artifacts, tmp_path,
                                         'checkpoints', '200k')
  assert result['error_type'] == 'DiskFullError', result
  ckpt = re.escape(dirs['checkpoints'])
  assert re.fullmatch(
      rf'The disk filled while training \(writing checkpoints and events to '
      rf'{ckpt}\): writing {ckpt}/\S+ failed with "No space left on '
      r'device"\. Its file system has [\d.]+ (bytes|KB) free of 200\.0 KB; '
      rf'{ckpt} held [\d.]+ KB when the write failed\. Free space there, or '
      r"set custom_config\['checkpoint_dir'\] to a file system with more "
      r'room .*No model was exported\.', result['message']), result['message']
  assert not [name for name in result['files'][dirs['checkpoints']]
              if re.search(r'\.tmp[0-9a-f]{32}$', name)], result['files']
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))


@pytest.mark.slow
def test_disk_full_during_export_leaves_nothing(taxi_artifacts, tmp_path):
  # 100 KB: training and model_run fit elsewhere; saved_model.pb does not.
  run, result, dirs = _executor_on_tmpfs(taxi_artifacts, tmp_path, 'model',
                                         '100k')
  assert result['error_type'] == 'DiskFullError', result
  model = re.escape(run.model.uri)
  assert re.fullmatch(
      rf'The disk filled while exporting the model to {model}/Format-Serving: '
      rf'writing {model}/\.export-[0-9a-f]+/\S+ failed with "No space left on '
      r'device"\. Its file system has [\d.]+ (bytes|KB) free of 100\.0 KB; '
      rf'{model}/\.export-[0-9a-f]+ held [\d.]+ KB when the write failed\. '
      rf'Free space on the file system of the model artifact \({model}\) and '
      r'retry: the checkpoints are kept, .*nothing was left under '
      r'Format-Serving\.', result['message']), result['message']
  assert result['files'][dirs['model']] == [], result['files']
  # The final checkpoint is kept for the retry, which only exports.
  assert 'model.ckpt-20.index' in os.listdir(dirs['checkpoints'])


@pytest.mark.slow
def test_full_model_run_is_emptied(taxi_artifacts, tmp_path):
  run, result, dirs = _executor_on_tmpfs(taxi_artifacts, tmp_path,
                                         'model_run', '200k')
  assert result['error_type'] == 'DiskFullError', result
  model_run = re.escape(run.model_run.uri)
  assert re.fullmatch(
      rf'The disk filled while filling model_run \(checkpoint copies and '
      rf'metrics\): writing {model_run}/\S+ failed with "No space left on '
      r'device"\. Its file system has [\d.]+ (bytes|KB) free of 200\.0 KB; '
      rf'{model_run} held [\d.]+ KB when the write failed\. Free space on the '
      r'file system of the model_run artifact and retry: the checkpoints in '
      rf'{re.escape(dirs["checkpoints"])} are kept, so a retry of this '
      r'pipeline run exports without training again\. model_run was emptied '
      r'and no model was exported\.', result['message']), result['message']
  assert result['files'][dirs['model_run']] == [], result['files']
  assert not os.path.exists(path_utils.serving_model_dir(run.model.uri))


def _small_model(tmp_path):
  model = tmp_path / 'model'
  (model / 'variables').mkdir(parents=True)
  (model / 'saved_model.pb').write_bytes(b'p' * 1024)
  for name in ('variables.data-00000-of-00001', 'variables.index'):
    (model / 'variables' / name).write_bytes(b'v' * 1024)
  return str(model)


def test_a_disk_out_of_inodes_is_reported_as_inodes(tmpfs_dir, tmp_path):
  # A megabyte of room but five inodes: the mount point, the serving
  # folder, the push's lock and staging folder, its variables folder; the
  # next file finds no inode left with the bytes all free.
  base = os.path.join(tmpfs_dir, 'serving')
  result = full_disk.run_on_tmpfs('1m', tmpfs_dir,
                                  ['push', _small_model(tmp_path), base],
                                  inodes=5)
  assert result['error_type'] == 'DiskFullError', result
  assert re.match(
      r'The file system ran out of inodes while pushing the model: writing '
      r'\S+ failed with "No space left on device"\. Its file system has 0 '
      r'of 5 inodes free \(too many files, not too many bytes: [\d.]+ KB '
      r'of 1\.0 MB are free\)', result['message']), result['message']
  assert result['files'] == {base: []}
