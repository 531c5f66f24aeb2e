"""custom_config['bfloat16'] checked against the graph the model_fn built."""

from typing import Any, Iterable, List, Mapping

import tensorflow as tf

from tfx_tpu_trainer.preflight import report as preflight_report

__all__ = ['bfloat16_findings']

# The param custom_config['bfloat16'] sets (config.TrainerConfig.config_params).
_USE_BFLOAT16 = 'use_bfloat16'


def bfloat16_findings(ops: Iterable[tf.Operation], params: Mapping[str, Any],
                      phase: str) -> List[preflight_report.Finding]:
  """An error when bfloat16 is asked for and the step computes none.

  A model_fn decides its precision from params (tensorflow/tpu's models:
  `params['precision']`, `params['use_bfloat16']`); one that reads neither
  would train in float32 while the config says bfloat16.

  Args:
    ops: the ops of the step the model_fn built.
    params: the params it got.
    phase: the preflight phase, for the finding.

  Returns:
    The finding, or none.
  """
  if not params.get(_USE_BFLOAT16):
    return []
  if any(tensor.dtype.base_dtype == tf.bfloat16
         for op in ops for tensor in op.outputs):
    return []
  return [preflight_report.Finding(
      'bfloat16-unused', preflight_report.ERROR,
      f"custom_config['bfloat16'] is true, but the {phase} step the model_fn "
      'built computes nothing in bfloat16: it reads neither '
      "params['precision'] ('bfloat16') nor params['use_bfloat16'].", phase,
      fix='Build the network in tf.compat.v1.tpu.bfloat16_scope() when '
      "params['precision'] == 'bfloat16' and cast its output to float32, "
      "as tensorflow/tpu's ResNet does; or drop custom_config['bfloat16'].")]
