"""The final metrics as a `system.Metrics` artifact (KFP v2, Vertex AI).

The KFP v2 UI shows scalar metrics only for artifacts of MLMD type
`system.Metrics`. TFX's v2 compiler writes a custom type as a schema titled
with its TYPE_NAME (compiler_utils.get_artifact_schema); the KFP launcher
names the MLMD type after that title and records the artifact's custom
properties; but TFX's v2 entrypoint reads a type back by importing the
title as `<module>.<class>`, hence the `system` module installed before it
starts (kubeflow/v2_metrics.py).
"""

import sys
import types as python_types
from typing import Any, Dict, Mapping, Optional

from tfx.types import artifact

__all__ = ['OUTPUT_KEY', 'Metrics', 'install_system_module', 'record_metrics',
           'declare_as_kfp_does']

OUTPUT_KEY = 'metrics'
# How kfp 2 declares an `Output[Metrics]` (kfp/dsl/types/artifact_types.py).
KFP_V2_ARTIFACT_TYPE = {'schemaTitle': 'system.Metrics',
                        'schemaVersion': '0.0.1'}
SYSTEM_MODULE = 'system'


class Metrics(artifact.Artifact):
  """Scalar metrics, one custom property each: KFP's `system.Metrics`."""
  TYPE_NAME = 'system.Metrics'


def install_system_module() -> None:
  """Makes `import system; system.Metrics` work in this process.

  What TFX's v2 entrypoint imports for an artifact titled `system.Metrics`.
  A module `system` that is already importable is left alone when it has
  `Metrics`; one without it is an error (two meanings of one name).

  Raises:
    ImportError: another module named `system` without `Metrics` is loaded.
  """
  existing = sys.modules.get(SYSTEM_MODULE)
  if existing is not None:
    if getattr(existing, 'Metrics', None) is not Metrics:
      raise ImportError(
          f'A module named {SYSTEM_MODULE!r} ({existing!r}) is already '
          'loaded; TFX\'s KFP v2 entrypoint would read the trainer\'s '
          "system.Metrics output from it. Rename that module.")
    return
  module = python_types.ModuleType(
      SYSTEM_MODULE, 'KFP v2 system artifact types (tfx_tpu_trainer).')
  module.Metrics = Metrics
  sys.modules[SYSTEM_MODULE] = module


def record_metrics(metrics: Mapping[str, Any],
                   output: Optional[artifact.Artifact]) -> None:
  """Sets each finite number of `metrics` as a custom property of `output`."""
  if output is None:
    return
  for name, value in metrics.items():
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if value != value or value in (float('inf'), float('-inf')):
      continue  # KFP shows numbers; NaN and infinity are left out.
    output.set_float_custom_property(name, float(value))


def declare_as_kfp_does(component: Dict[str, Any]) -> None:
  """Declares the `metrics` output of a compiled trainer as kfp 2 does.

  Args:
    component: the trainer's component spec in a pipeline spec (JSON),
      changed in place: its `metrics` artifact type becomes
      `KFP_V2_ARTIFACT_TYPE` (TFX writes an `instanceSchema` titled
      `system.Metrics`; TFX's v2 entrypoint reads either form,
      kubeflow_v2_entrypoint_utils._retrieve_class_path).
  """
  artifacts = component.get('outputDefinitions', {}).get('artifacts', {})
  if OUTPUT_KEY in artifacts:
    artifacts[OUTPUT_KEY]['artifactType'] = dict(KFP_V2_ARTIFACT_TYPE)
