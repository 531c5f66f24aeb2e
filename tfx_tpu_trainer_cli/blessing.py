"""Why the Evaluator blessed a model or not: its thresholds and the values."""

from typing import Any, List, Mapping, Optional, Tuple

__all__ = ['value_thresholds', 'explain']


def _bounds(threshold) -> Tuple[Optional[float], Optional[float]]:
  value = threshold.value_threshold
  return ((value.lower_bound.value if value.HasField('lower_bound') else None),
          (value.upper_bound.value if value.HasField('upper_bound') else None))


def _describe(name: str, value: Optional[float], lower: Optional[float],
              upper: Optional[float]) -> str:
  shown = 'missing' if value is None else f'{value:.4g}'
  bounds = []
  if lower is not None:
    bounds.append(f'>= {lower:g}')
  if upper is not None:
    bounds.append(f'<= {upper:g}')
  return f'{name} {shown} (needs {" and ".join(bounds)})'


def value_thresholds(eval_config) -> List[Tuple[str, float, float]]:
  """(metric name, lower bound or None, upper bound or None) per threshold.

  The name is the one TFMA gives the metric's values (`BinaryAccuracy` ->
  `binary_accuracy`, Keras' `SparseCategoricalAccuracy` ->
  `sparse_categorical_accuracy`, or the name its config sets), as the
  Evaluator metrics line shows them.
  """
  found = []
  for spec in eval_config.metrics_specs:
    for metric in spec.metrics:
      if metric.threshold.HasField('value_threshold'):
        found.append((_metric_name(metric),) + _bounds(metric.threshold))
    for name, threshold in spec.thresholds.items():
      if threshold.HasField('value_threshold'):
        found.append((name,) + _bounds(threshold))
  return found


def _failures(validation) -> List[str]:
  """A line per failed threshold: the metric, its value, the bound."""
  lines = []
  for slice_validation in validation.metric_validations_per_slice:
    for failure in slice_validation.failures:
      name = failure.metric_key.name
      value = (failure.metric_value.double_value.value
               if failure.metric_value.HasField('double_value') else None)
      if failure.metric_threshold.HasField('value_threshold'):
        lines.append(_describe(name, value, *_bounds(
            failure.metric_threshold)))
      else:
        lines.append(f'{name}: {failure.message}')
  return lines


def explain(evaluation_uri: str, blessed: bool,
            metrics: Mapping[str, Any]) -> str:
  """Why the model was (not) blessed, for the run summary.

  Args:
    evaluation_uri: the Evaluator's `evaluation` artifact.
    blessed: its verdict.
    metrics: the overall slice's metric values (name -> value).

  Returns:
    `yes (balanced_accuracy 0.71 (needs >= 0.55); ...)` with every value
    threshold, or `no (...)` with the thresholds the model missed (TFMA's
    validation result); the bare verdict when TFMA wrote neither.
  """
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  details: List[str] = []
  try:
    validation = tfma.load_validation_result(evaluation_uri)
  except Exception:  # pylint: disable=broad-except
    validation = None
  if validation is not None and not blessed:
    details = _failures(validation)
    if validation.missing_thresholds:
      details.append('thresholds without a metric: ' + ', '.join(
          t.metric_key.name for t in validation.missing_thresholds))
  if not details:
    try:
      config = tfma.load_eval_result(evaluation_uri).config
    except Exception:  # pylint: disable=broad-except
      config = None
    if config is not None:
      details = []
      for name, lower, upper in value_thresholds(config):
        value = metrics.get(name)
        details.append(_describe(
            name, float(value) if isinstance(value, (int, float)) else None,
            lower, upper))
  verdict = 'yes' if blessed else 'no'
  return f'{verdict} ({"; ".join(details)})' if details else verdict


def _metric_name(metric_config) -> str:
  """The name of a MetricConfig's values: TFMA's own instance's, which it
  makes from TFMA's metric classes or Keras' (tfma.metrics.metric_specs)."""
  from tensorflow_model_analysis.metrics import metric_specs  # pylint: disable=g-import-not-at-top
  try:
    return metric_specs.metric_instance(metric_config).name
  except Exception:  # pylint: disable=broad-except
    return metric_config.class_name
