"""TPUBulkInferrer executor: the stock BulkInferrer's Beam graph, our ModelHandler."""

import os
from typing import Any, Dict, List, Optional

from absl import logging
import apache_beam as beam
from apache_beam.ml.inference import base as beam_inference
from tfx import types
from tfx.components.bulk_inferrer import executor as stock_executor
from tfx.components.util import tfxio_utils
from tfx.proto import bulk_inferrer_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils
from tfx_bsl.public.proto import model_spec_pb2

from tensorflow_serving.apis import prediction_log_pb2
from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.bulk_inferrer import model_checks
from tfx_tpu_trainer.bulk_inferrer import model_handler
from tfx_tpu_trainer.bulk_inferrer import run_failures
from tfx_tpu_trainer.publishing import secrets

__all__ = ['CUSTOM_CONFIG_KEY', 'Executor', 'RunInferenceOnTPU']

CUSTOM_CONFIG_KEY = standard_component_specs.CUSTOM_CONFIG_KEY


@beam.ptransform_fn
@beam.typehints.with_output_types(prediction_log_pb2.PredictionLog)
def RunInferenceOnTPU(  # pylint: disable=invalid-name
    records: beam.PCollection, payload_format: int,
    handler: beam_inference.ModelHandler) -> beam.PCollection:
  """Serialized records -> PredictionLogs: the stock `_RunInference`, our handler."""
  return (records
          | 'ParseExamples' >> beam.Map(stock_executor._MakeParseFn(  # pylint: disable=protected-access
              payload_format))
          | 'RunInference' >> beam_inference.RunInference(handler))


class Executor(stock_executor.Executor):
  """The stock BulkInferrer executor; inference by `model_handler`.

  `Do` is the stock one (blessing gate, model path, specs); it calls
  `_get_inference_spec` (the tag set chosen here) and `_run_model_inference`
  (checks before any work, then the stock graph with our inference step).
  """

  def __init__(self, context: Optional[Any] = None):
    # Beam logs the Beam args it discards (a `--some_token=...`) as soon as
    # the executor is made (TFX's BaseBeamExecutor parses them): masked.
    secrets.mask_logs()
    super().__init__(context)

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Checks `custom_config`, then runs the stock `Do`."""
    self._config = inference_config.InferenceConfig.from_custom_config(
        exec_properties.get(CUSTOM_CONFIG_KEY))
    logging.info('TPUBulkInferrer: %s', self._config)
    super().Do(input_dict, output_dict, exec_properties)

  def _get_inference_spec(
      self, model_path: str,
      exec_properties: Dict[str, Any]) -> model_spec_pb2.InferenceSpecType:
    """The stock spec; with no tag asked for, `{serve, tpu}` on a TPU."""
    spec = super()._get_inference_spec(model_path, exec_properties)
    saved_model_spec = spec.saved_model_spec
    if not saved_model_spec.tag:
      saved_model_spec.tag.extend(model_checks.default_tags(self._config))
    model_checks.check_model(spec, self._config)
    return spec

  def _run_model_inference(
      self,
      data_spec: bulk_inferrer_pb2.DataSpec,
      output_example_spec: bulk_inferrer_pb2.OutputExampleSpec,
      examples: List[types.Artifact],
      output_examples: Optional[types.Artifact],
      inference_result: Optional[types.Artifact],
      inference_endpoint: model_spec_pb2.InferenceSpecType,
  ) -> None:
    """The stock graph (read, infer, write), after the checks.

    The stock method applies its module's `_RunInference` (tfx_bsl's
    handlers) inside; that is the step replaced here, so the method is
    rewritten around the stock helpers (`_MakeParseFn`, `_WriteExamples`,
    file names) rather than patched. A run that fails leaves the outputs as
    they were and names the record behind it (run_failures.py).
    """
    example_uris = model_checks.selected_splits(examples, data_spec)
    payload_format, _ = tfxio_utils.resolve_payload_format_and_data_view_uri(
        examples)
    model_checks.check_examples(example_uris, payload_format,
                                inference_endpoint, self._config)
    handler = model_handler.create_model_handler(inference_endpoint,
                                                 self._config)
    tfxio_factory = tfxio_utils.get_tfxio_factory_from_artifact(
        examples, stock_executor._TELEMETRY_DESCRIPTORS, schema=None,  # pylint: disable=protected-access
        read_as_raw_records=True, raw_record_column_name='unused')
    if output_examples:
      output_examples.split_names = artifact_utils.encode_split_names(
          sorted(example_uris))
    outputs = [a.uri for a in (output_examples, inference_result) if a]
    with run_failures.explained_failures(outputs, example_uris,
                                         payload_format, inference_endpoint):
      self._run_pipeline(example_uris, tfxio_factory, payload_format,
                         handler, output_example_spec, output_examples,
                         inference_result)
    for name, artifact in (('Output examples', output_examples),
                           ('Inference result', inference_result)):
      if artifact:
        logging.info('%s written to %s.', name, artifact.uri)

  def _run_pipeline(self, example_uris, tfxio_factory, payload_format,
                    handler, output_example_spec, output_examples,
                    inference_result) -> None:
    """Read, infer, write: the stock graph with our inference step."""
    with self._make_beam_pipeline() as pipeline:
      data_list = []
      for split, example_uri in example_uris.items():
        tfxio = tfxio_factory([io_utils.all_files_pattern(example_uri)])
        data = (pipeline
                | f'ReadData[{split}]' >> tfxio.RawRecordBeamSource()
                | f'RunInference[{split}]' >> RunInferenceOnTPU(  # pylint: disable=no-value-for-parameter
                    payload_format, handler))
        if output_examples:
          _ = data | f'WriteExamples[{split}]' >> stock_executor._WriteExamples(  # pylint: disable=protected-access,no-value-for-parameter
              output_example_spec,
              artifact_utils.get_split_uri([output_examples], split))
        data_list.append(data)
      if inference_result:
        _ = (data_list
             | 'FlattenInferenceResult' >> beam.Flatten(pipeline=pipeline)
             | 'WritePredictionLogs' >> beam.io.WriteToTFRecord(
                 os.path.join(inference_result.uri,
                              stock_executor._PREDICTION_LOGS_FILE_NAME),  # pylint: disable=protected-access
                 file_name_suffix='.gz',
                 coder=beam.coders.ProtoCoder(
                     prediction_log_pb2.PredictionLog)))
