"""Paths of the bundled module files and the embedded data (no heavy imports)."""

import importlib.util
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPONENTS_DIR = os.path.join(REPO_ROOT, 'components')
PREPROCESSING_MODULE_FILE = os.path.join(COMPONENTS_DIR,
                                         'taxi_preprocessing.py')
TRAINER_MODULE_FILE = os.path.join(COMPONENTS_DIR, 'taxi_tpu_module.py')


def embedded_data_root() -> str:
  """The taxi CSV (big_tipper_label variant) that the tfx wheel ships."""
  spec = importlib.util.find_spec('tfx')
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError('The tfx package is not installed.')
  return os.path.join(
      list(spec.submodule_search_locations)[0], 'examples',
      'chicago_taxi_pipeline', 'data', 'big_tipper_label')
