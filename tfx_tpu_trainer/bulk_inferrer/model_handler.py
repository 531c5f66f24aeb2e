"""A Beam ModelHandler that runs a SavedModel in fixed-size batches, on a TPU too."""

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tfx_bsl.beam import run_inference as tfx_bsl_inference
from tfx_bsl.public.proto import model_spec_pb2

from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.bulk_inferrer import saved_model_session

__all__ = ['padded_size', 'pad_batch', 'unpad_outputs',
           'create_model_handler']


def padded_size(count: int, batch_size: int) -> int:
  """The rows a call of `count` examples gets: the next power of two, at
  most `batch_size`.

  A full batch is `batch_size`; a smaller one (the end of a bundle) is
  padded by fewer rows than it has, and a TPU compiles one graph per size
  (at most log2(batch_size) + 1 of them).
  """
  return min(batch_size, 1 << max(0, count - 1).bit_length())


def pad_batch(serialized: Sequence[bytes], batch_size: int) -> List[bytes]:
  """`serialized` filled up to `padded_size` with copies of its last example.

  Copies of a real example parse as the model expects, so the padding
  cannot fail where the batch would not.
  """
  if not serialized:
    raise ValueError('pad_batch needs at least one example.')
  if len(serialized) > batch_size:
    raise ValueError(f'{len(serialized)} examples do not fit a batch of '
                     f'{batch_size}.')
  size = padded_size(len(serialized), batch_size)
  return list(serialized) + [serialized[-1]] * (size - len(serialized))


def unpad_outputs(outputs: Mapping[str, np.ndarray],
                  count: int) -> Dict[str, np.ndarray]:
  """The first `count` rows of each output: the padding's rows dropped."""
  return {alias: value[:count] for alias, value in outputs.items()}


class _FixedBatchMixin:
  """tfx_bsl's saved-model handler, with our loading and fixed batches.

  What tfx_bsl does is kept (signature checks, output checks, the
  PredictionLogs of classify/regress/predict/multi-inference); what changes:
  the `{serve, tpu}` tag set is accepted, the session is opened on the TPU
  with its system initialised, and every model call gets `batch_size`
  examples, or the end of a bundle padded to `padded_size`.
  """

  def __init__(self, inference_spec_type: model_spec_pb2.InferenceSpecType,
               config: inference_config.InferenceConfig):
    super().__init__(inference_spec_type, None)
    self._config = config

  def _has_tpu_tag(self) -> bool:
    # tfx_bsl refuses {serve, tpu} here (NotImplementedError); this handler
    # runs it (load_model opens the session on the TPU).
    return False

  def load_model(self) -> saved_model_session.LoadedModel:
    self._maybe_register_addon_ops()
    return saved_model_session.load_saved_model(
        self._model_path, self._tags, self._config.use_tpu, self._config.tpu)

  def _run_inference(self, examples: List[Any],
                     serialized_examples: List[bytes],
                     model: Any) -> Dict[str, np.ndarray]:
    del examples  # The model reads the serialized examples.
    spec = self._io_tensor_spec
    size = self._config.batch_size
    parts = []
    for start in range(0, len(serialized_examples), size):
      chunk = serialized_examples[start:start + size]
      result = model.run(spec.output_alias_tensor_names,
                         feed_dict={spec.input_tensor_name:
                                    pad_batch(chunk, size)})
      if len(result) != len(spec.output_alias_tensor_names):
        raise RuntimeError('Output length does not match fetches')
      parts.append(unpad_outputs(result, len(chunk)))
    return {alias: np.concatenate([part[alias] for part in parts])
            for alias in spec.output_alias_tensor_names}

  def batch_elements_kwargs(self) -> Mapping[str, Any]:
    size = self._config.batch_size
    return {'min_batch_size': size, 'max_batch_size': size}

  def share_model_across_processes(self) -> bool:
    # libtpu lets one process of a host hold the TPU: on a TPU the model is
    # loaded once per host and the other processes call it through a proxy.
    # Off a TPU each process loads it once (shared by its threads), as
    # tfx_bsl does.
    return self._config.use_tpu


class ClassifyModelHandler(_FixedBatchMixin,
                           tfx_bsl_inference._ClassifyModelHandler):  # pylint: disable=protected-access
  """Classify signatures: PredictionLog.classify_log."""


class RegressModelHandler(_FixedBatchMixin,
                          tfx_bsl_inference._RegressModelHandler):  # pylint: disable=protected-access
  """Regress signatures: PredictionLog.regress_log."""


class MultiInferenceModelHandler(
    _FixedBatchMixin, tfx_bsl_inference._MultiInferenceModelHandler):  # pylint: disable=protected-access
  """Several classify/regress signatures: multi_inference_log."""


class PredictModelHandler(_FixedBatchMixin,
                          tfx_bsl_inference._PredictModelHandler):  # pylint: disable=protected-access
  """Predict signatures: PredictionLog.predict_log."""


_HANDLERS = {
    tfx_bsl_inference._OperationType.CLASSIFICATION: ClassifyModelHandler,  # pylint: disable=protected-access
    tfx_bsl_inference._OperationType.REGRESSION: RegressModelHandler,  # pylint: disable=protected-access
    tfx_bsl_inference._OperationType.MULTI_INFERENCE:  # pylint: disable=protected-access
        MultiInferenceModelHandler,
    tfx_bsl_inference._OperationType.PREDICTION: PredictModelHandler,  # pylint: disable=protected-access
}


def create_model_handler(
    inference_spec_type: model_spec_pb2.InferenceSpecType,
    config: inference_config.InferenceConfig) -> _FixedBatchMixin:
  """The handler for the signatures' kind, as tfx_bsl picks its own.

  Args:
    inference_spec_type: the saved model's path, tag set and signatures.
    config: batch size and where the model runs.

  Returns:
    A `apache_beam.ml.inference.base.ModelHandler` of PredictionLogs.
  """
  operation = tfx_bsl_inference._get_operation_type(inference_spec_type)  # pylint: disable=protected-access
  return _HANDLERS[operation](inference_spec_type, config)
