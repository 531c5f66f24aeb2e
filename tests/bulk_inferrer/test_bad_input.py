"""Bad input fails before any work, with an error that says what to do."""

import os

import pytest

from tfx_tpu_trainer.bulk_inferrer import executor
from tfx_tpu_trainer.bulk_inferrer import model_checks

from tests.fixtures import bulk_inference
from tests.fixtures import tiny_saved_models


@pytest.fixture(scope='module')
def model(tmp_path_factory):
  uri = str(tmp_path_factory.mktemp('doubling'))
  tiny_saved_models.write_doubling_model(uri)
  return tiny_saved_models.model_artifact(uri)


@pytest.fixture
def examples(tmp_path):
  return tiny_saved_models.write_examples(
      str(tmp_path / 'examples'), {'train': [1.0, 2.0], 'eval': [3.0]})


def _run(examples, model, tmp_path, **kwargs):
  output = str(tmp_path / 'out')
  try:
    return bulk_inference.run_executor(
        executor.Executor, examples, model, output,
        bulk_inference.exec_properties(**kwargs))
  finally:
    # Nothing was written: the checks run before the Beam pipeline.
    assert not os.path.exists(output) or not os.listdir(output)


def test_scores_when_nothing_is_wrong(examples, model, tmp_path):
  output = bulk_inference.run_executor(
      executor.Executor, examples, model, str(tmp_path / 'out'),
      bulk_inference.exec_properties(splits=['train', 'eval'],
                                     custom_config={'batch_size': 2}))
  values = sorted(log.predict_log.response.outputs['y'].float_val[0]
                  for log in bulk_inference.prediction_logs(output))
  assert values == [2.0, 4.0, 6.0]


def test_a_model_without_the_tpu_tag_set_on_a_tpu_names_its_tag_sets(
    examples, model, tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r'has no \{serve, tpu\} meta graph \(use_tpu is '
                     r'true\); its tag sets: \{serve\}\. Export it with '
                     r'tfx_tpu_trainer.TPUTrainer.*use_tpu=false'):
    _run(examples, model, tmp_path, custom_config={'use_tpu': True})


def test_the_tpu_tag_set_off_a_tpu_is_refused(examples, model, tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r'model_spec.tag asks for \{serve, tpu\}, a TPU '
                     'graph, but use_tpu is false'):
    _run(examples, model, tmp_path, tags=['serve', 'tpu'],
         custom_config={'use_tpu': False})


def test_a_tag_set_the_model_lacks_is_named(examples, model, tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r'no \{gpu, serve\} meta graph \(asked for\); its '
                     r'tag sets: \{serve\}'):
    _run(examples, model, tmp_path, tags=['serve', 'gpu'])


def test_a_missing_signature_names_the_signatures_there_are(
    examples, model, tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r"model_signature_name 'classification' is not a "
                     r"signature of the \{serve\} graph of .*; its "
                     r"signatures: \['dense', 'serving_default'\]"):
    _run(examples, model, tmp_path, signatures=['classification'])


def test_a_signature_that_takes_no_serialized_examples(examples, model,
                                                       tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r"Signature 'dense' of the \{serve\} graph of .* "
                     r"takes inputs \{'x': 'float32'\}: the examples cannot "
                     'feed it'):
    _run(examples, model, tmp_path, signatures=['dense'])


def test_examples_the_signature_cannot_parse_name_the_split(examples,
                                                            tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  uri = str(tmp_path / 'int_model')
  tiny_saved_models.write_doubling_model(uri, feature_dtype=tf.int64)
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r"The first example of split 'eval' "
                     r"\(FORMAT_TF_EXAMPLE\) cannot feed signature\(s\) "
                     r"\['serving_default'\] of .*: .*Key: x.*Data types "
                     "don't match"):
    _run(examples, tiny_saved_models.model_artifact(uri), tmp_path)


def test_an_empty_split_is_named(model, tmp_path):
  examples = tiny_saved_models.write_examples(
      str(tmp_path / 'examples'), {'train': [1.0], 'eval': []})
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r"Split 'eval' of the examples \(.*Split-eval\) has "
                     'no examples: nothing to score'):
    _run(examples, model, tmp_path, splits=[])


def test_a_split_the_examples_lack_is_named(examples, model, tmp_path):
  with pytest.raises(model_checks.BulkInferenceError,
                     match=r"data_spec.example_splits names \['test'\], which "
                     r"the examples do not have; their splits: \['eval', "
                     r"'train'\]"):
    _run(examples, model, tmp_path, splits=['eval', 'test'])


def test_an_unblessed_model_scores_nothing_as_the_stock(examples, model,
                                                        tmp_path):
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / 'blessing')
  blessing.set_int_custom_property('blessed', 0)
  output = bulk_inference.run_executor(
      executor.Executor, examples, model, str(tmp_path / 'out'),
      bulk_inference.exec_properties(custom_config={'use_tpu': True}),
      blessing=blessing)
  assert not os.path.exists(output.uri)
