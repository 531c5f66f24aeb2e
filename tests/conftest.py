"""Shared fixtures: a small slice of the taxi data through real TFX components."""

import contextlib
import csv
import logging as python_logging
import os
import sys
from typing import Optional

from absl import logging
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

TEST_MODULES_DIR = os.path.join(os.path.dirname(__file__), 'fixtures',
                                'modules')
SLICE_ROWS = 400


def write_taxi_slice(directory: str, rows: int = SLICE_ROWS,
                     source: Optional[str] = None) -> str:
  """Writes the first `rows` rows of a taxi CSV to `directory`.

  Args:
    directory: where data.csv goes.
    rows: how many data rows.
    source: the CSV (default: the embedded big_tipper taxi data).

  Returns:
    `directory`.
  """
  from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
  source = source or os.path.join(paths.embedded_data_root(),
                                  'data.csv')
  os.makedirs(directory, exist_ok=True)
  with open(source, newline='') as src, open(
      os.path.join(directory, 'data.csv'), 'w', newline='') as dst:
    for index, line in enumerate(src):
      if index > rows:
        break
      dst.write(line)
  return directory


def read_taxi_rows(data_dir: str):
  with open(os.path.join(data_dir, 'data.csv'), newline='') as f:
    return list(csv.DictReader(f))


def pytest_addoption(parser):
  from tests import suite_cost  # pylint: disable=g-import-not-at-top
  suite_cost.add_option(parser)


def pytest_configure(config):
  """Prints the CPU seconds of the costliest files and tests at the end."""
  from tests import suite_cost  # pylint: disable=g-import-not-at-top
  suite_cost.register(config)


def pytest_collection_modifyitems(items):
  """The files of `heavy` tests first, each file's tests kept together.

  Under pytest-xdist (--dist loadfile --no-loadscope-reorder, the Makefile)
  files are handed to the processes in this order: the minutes-long files
  start first and the many short ones even out the end, instead of one
  heavy file starting when the other process has nothing left to run.
  """
  heavy_files = {item.nodeid.split('::')[0] for item in items
                 if item.get_closest_marker('heavy')}
  items.sort(key=lambda item: item.nodeid.split('::')[0] not in heavy_files)


@pytest.fixture(scope='session')
def taxi_data_dir(tmp_path_factory):
  return write_taxi_slice(str(tmp_path_factory.mktemp('taxi_data')))


@pytest.fixture(scope='session')
def taxi_artifacts(tmp_path_factory, taxi_data_dir):
  """Runs ExampleGen..Transform once on the slice; returns their artifacts."""
  from tests.fixtures import pipeline_outputs  # pylint: disable=g-import-not-at-top
  from tests.fixtures import run_once  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)
  # Once per run of the suite, also under pytest-xdist (run_once.py).
  return run_once.artifacts(
      tmp_path_factory, 'taxi_pipeline',
      lambda root: pipeline_outputs.run_data_components(root, taxi_data_dir))


# The shared taxi model's executor run (taxi_trainer_run).
TAXI_TRAIN_STEPS = 30
TAXI_EVAL_STEPS = 5


@pytest.fixture(scope='session')
def taxi_trainer_run(tmp_path_factory, taxi_artifacts):
  """The bundled taxi module trained by the executor on taxi_artifacts.

  One `Do()` per run of the suite (run_once.py): TAXI_TRAIN_STEPS steps,
  TAXI_EVAL_STEPS eval steps, batches of 16; its model, {serve} and
  {serve, tpu}, and its model_run are for tests to read, never to change.
  """
  from tests.fixtures import pipeline_outputs  # pylint: disable=g-import-not-at-top
  from tests.fixtures import run_once  # pylint: disable=g-import-not-at-top
  from tests.fixtures.run_settings import SMALL_BATCHES  # pylint: disable=g-import-not-at-top

  def train(root):
    from tfx_tpu_trainer import executor  # pylint: disable=g-import-not-at-top
    from tfx_tpu_trainer_cli import paths  # pylint: disable=g-import-not-at-top
    run = pipeline_outputs.trainer_run(
        taxi_artifacts, root, paths.TRAINER_MODULE_FILE,
        custom_config=dict(SMALL_BATCHES), train_steps=TAXI_TRAIN_STEPS,
        eval_steps=TAXI_EVAL_STEPS)
    executor.Executor().Do(run.input_dict, run.output_dict,
                           run.exec_properties)
    return run

  return run_once.trainer_run(tmp_path_factory, 'taxi_trainer_run', train)


@contextlib.contextmanager
def _absl_records(caplog, level: int):
  """caplog sees absl's records at `level` and above, whatever tests set.

  Some tests leave the absl logger not propagating, or at a higher level;
  this attaches caplog's handler to it directly.
  """
  absl_logger = python_logging.getLogger('absl')
  absl_logger.addHandler(caplog.handler)
  try:
    with caplog.at_level(level, logger='absl'):
      yield caplog
  finally:
    absl_logger.removeHandler(caplog.handler)


@pytest.fixture
def absl_warnings(caplog):
  """caplog that sees absl's WARNING records whatever earlier tests set."""
  with _absl_records(caplog, python_logging.WARNING) as records:
    yield records


@pytest.fixture
def absl_info(caplog):
  """caplog that sees absl's INFO records whatever earlier tests set."""
  with _absl_records(caplog, python_logging.INFO) as records:
    yield records
