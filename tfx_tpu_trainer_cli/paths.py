"""Where the bundled taxi pipeline, its module files and the taxi data are."""

import functools
import importlib.util
import os
import types

from tfx_tpu_trainer import user_module

__all__ = ['BUNDLE_ROOT', 'PIPELINES_DIR', 'COMPONENTS_DIR',
           'TAXI_PIPELINE_FILE', 'PREPROCESSING_MODULE_FILE',
           'TRAINER_MODULE_FILE', 'taxi_pipeline', 'embedded_data_root']

_HERE = os.path.dirname(os.path.abspath(__file__))
# A wheel carries pipelines/ and components/ as data in bundled/ (setup.py);
# a checkout has them at the top of the repository.
_WHEEL_DATA = os.path.join(_HERE, 'bundled')
BUNDLE_ROOT = (_WHEEL_DATA if os.path.isdir(_WHEEL_DATA)
               else os.path.dirname(_HERE))
PIPELINES_DIR = os.path.join(BUNDLE_ROOT, 'pipelines')
COMPONENTS_DIR = os.path.join(BUNDLE_ROOT, 'components')
TAXI_PIPELINE_FILE = os.path.join(PIPELINES_DIR, 'taxi_pipeline.py')
PREPROCESSING_MODULE_FILE = os.path.join(COMPONENTS_DIR,
                                         'taxi_preprocessing.py')
TRAINER_MODULE_FILE = os.path.join(COMPONENTS_DIR, 'taxi_tpu_module.py')


@functools.lru_cache(maxsize=None)
def taxi_pipeline() -> types.ModuleType:
  """pipelines/taxi_pipeline.py, loaded by path (once), as `--pipeline` is."""
  return user_module.load_file(TAXI_PIPELINE_FILE,
                               '_tfx_tpu_trainer_taxi_pipeline')


def embedded_data_root() -> str:
  """The taxi CSV (big_tipper_label variant) that the tfx wheel ships."""
  spec = importlib.util.find_spec('tfx')
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError('The tfx package is not installed.')
  return os.path.join(
      list(spec.submodule_search_locations)[0], 'examples',
      'chicago_taxi_pipeline', 'data', 'big_tipper_label')
