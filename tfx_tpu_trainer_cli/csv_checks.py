"""Checks of the CSV data root that `tfx-tpu-trainer run` reads (no TFX)."""

import codecs
import csv
import os
from typing import List, Optional, Sequence, Tuple

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.user_code import user_module
from tfx_tpu_trainer_cli import paths

FEATURES_MODULE_FILE = os.path.join(paths.COMPONENTS_DIR, 'taxi_features.py')


class CsvDataError(errors.TPUTrainerError, ValueError):
  """The CSV data root cannot feed the pipeline."""


def required_columns(preprocessing_module_file: str) -> List[str]:
  """The raw columns a run needs.

  The bundled preprocessing_fn reads the taxi features and the label;
  another preprocessing module is only known to need the label, which the
  Evaluator reads from the raw examples.
  """
  features = user_module.load_file(FEATURES_MODULE_FILE,
                                   '_taxi_features_columns')
  if (os.path.abspath(preprocessing_module_file) !=
      os.path.abspath(paths.PREPROCESSING_MODULE_FILE)):
    return [features.LABEL_KEY]
  return (list(features.DENSE_FLOAT_FEATURE_KEYS) +
          list(features.VOCAB_FEATURE_KEYS) +
          list(features.BUCKET_FEATURE_KEYS) +
          list(features.CATEGORICAL_FEATURE_KEYS) + [features.LABEL_KEY])


def data_files(data_root: str) -> List[str]:
  """The files CsvExampleGen reads (its default pattern `*`), sorted."""
  return sorted(
      os.path.join(data_root, name) for name in os.listdir(data_root)
      if not name.startswith('.') and
      os.path.isfile(os.path.join(data_root, name)))


# CsvExampleGen's default split: hash buckets 2 (train) : 1 (eval).
DEFAULT_SPLIT_SHARES = (('train', 2 / 3), ('eval', 1 / 3))
_SCAN_CHUNK_BYTES = 1 << 20


def check_data_root(data_root: str, required_columns: Sequence[str],
                    flag: str = '--data-root',
                    batch_sizes: Optional[Sequence[Tuple[str, int]]] = None
                   ) -> int:
  """Raises CsvDataError unless the files can feed the pipeline.

  Every file has the columns, a data row and only UTF-8 text; with
  `batch_sizes`, the rows are enough for one batch of each split.

  Args:
    data_root: the directory CsvExampleGen reads.
    required_columns: columns every header must name.
    flag: the command-line flag, for the message.
    batch_sizes: (flag, size) of the train and eval batch sizes, in that
      order, or None (not checked).

  Returns:
    The number of data rows (non-empty lines after each header).
  """
  files = data_files(data_root)
  if not files:
    raise CsvDataError(f'{flag} {data_root!r} holds no files.')
  rows = 0
  for path in files:
    problem = _encoding_problem(path) or _file_problem(path, required_columns)
    if problem:
      raise CsvDataError(f'{flag}: {path} {problem}')
    rows += count_data_rows(path)
  if batch_sizes:
    check_rows_for_batches(rows, batch_sizes, f'{flag} {data_root!r}')
  return rows


def check_rows_for_batches(rows: int, batch_sizes: Sequence[Tuple[str, int]],
                           where: str) -> None:
  """Each split of the default 2:1 split holds at least one whole batch.

  The Trainer drops partial batches, so a split smaller than its batch size
  yields none and fails only after Transform; the split is by hash, so
  the share is what a split gets on average.

  Args:
    rows: data rows in all files.
    batch_sizes: (flag, size) for the train and eval splits, in that order.
    where: names the data for the message.
  """
  for (split, share), (flag, size) in zip(DEFAULT_SPLIT_SHARES, batch_sizes):
    expected = int(rows * share)
    if size > expected:
      needed = f'at least {int(size / share) + 1} rows for this batch size'
      remedy = (f'Use a {flag} of at most {expected} (or add data: {needed}).'
                if expected else
                f'No batch size fits: add data ({needed}; any batch size '
                f'needs at least {int(1 / share) + 1}).')
      raise CsvDataError(
          f'{flag} {size} is larger than the {split} split: {where} holds '
          f'{rows} data row(s), of which ExampleGen puts about {expected} '
          f'({share:.0%}) in {split}, and training reads whole batches only. '
          + remedy)


