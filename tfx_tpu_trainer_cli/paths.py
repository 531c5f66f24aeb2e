"""Where the bundled taxi pipeline, its module files and the taxi data are."""

import functools
import importlib.util
import os
import types

from tfx_tpu_trainer.user_code import user_module

__all__ = ['TRAINER_MODULE_FILE', 'is_bundled_module', 'taxi_pipeline',
           'embedded_data_root']

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
# The bundled taxi models by the name `--model` takes (`run`, `compile`):
# their trainer module files in components/.
MODEL_MODULE_FILES = {
    'wide_and_deep': 'taxi_tpu_module.py',
    'keras': 'taxi_keras_module.py',
    'embeddings': 'taxi_embedding_module.py',
}
DEFAULT_MODEL = 'wide_and_deep'


def model_module_file(model: str, components_dir: str = COMPONENTS_DIR) -> str:
  """The trainer module of a bundled model, in `components_dir`."""
  return os.path.join(components_dir, MODEL_MODULE_FILES[model])


TRAINER_MODULE_FILE = model_module_file(DEFAULT_MODEL)


def is_bundled_module(module_file: str) -> bool:
  """Whether `module_file` is the trainer module of a bundled `--model`."""
  bundled = {os.path.realpath(model_module_file(model))
             for model in MODEL_MODULE_FILES}
  return os.path.realpath(module_file) in bundled


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
