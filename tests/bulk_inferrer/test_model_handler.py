"""The ModelHandler: fixed-size batches, the last padded, padding dropped."""

import apache_beam as beam
from apache_beam.ml.inference import base as beam_inference
from apache_beam.testing import util as beam_testing
import numpy as np
import pytest
import tensorflow as tf
from tfx_bsl.public.proto import model_spec_pb2

from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.bulk_inferrer import model_handler

from tests.fixtures import tiny_saved_models


@pytest.fixture(scope='module')
def doubling_model(tmp_path_factory):
  return tiny_saved_models.write_doubling_model(
      str(tmp_path_factory.mktemp('doubling')))


def _spec(model_dir, signatures=()):
  spec = model_spec_pb2.InferenceSpecType()
  spec.saved_model_spec.model_path = model_dir
  spec.saved_model_spec.signature_name.extend(signatures)
  return spec


def _handler(model_dir, batch_size, use_tpu=False):
  return model_handler.create_model_handler(
      _spec(model_dir), inference_config.InferenceConfig(
          use_tpu=use_tpu, batch_size=batch_size))


class _RecordingModel:
  """The real loaded model; records the size of every batch it is fed."""

  def __init__(self, model):
    self._model = model
    self.batch_sizes = []

  def run(self, fetches, feed_dict):
    (batch,) = feed_dict.values()
    self.batch_sizes.append(len(batch))
    return self._model.run(fetches, feed_dict=feed_dict)


def _assert_doubles_through_beam(handler, count):
  """Beam's RunInference with `handler` scores 0..count-1 as 2x."""
  with beam.Pipeline() as pipeline:
    values = (pipeline
              | beam.Create([tf.train.Example.FromString(
                  tiny_saved_models.example(x)) for x in range(count)])
              | beam_inference.RunInference(handler)
              | beam.Map(lambda log: log.predict_log.response.outputs['y']
                         .float_val[0]))
    beam_testing.assert_that(values, beam_testing.equal_to(
        [2.0 * x for x in range(count)]))


def test_pad_batch_fills_with_the_last_example_and_unpad_drops_it():
  assert model_handler.pad_batch([b'a', b'b', b'c'], 8) == [b'a', b'b', b'c',
                                                            b'c']
  assert model_handler.pad_batch([b'a', b'b', b'c'], 3) == [b'a', b'b', b'c']
  assert model_handler.pad_batch([b'a'], 1) == [b'a']
  outputs = model_handler.unpad_outputs(
      {'y': np.arange(8).reshape(4, 2)}, 3)
  np.testing.assert_array_equal(outputs['y'], [[0, 1], [2, 3], [4, 5]])
  with pytest.raises(ValueError, match='3 examples do not fit a batch of 2'):
    model_handler.pad_batch([b'a'] * 3, 2)
  with pytest.raises(ValueError, match='at least one example'):
    model_handler.pad_batch([], 2)


def test_padding_never_outgrows_the_batch_there():
  # Full batches are the batch size; a smaller one gets the next power of
  # two: fewer padding rows than real ones, and few shapes for XLA.
  assert [model_handler.padded_size(count, 256)
          for count in (1, 2, 3, 5, 50, 129, 256)] == [1, 2, 4, 8, 64, 256,
                                                       256]
  assert model_handler.padded_size(50, 2**16) == 64
  assert model_handler.padded_size(3, 3) == 3


@pytest.mark.parametrize('batch_size,count,fed', [
    (4, 10, [4, 4, 2]),
    (2**16, 50, [64]),  # Not 65,536 rows for 50 examples.
])
def test_model_calls_get_full_or_power_of_two_batches_and_only_real_rows_back(
    doubling_model, batch_size, count, fed):
  handler = _handler(doubling_model, batch_size=batch_size)
  model = _RecordingModel(handler.load_model())
  examples = [tf.train.Example.FromString(tiny_saved_models.example(x))
              for x in range(count)]
  logs = handler.run_inference(examples, model)
  assert model.batch_sizes == fed
  assert [log.predict_log.response.outputs['y'].float_val[0]
          for log in logs] == [2.0 * x for x in range(count)]


def test_beam_batches_are_the_batch_size(doubling_model):
  handler = _handler(doubling_model, batch_size=8)
  assert handler.batch_elements_kwargs() == {'min_batch_size': 8,
                                             'max_batch_size': 8}
  assert not handler.share_model_across_processes()
  assert _handler(doubling_model, 8, use_tpu=True).share_model_across_processes()
  _assert_doubles_through_beam(handler, 19)


def test_the_tpu_tag_set_is_accepted_where_tfx_bsl_refuses_it(tmp_path):
  from tfx_bsl.beam import run_inference as tfx_bsl_inference  # pylint: disable=g-import-not-at-top
  model_dir = tiny_saved_models.write_doubling_model(str(tmp_path))
  # Re-tag the {serve} graph as {serve, tpu}: only the tags matter here.
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  path = f'{model_dir}/saved_model.pb'
  saved_model = saved_model_pb2.SavedModel.FromString(open(path, 'rb').read())
  saved_model.meta_graphs[0].meta_info_def.tags.append('tpu')
  with open(path, 'wb') as f:
    f.write(saved_model.SerializeToString())
  spec = _spec(model_dir)
  spec.saved_model_spec.tag.extend(['serve', 'tpu'])
  with pytest.raises(NotImplementedError,
                     match='TPU inference is not supported yet'):
    tfx_bsl_inference.create_model_handler(spec, None, None)
  handler = model_handler.create_model_handler(
      spec, inference_config.InferenceConfig(use_tpu=True, batch_size=2))
  assert isinstance(handler, model_handler.PredictModelHandler)


class _SharedAcrossProcesses(model_handler.PredictModelHandler):
  """The TPU's loading (one process holds the model) on CPU."""

  def share_model_across_processes(self) -> bool:
    return True


def test_the_model_shared_across_processes_answers_through_its_proxy(
    doubling_model):
  # On a TPU the model lives in one process of the host (MultiProcessShared)
  # and every worker calls LoadedModel.run through a proxy: the same here.
  handler = _SharedAcrossProcesses(
      _spec(doubling_model),
      inference_config.InferenceConfig(use_tpu=False, batch_size=4))
  _assert_doubles_through_beam(handler, 10)
