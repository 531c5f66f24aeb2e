"""TPUBulkInferrer against the stock BulkInferrer on CPU, record by record.

Same model, same examples, same exec properties: the PredictionLogs and the
output examples must be the same (float outputs to float32 rounding, see
tests/fixtures/bulk_inference.py).
"""

import pytest
from tfx.proto import bulk_inferrer_pb2

from tests.fixtures import bulk_inference

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _compare_logs(examples, model, tmp_path, **kwargs):
  stock, ours = bulk_inference.run_both(
      examples, model, str(tmp_path),
      bulk_inference.exec_properties(**kwargs))
  expected = bulk_inference.prediction_logs(stock)
  actual = bulk_inference.prediction_logs(ours)
  return bulk_inference.assert_same_messages(
      expected, actual, key=bulk_inference.request_key), actual


def test_taxi_model_classify_logs_match_the_stock(taxi_artifacts, taxi_model,
                                                  tmp_path):
  count, logs = _compare_logs(
      taxi_artifacts.raw_examples, taxi_model, tmp_path,
      signatures=['classification'], custom_config={'batch_size': 16})
  assert count > 16  # Several batches; the last one padded.
  assert all(log.WhichOneof('log_type') == 'classify_log' for log in logs)


def test_taxi_model_predict_logs_match_the_stock_at_the_default_batch(
    taxi_artifacts, taxi_model, tmp_path):
  _, logs = _compare_logs(taxi_artifacts.raw_examples, taxi_model, tmp_path)
  assert logs[0].predict_log.response.outputs['probabilities'].float_val


def test_taxi_model_output_examples_match_the_stock(taxi_artifacts,
                                                    taxi_model, tmp_path):
  spec = bulk_inferrer_pb2.OutputExampleSpec(output_columns_spec=[
      bulk_inferrer_pb2.OutputColumnsSpec(
          predict_output=bulk_inferrer_pb2.PredictOutput(output_columns=[
              bulk_inferrer_pb2.PredictOutputCol(
                  output_key='probabilities', output_column='probability'),
              bulk_inferrer_pb2.PredictOutputCol(
                  output_key='class_ids', output_column='class_id')]))])
  stock, ours = bulk_inference.run_both(
      taxi_artifacts.raw_examples, taxi_model, str(tmp_path),
      bulk_inference.exec_properties(splits=['train', 'eval'],
                                     output_example_spec=spec,
                                     custom_config={'batch_size': 50}))
  assert ours.split_names == stock.split_names == '["eval", "train"]'
  for split in ('train', 'eval'):
    actual = bulk_inference.output_examples(ours, split)
    bulk_inference.assert_same_messages(
        bulk_inference.output_examples(stock, split), actual)
    assert 'probability' in actual[0].features.feature


def test_canned_estimator_classify_regress_predict_and_multi_inference(
    taxi_artifacts, canned_model, tmp_path):
  model = bulk_inference.model_artifact(canned_model)
  kinds = {}
  for name, signatures in (('classify', ['classification']),
                           ('regress', ['regression']),
                           ('predict', ['predict']),
                           ('multi', ['classification', 'regression'])):
    _, logs = _compare_logs(taxi_artifacts.raw_examples, model,
                            tmp_path / name, signatures=signatures,
                            custom_config={'batch_size': 32})
    kinds[name] = logs[0].WhichOneof('log_type')
  assert kinds == {'classify': 'classify_log', 'regress': 'regress_log',
                   'predict': 'predict_log', 'multi': 'multi_inference_log'}


def test_keras_saved_model_predict_logs_match_the_stock(
    taxi_artifacts, keras_model, tmp_path):
  _, logs = _compare_logs(taxi_artifacts.raw_examples,
                          bulk_inference.model_artifact(keras_model),
                          tmp_path, custom_config={'batch_size': 7})
  assert 'probability' in logs[0].predict_log.response.outputs
