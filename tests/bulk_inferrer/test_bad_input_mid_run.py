"""Input the checks before the Beam pipeline cannot see (issue 50, items 4
and 5): a batch size no batch needs, and a bad record after the first."""

import gzip
import os
import re

import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.bulk_inferrer import executor
from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.bulk_inferrer import model_checks

from tests.fixtures import bulk_inference
from tests.fixtures import tiny_saved_models

ROWS = 50


@pytest.fixture(scope='module')
def model(tmp_path_factory):
  uri = str(tmp_path_factory.mktemp('doubling'))
  tiny_saved_models.write_doubling_model(uri)
  return tiny_saved_models.model_artifact(uri)


def _examples(tmp_path, records=None):
  """50 good examples in split 'eval' (`records` instead, if given)."""
  examples = tiny_saved_models.write_examples(
      str(tmp_path / 'examples'), {'eval': [float(x) for x in range(ROWS)]})
  path = os.path.join(examples.uri, 'Split-eval', 'data.gz')
  if records is not None:
    with tf.io.TFRecordWriter(path, options='GZIP') as writer:
      for record in records:
        writer.write(record)
  return examples, path


def _score(examples, model, output, batch_size=8):
  return bulk_inference.run_executor(
      executor.Executor, examples, model, output,
      bulk_inference.exec_properties(custom_config={'batch_size': batch_size}))


def test_a_batch_size_no_memory_holds_is_refused_up_front(model, tmp_path):
  examples, _ = _examples(tmp_path)
  output = str(tmp_path / 'out')
  with pytest.raises(config_lib.ConfigError,
                     match=r"custom_config\['batch_size'\]=1000000000 is over "
                     r'the most examples one model call takes \(65536\)'):
    _score(examples, model, output, batch_size=10**9)
  assert not os.path.exists(output) or not os.listdir(output)


def test_the_largest_batch_size_pads_only_as_far_as_the_batch_there(
    model, tmp_path):
  # 50 examples, batch_size 65,536: every example scored, and the model
  # fed a batch padded to 64 rows (not 65,536 copies of the last example).
  examples, _ = _examples(tmp_path)
  output = _score(examples, model, str(tmp_path / 'out'),
                  batch_size=inference_config.MAX_BATCH_SIZE)
  values = sorted(log.predict_log.response.outputs['y'].float_val[0]
                  for log in bulk_inference.prediction_logs(output))
  assert values == [2.0 * x for x in range(ROWS)]


def _example_without_x():
  return tf.train.Example(features=tf.train.Features(feature={
      'z': tf.train.Feature(float_list=tf.train.FloatList(value=[1.0]))
  })).SerializeToString()


def _cut_mid_record(path):
  """The gzip file rewritten with its last record cut short."""
  plain = b''.join(
      _framed(record.numpy())
      for record in tf.data.TFRecordDataset(path, compression_type='GZIP'))
  with gzip.open(path, 'wb') as f:
    f.write(plain[:-20])


def _framed(record: bytes) -> bytes:
  plain = '/tmp/_framed_record'
  with tf.io.TFRecordWriter(plain) as writer:
    writer.write(record)
  with open(plain, 'rb') as f:
    framed = f.read()
  os.remove(plain)
  return framed


@pytest.mark.parametrize('case,message', [
    ('missing feature', r"Record 30 of {path} \(split 'eval'\) cannot feed "
     r"signature\(s\) \['serving_default'\] of .*: .*Feature: x .*is "
     'required but could not be found'),
    ('not an Example', r"Record 30 of {path} \(split 'eval'\) is not a "
     r'serialized tf.train.Example'),
    ('cut gzip file', r"The examples file {path} \(split 'eval'\) is corrupt "
     r'or cut short after record 4[89]'),
])
def test_a_bad_record_after_the_first_names_split_and_file_and_leaves_no_output(
    model, tmp_path, case, message):
  good = [tiny_saved_models.example(float(x)) for x in range(ROWS)]
  if case == 'missing feature':
    examples, path = _examples(tmp_path, good[:30] + [_example_without_x()] +
                               good[30:])
  elif case == 'not an Example':
    examples, path = _examples(tmp_path, good[:30] + [b'\xff' * 40] +
                               good[30:])
  else:
    examples, path = _examples(tmp_path)
    _cut_mid_record(path)
  output = str(tmp_path / 'out')
  os.makedirs(output)
  with pytest.raises(model_checks.BulkInferenceError) as error:
    _score(examples, model, output)
  assert re.search(message.format(path=re.escape(path)),
                   str(error.value)), str(error.value)
  # The output folder as it was: no beam-temp-*, no partial file.
  assert os.listdir(output) == []
