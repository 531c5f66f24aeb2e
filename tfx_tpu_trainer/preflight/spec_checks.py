"""What a model_fn returned, checked against what TPUEstimator takes."""

from typing import Any, Tuple

import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer.preflight import report as preflight_report

_TPU_SPEC = tf.compat.v1.estimator.tpu.TPUEstimatorSpec


class SpecProblem(Exception):
  """What the model_fn returned cannot run on TPU (carries the finding)."""

  def __init__(self, finding: preflight_report.Finding):
    super().__init__(finding.message)
    self.finding = finding


def is_exported_estimator_spec(spec: Any, mode: str) -> bool:
  """A PREDICT EstimatorSpec: TPUEstimator exports both tag sets from it."""
  return (mode == tf_estimator.ModeKeys.PREDICT and
          isinstance(spec, tf_estimator.EstimatorSpec))


def require(spec: Any, mode: str, fields: Tuple[str, ...], phase: str) -> None:
  """Raises SpecProblem unless TPUEstimator takes `spec`, with `fields`.

  That is a TPUEstimatorSpec, or in PREDICT (the export) also an
  EstimatorSpec.

  Args:
    spec: what the model_fn returned.
    mode: the tf.estimator.ModeKeys value it was built in.
    fields: the spec fields the mode needs (e.g. ('loss', 'train_op')).
    phase: the preflight phase, for the finding.
  """
  if not (isinstance(spec, _TPU_SPEC) or
          is_exported_estimator_spec(spec, mode)):
    hint = (' Adapt an Estimator model_fn with '
            'tfx_tpu_trainer.estimator_adapter.to_tpu_model_fn.'
            if isinstance(spec, tf_estimator.EstimatorSpec) else '')
    raise SpecProblem(preflight_report.Finding(
        'spec', preflight_report.ERROR,
        f'the model_fn returned {type(spec).__name__} in mode {mode!r}; TPU '
        'needs a TPUEstimatorSpec.', phase, fix=hint.strip()))
  for field in fields:
    if getattr(spec, field) is None:
      raise SpecProblem(preflight_report.Finding(
          'spec', preflight_report.ERROR,
          f'the {type(spec).__name__} of mode {mode!r} has no {field}.',
          phase))
