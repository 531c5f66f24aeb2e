"""Checks of the examples a TPUTrainer reads, and diagnoses of read failures."""

import contextlib
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf
from tfx import types
from tfx.types import artifact_utils

from tfx_tpu_trainer import errors

__all__ = ['DataError', 'check_splits', 'split_files', 'check_first_batch',
           'explain_data_errors']


class DataError(errors.TPUTrainerError, ValueError):
  """The examples are missing, too few, corrupt, or do not match the schema."""


def check_splits(examples: Sequence[types.Artifact], splits: Sequence[str],
                 args_name: str) -> None:
  """Raises DataError unless every artifact has every split.

  Args:
    examples: the `examples` input artifacts.
    splits: split names to read ('train' or 'eval' when the args name none).
    args_name: 'train_args' or 'eval_args', for the message.
  """
  for artifact in examples:
    available = artifact_utils.decode_split_names(artifact.split_names)
    missing = [split for split in splits if split not in available]
    if missing:
      raise DataError(
          f'The examples at {artifact.uri} have no split(s) {missing} '
          f'(splits: {available}). Set {args_name}.splits to existing splits.')


def split_files(file_patterns: Sequence[str]) -> List[str]:
  """The files the patterns match, sorted."""
  files = []
  for pattern in file_patterns:
    files.extend(sorted(tf.io.gfile.glob(pattern)))
  return files


def check_first_batch(file_patterns: Sequence[str], split: str,
                      batch_size: int, batch_size_key: str) -> None:
  """Raises DataError unless the split holds at least `batch_size` records.

  Args:
    file_patterns: the split's file patterns (fn_args.train_files/eval_files).
    split: the split's name, for the message.
    batch_size: the global batch size of the split.
    batch_size_key: the custom_config key of that batch size.
  """
  files = split_files(file_patterns)
  if not files:
    raise DataError(
        f'The {split!r} split has no files (looked for {list(file_patterns)}).'
        ' Check the ExampleGen output that feeds this trainer.')
  count = 0
  for path in files:
    count += _count_records(path, limit=batch_size - count)
    if count >= batch_size:
      return
  if count == 0:
    raise DataError(
        f'The {split!r} split is empty: its files {files} hold no examples.')
  raise DataError(
        f'The {split!r} split holds only {count} examples, fewer than '
        f'{batch_size_key}={batch_size}: batches drop their remainder (TPU '
        f'needs fixed shapes), so no batch can be formed. Use a '
        f'{batch_size_key} of at most {count}, or more data.')


def _count_records(path: str, limit: int) -> int:
  count = 0
  try:
    for _ in tf.data.TFRecordDataset(path, compression_type='GZIP').take(
        limit):
      count += 1
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise DataError(_corrupt_file_message(path, count, e)) from e
  return count


def _corrupt_file_message(path: str, record: int, error: Exception) -> str:
  if record == 0 and _is_uncompressed_tfrecord(path):
    return (f'The examples file {path} is an uncompressed TFRecord file; '
            'TPUTrainer reads GZIP-compressed TFRecords, as ExampleGen and '
            'Transform write them. Write it with '
            "tf.io.TFRecordWriter(path, options='GZIP') (or gzip it).")
  return (f'The examples file {path} is corrupt or truncated after record '
          f'{record}: {errors.first_line(error)}. Re-run the component that '
          'wrote it (ExampleGen or Transform) or remove the file.')


def _is_uncompressed_tfrecord(path: str) -> bool:
  """True when the file is not gzip but reads as plain TFRecords."""
  try:
    with tf.io.gfile.GFile(path, 'rb') as f:
      if f.read(2) == b'\x1f\x8b':  # The gzip magic number.
        return False
    for _ in tf.data.TFRecordDataset(path).take(1):
      return True
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError,
          tf.errors.NotFoundError):
    return False
  return False


@contextlib.contextmanager
def explain_data_errors(splits: Mapping[str, Sequence[str]],
                        feature_spec: Mapping[str, Any],
                        label_key: Optional[str],
                        reader: str = 'Training') -> Iterator[None]:
  """Turns TensorFlow data errors while reading into named DataErrors.

  Args:
    splits: split name -> file patterns, of the splits being read.
    feature_spec: the parsing spec of the examples (from their schema).
    label_key: the label feature, checked for a value in every record.
    reader: what reads them, for the log line.

  Yields:
    Nothing; wraps the reading (the training call).
  """
  try:
    yield
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    logging.warning('%s failed with %s; scanning the examples for the '
                    'cause.', reader, type(e).__name__)
    problem = find_bad_record(splits, feature_spec, label_key)
    if problem is None:
      raise
    raise DataError(
        f'{problem} (TensorFlow said: {errors.first_line(e)})') from e


def find_bad_record(splits: Mapping[str, Sequence[str]],
                    feature_spec: Mapping[str, Any],
                    label_key: Optional[str]) -> Optional[str]:
  """Scans the splits; describes the first unreadable or mismatched record."""
  spec = dict(feature_spec)
  for split, patterns in splits.items():
    for path in split_files(patterns):
      record_index = 0
      try:
        for record in tf.data.TFRecordDataset(path, compression_type='GZIP'):
          problem = _record_problem(record, spec, label_key)
          if problem:
            return (f'Record {record_index} of {path} (split {split!r}) '
                    f'does not match the schema: {problem}')
          record_index += 1
      except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
        return _corrupt_file_message(path, record_index, e)
  return None


def _record_problem(record: tf.Tensor, spec: Dict[str, Any],
                    label_key: Optional[str]) -> Optional[str]:
  try:
    parsed = tf.io.parse_example(tf.reshape(record, [1]), spec)
  except tf.errors.InvalidArgumentError as e:
    return errors.first_line(e)
  if label_key and label_key in parsed:
    label = parsed[label_key]
    values = label.values if isinstance(label, tf.SparseTensor) else label
    if tf.size(values) == 0:
      return f'the label {label_key!r} has no value.'
  return None
