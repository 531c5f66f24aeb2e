"""Records the final evaluation metrics: JSON in model_run, MLMD properties."""

import json
import math
import os
from typing import Any, Dict, Mapping

import numpy as np
from tfx import types
from tfx.dsl.io import fileio

__all__ = ['METRICS_FILE_NAME', 'CUSTOM_PROPERTY_PREFIX', 'to_python',
           'write_metrics_json', 'record_on_artifact']

METRICS_FILE_NAME = 'eval_metrics.json'
CUSTOM_PROPERTY_PREFIX = 'eval_'


def to_python(metrics: Mapping[str, Any]) -> Dict[str, Any]:
  """Converts the estimator's numpy metric values to plain ints and floats."""
  result = {}
  for name, value in sorted(metrics.items()):
    value = np.asarray(value)
    if value.size != 1:
      continue  # Only scalar metrics are recorded.
    scalar = value.reshape(()).item()
    if isinstance(scalar, (bool, np.bool_)):
      scalar = int(scalar)
    result[name] = scalar if isinstance(scalar, int) else float(scalar)
  return result


def write_metrics_json(metrics: Mapping[str, Any], model_run_dir: str) -> str:
  """Writes `metrics` to `<model_run_dir>/eval_metrics.json` atomically."""
  path = os.path.join(model_run_dir, METRICS_FILE_NAME)
  temporary = path + '.tmp'
  fileio.makedirs(model_run_dir)
  with fileio.open(temporary, 'w') as f:
    f.write(json.dumps(_json_safe(metrics), indent=2, sort_keys=True))
  fileio.rename(temporary, path, overwrite=True)
  return path


def record_on_artifact(metrics: Mapping[str, Any],
                       model: types.Artifact) -> None:
  """Sets each metric as custom property `eval_<name>` of the model artifact."""
  for name, value in metrics.items():
    key = CUSTOM_PROPERTY_PREFIX + name
    if isinstance(value, int):
      model.set_int_custom_property(key, value)
    else:
      model.set_float_custom_property(key, value)


def _json_safe(metrics: Mapping[str, Any]) -> Dict[str, Any]:
  # JSON has no NaN or infinity; record them as strings rather than fail.
  return {
      name: (str(value) if isinstance(value, float) and not math.isfinite(value)
             else value) for name, value in metrics.items()
  }
