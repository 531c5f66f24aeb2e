"""Checks of the CSV data root that `tfx-tpu-trainer run` reads (no TFX).

CsvExampleGen reads every file in the data root. An empty file, a header
without a column the preprocessing reads, or no data row would otherwise
pass the argument checks and fail minutes later inside Transform
(`KeyError: 'trip_miles'`); these checks read only each file's first two
rows, before any component runs.
"""

import csv
import importlib.util
import os
from typing import List, Optional, Sequence

from tfx_tpu_trainer_cli.bundled.pipelines import paths

FEATURES_MODULE_FILE = os.path.join(paths.COMPONENTS_DIR, 'taxi_features.py')


class CsvDataError(ValueError):
  """The CSV data root cannot feed the pipeline."""


def required_columns(preprocessing_module_file: str) -> List[str]:
  """The raw columns a run needs.

  The bundled preprocessing_fn reads the taxi features and the label;
  another preprocessing module is only known to need the label, which the
  Evaluator reads from the raw examples.
  """
  spec = importlib.util.spec_from_file_location('_taxi_features_columns',
                                                FEATURES_MODULE_FILE)
  features = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(features)
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


def check_data_root(data_root: str, required_columns: Sequence[str],
                    flag: str = '--data-root') -> None:
  """Raises CsvDataError unless every file has the columns and a data row.

  Args:
    data_root: the directory CsvExampleGen reads.
    required_columns: columns every header must name.
    flag: the command-line flag, for the message.
  """
  files = data_files(data_root)
  if not files:
    raise CsvDataError(f'{flag} {data_root!r} holds no files.')
  for path in files:
    problem = _file_problem(path, required_columns)
    if problem:
      raise CsvDataError(f'{flag}: {path} {problem}')


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
