"""A TPUBulkInferrer run that failed mid-Beam: its outputs put back as they
were, and the split, file and record behind the failure named."""

import contextlib
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set

from absl import logging
import tensorflow as tf
from tfx.components.bulk_inferrer import executor as stock_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.utils import io_utils
from tfx_bsl.public.proto import model_spec_pb2

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.bulk_inferrer import model_checks
from tfx_tpu_trainer.bulk_inferrer import model_handler

__all__ = ['explained_failures', 'find_bad_record']

# Records scored per call while the failing one is looked for.
_SCAN_BATCH = 256
_PAYLOAD_NAMES = {
    example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE: 'tf.train.Example',
    example_gen_pb2.PayloadFormat.FORMAT_TF_SEQUENCE_EXAMPLE:
        'tf.train.SequenceExample',
}


def _listing(directories: Sequence[str]) -> Dict[str, Optional[Set[str]]]:
  """What each directory holds (None: it does not exist)."""
  return {d: set(fileio.listdir(d)) if fileio.isdir(d) else None
          for d in directories}


def _put_back(before: Dict[str, Optional[Set[str]]]) -> List[str]:
  """Removes what appeared in the directories since `before`."""
  removed = []
  for directory, names in before.items():
    if not fileio.exists(directory):
      continue
    if names is None:
      fileio.rmtree(directory)
      removed.append(directory)
      continue
    for name in set(fileio.listdir(directory)) - names:
      path = os.path.join(directory, name.rstrip('/'))
      if fileio.isdir(path):
        fileio.rmtree(path)
      else:
        fileio.remove(path)
      removed.append(path)
  return removed


def _records(path: str) -> Iterator[bytes]:
  compression = 'GZIP' if path.endswith('.gz') else ''
  for record in tf.data.TFRecordDataset(path, compression_type=compression):
    yield record.numpy()


class _Scorer:
  """Scores parsed records with the model on CPU, as the checks do."""

  def __init__(self, spec: model_spec_pb2.InferenceSpecType):
    self.spec = spec
    self._handler = model_handler.create_model_handler(
        spec, inference_config.InferenceConfig(use_tpu=False,
                                               batch_size=_SCAN_BATCH))
    self._model = self._handler.load_model()

  def first_failure(self, parsed: List) -> Optional[tuple]:
    """(index in `parsed`, error) of the first record that fails, or None."""
    try:
      self._handler.run_inference(parsed, self._model)
      return None
    except (tf.errors.OpError, ValueError) as e:
      if len(parsed) == 1:
        return 0, e
    half = len(parsed) // 2
    found = self.first_failure(parsed[:half])
    if found is not None:
      return found
    found = self.first_failure(parsed[half:])
    return None if found is None else (half + found[0], found[1])

  def close(self) -> None:
    self._model.close()


def _file_problem(split: str, path: str, parse: Callable,
                  payload_format: int,
                  scorer: Optional[_Scorer]) -> Optional[str]:
  """What is wrong with the first bad record of one file, or None."""
  index, batch = 0, []
  try:
    for record in _records(path):
      try:
        batch.append(parse(record))
      except Exception as e:  # pylint: disable=broad-except
        kind = _PAYLOAD_NAMES.get(payload_format, 'record of its format')
        return (f'Record {index} of {path} (split {split!r}) is not a '
                f'serialized {kind} ({errors.first_line(e)}). Re-run the '
                'ExampleGen that wrote it, or leave the record out.')
      index += 1
      if scorer and len(batch) == _SCAN_BATCH:
        problem = _scored_problem(split, path, index - len(batch), batch,
                                  scorer)
        if problem:
          return problem
        batch = []
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    return (f'The examples file {path} (split {split!r}) is corrupt or cut '
            f'short after record {index}: {model_checks.tensorflow_reason(e)}.'
            ' Re-run the ExampleGen that wrote it, or remove the file.')
  if scorer and batch:
    return _scored_problem(split, path, index - len(batch), batch, scorer)
  return None


def _scored_problem(split: str, path: str, first: int, batch: List,
                    scorer: _Scorer) -> Optional[str]:
  found = scorer.first_failure(batch)
  if found is None:
    return None
  offset, error = found
  names = list(scorer.spec.saved_model_spec.signature_name) or [
      tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
  return (f'Record {first + offset} of {path} (split {split!r}) cannot feed '
          f'signature(s) {names} of {scorer.spec.saved_model_spec.model_path}'
          f': {model_checks.tensorflow_reason(error)}. Score examples with '
          'the features the model was exported to parse, or leave the '
          'record out.')


def find_bad_record(example_uris: Dict[str, str], payload_format: int,
                    spec: Optional[model_spec_pb2.InferenceSpecType]
                   ) -> Optional[str]:
  """Reads every split in order; describes its first bad record, or None.

  A record is bad when its file cannot be read past it (cut or corrupt),
  when it does not parse as the payload format, or (with `spec`, a model
  that runs on CPU) when the model cannot score it.

  Args:
    example_uris: split name -> the split's URI.
    payload_format: the examples' payload format.
    spec: the model to score the records with, or None to only read them.

  Returns:
    The problem, naming the split, the file and the record; or None.
  """
  parse = stock_executor._MakeParseFn(payload_format)  # pylint: disable=protected-access
  scorer = _Scorer(spec) if spec is not None else None
  try:
    for split, uri in sorted(example_uris.items()):
      for path in sorted(tf.io.gfile.glob(io_utils.all_files_pattern(uri))):
        problem = _file_problem(split, path, parse, payload_format, scorer)
        if problem:
          return problem
  finally:
    if scorer:
      scorer.close()
  return None


def _model_error(error: BaseException) -> bool:
  """Whether a Beam failure came from the model's TensorFlow ops."""
  return 'InvalidArgumentError' in f'{type(error).__name__}: {error}'


@contextlib.contextmanager
def explained_failures(output_dirs: Sequence[str],
                       example_uris: Dict[str, str], payload_format: int,
                       spec: model_spec_pb2.InferenceSpecType
                      ) -> Iterator[None]:
  """A failed Beam run: outputs put back, the bad record named.

  Args:
    output_dirs: the folders the run writes (what Beam leaves in them,
      `beam-temp-*` and finished files, is removed on failure).
    example_uris: split name -> the split's URI.
    payload_format: the examples' payload format.
    spec: the model and signatures being scored.

  Yields:
    Nothing; wraps the Beam pipeline.

  Raises:
    BulkInferenceError: naming the split, file and record, when one is
      found; else the run's own error.
  """
  before = _listing(output_dirs)
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    removed = _put_back(before)
    if removed:
      logging.warning('The Beam run failed; removed what it left in the '
                      'outputs: %s.', ', '.join(removed))
    logging.warning('The Beam run failed (%s); reading the examples for the '
                    'record behind it.', type(e).__name__)
    cpu_spec = model_checks.cpu_spec(spec) if _model_error(e) else None
    problem = find_bad_record(example_uris, payload_format, cpu_spec)
    if problem is None:
      raise
    raise model_checks.BulkInferenceError(
        f'{problem} Nothing was written: the outputs are as they were before '
        'the run.') from e
