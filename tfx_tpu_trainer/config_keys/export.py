"""The keys of the exported model and the checks before it is published."""

import dataclasses

from tfx_tpu_trainer.config_keys import checks
from tfx_tpu_trainer.config_keys import declare

__all__ = ['EXPORT_API_VERSIONS', 'ExportKeys']

EXPORT_API_VERSIONS = (1, 2)


@dataclasses.dataclass(frozen=True)
class ExportKeys:
  """The export: its meta graphs and what may stop a model's publication.

  Attributes:
    export_to_tpu: add the `{serve, tpu}` meta graph.
    export_saved_model_api_version: TPUEstimator's export API (1 or 2).
    allow_nonfinite_metrics: publish despite NaN/inf eval metrics.
    allow_nonfinite_variables: publish despite NaN/inf variables.
  """
  export_to_tpu: bool = declare.key(
      True, check=checks.boolean,
      help='false: export only the `{serve}` meta graph, no `{serve, tpu}`')
  export_saved_model_api_version: int = declare.key(
      1, check=lambda k, v: checks.choice(k, v, EXPORT_API_VERSIONS),
      help='2: the module wraps its own TPU inference '
      '(`model_fn_inference_on_tpu`)')
  allow_nonfinite_metrics: bool = declare.key(
      False, check=checks.boolean,
      help='true: publish a model even when its final eval metrics hold NaN '
      'or infinity')
  allow_nonfinite_variables: bool = declare.key(
      False, check=checks.boolean,
      help='true: publish a model even when its final checkpoint holds NaN '
      'or infinity')