def count_data_rows(path: str) -> int:
  """Non-empty lines after the header (a quoted multi-line cell counts more)."""
  with open(path, 'rb') as f:
    lines = sum(1 for line in f if line.strip())
  return max(lines - 1, 0)


# Byte order marks a CSV file may start with: (bytes, encoding).
_BYTE_ORDER_MARKS = ((codecs.BOM_UTF8, 'UTF-8'),
                     (codecs.BOM_UTF32_LE, 'UTF-32'),
                     (codecs.BOM_UTF32_BE, 'UTF-32'),
                     (codecs.BOM_UTF16_LE, 'UTF-16'),
                     (codecs.BOM_UTF16_BE, 'UTF-16'))


def _byte_order_mark_problem(path: str) -> Optional[str]:
  """A byte order mark at the start (CsvExampleGen reads it as text)."""
  with open(path, 'rb') as f:
    start = f.read(4)
  for mark, encoding in _BYTE_ORDER_MARKS:
    if start.startswith(mark):
      fix = ("save it as UTF-8 without a BOM, e.g. `sed -i '1s/^\\xEF\\xBB"
             "\\xBF//' FILE`" if encoding == 'UTF-8' else
             f're-encode it, e.g. `iconv -f {encoding} -t utf-8` (and drop '
             'the BOM)')
      return (f'starts with a {encoding} byte order mark (BOM, bytes '
              f'{mark.hex(" ")}), which CsvExampleGen would read as part of '
              f'the first column\'s name: {fix}.')
  return None


def _encoding_problem(path: str) -> Optional[str]:
  """Where the first byte that is not UTF-8 lies (None: all UTF-8)."""
  problem = _byte_order_mark_problem(path)
  if problem:
    return problem
  decoder = codecs.getincrementaldecoder('utf-8')()
  line = 1
  with open(path, 'rb') as f:
    while True:
      chunk = f.read(_SCAN_CHUNK_BYTES)
      try:
        decoder.decode(chunk, final=not chunk)
      except UnicodeDecodeError as e:
        # The decoder may hold back up to 3 bytes of the previous chunk.
        start = max(e.start - len(e.object) + len(chunk), 0)
        before = chunk[:start]
        bad = e.object[e.start:e.start + 1]
        column = start - (before.rfind(b'\n') + 1) + 1
        line += before.count(b'\n')
        return (f'is not UTF-8 text: line {line}, '
                f'column {column} holds the byte 0x{bad.hex()} ({e.reason}). '
                'CsvExampleGen reads UTF-8 only: re-encode the file, e.g. '
                '`iconv -f latin1 -t utf-8`.')
      if not chunk:
        return None
      line += chunk.count(b'\n')


def _file_problem(path: str, required: Sequence[str]) -> Optional[str]:
  try:
    with open(path, newline='', encoding='utf-8') as f:
      rows = csv.reader(f)
      header = next(rows, None)
      while header is not None and not any(cell.strip() for cell in header):
        header = next(rows, None)
      data_row = next((row for row in rows if any(c.strip() for c in row)),
                      None)
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    return f'cannot be read as CSV: {type(e).__name__}: {e}.'
  if header is None:
    return ('is empty. CsvExampleGen needs a header row and at least one '
            'data row in every file of the data root: remove the file or '
            'fill it.')
  columns = [cell.strip() for cell in header]
  missing = [column for column in required if column not in columns]
  if missing:
    return (f'has no column(s) {missing} in its header {columns}. The '
            f'preprocessing reads {list(required)}: add the columns, or '
            'pass a --preprocessing-module-file that does not read them.')
  if data_row is None:
    return ('has a header but no data row. Every file of the data root '
            'needs at least one row of data.')
  return None
