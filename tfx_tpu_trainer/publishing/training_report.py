"""The training report: one self-contained HTML page and its plots as PNG."""

import base64
import dataclasses
import datetime
import html
import io
import math
import numbers
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
from tfx.dsl.io import fileio

from tfx_tpu_trainer.publishing import secrets
from tfx_tpu_trainer.publishing import training_events
from tfx_tpu_trainer.training import curves

__all__ = ['report_path', 'write_report_safely']

REPORT_FILE_NAME = 'training_report.html'
# What a file is written as before its rename into place.
_TEMPORARY_SUFFIX = '.tmp'
PLOTS_DIR_NAME = 'training_report'
EVAL_NAME = 'eval'  # evaluation.EVAL_NAME: evaluations write eval_<name>/.
# The estimator's own curves, plotted for event files written before the
# trainer wrote its own (curves.LOSS_TAG, STEP_RATE_TAG).
ESTIMATOR_LOSS_TAG = 'loss'
ESTIMATOR_STEP_RATE_TAG = 'global_step/sec'
LOSS_TITLE = 'Training loss'
SPEED_TITLE = 'Training speed (saves and evaluations left out; evaluations dotted)'
# Eval summaries that are bookkeeping, not metrics.
_NOT_METRICS = ('global_step',)


@dataclasses.dataclass
class Plot:
  """One plot of the report."""
  title: str
  file_name: str
  png: bytes


def report_path(model_run_dir: str) -> str:
  """Where the HTML report of `model_run_dir` is written."""
  return os.path.join(model_run_dir, REPORT_FILE_NAME)


def write_report_safely(model_run_dir: str, **kwargs) -> Optional[str]:
  """`write_report`, with any failure logged instead of raised.

  Returns:
    The report's path, or None when it could not be written.
  """
  try:
    return write_report(model_run_dir, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('The training report could not be written in %s (%s: '
                    '%s); training and its outputs are not affected.',
                    model_run_dir, type(e).__name__, e)
    return None


def write_report(model_run_dir: str,
                 final_metrics: Optional[Mapping[str, Any]] = None,
                 config: Optional[Mapping[str, Any]] = None,
                 timings: Optional[Mapping[str, float]] = None,
                 eval_name: str = EVAL_NAME) -> str:
  """Writes the HTML report and its PNG plots into `model_run_dir`.

  Args:
    model_run_dir: the model_run directory (events, checkpoints).
    final_metrics: the final evaluation's metrics (None: none recorded).
    config: the run's settings, name -> value, shown as a table.
    timings: name -> seconds, shown as a table.
    eval_name: the evaluation's name (its events are in `eval_<name>/`).

  Returns:
    The path of the HTML report.
  """
  train = training_events.read_scalars(model_run_dir)
  evals = training_events.read_scalars(
      os.path.join(model_run_dir, f'eval_{eval_name}'))
  problems = list(train.problems) + list(evals.problems)
  plots = (_train_plots(train, _evaluation_steps(evals), problems) +
           _eval_plots(evals, problems))
  final = dict(final_metrics or {})
  if not final:
    problems.append('No final evaluation metrics were recorded.')
  bad_final = sorted(name for name, value in final.items()
                     if _is_number(value) and not math.isfinite(value))
  if bad_final:
    problems.append(f'Final metrics {bad_final} are not finite numbers.')
  timings = dict(timings or {})
  if train.first_wall_time is not None and train.last_wall_time is not None:
    timings.setdefault('first to last training event',
                       train.last_wall_time - train.first_wall_time)
  plots_dir = os.path.join(model_run_dir, PLOTS_DIR_NAME)
  fileio.makedirs(plots_dir)
  _remove_stale_temporaries(model_run_dir, plots_dir)
  for plot in plots:
    _write_atomically(os.path.join(plots_dir, plot.file_name), plot.png)
  page = render_html(plots, final, dict(config or {}), timings, problems,
                     model_run_dir)
  path = report_path(model_run_dir)
  _write_atomically(path, page.encode('utf-8'))
  logging.info('Training report written: %s (%d plots; missing: %s).', path,
               len(plots), problems or 'nothing')
  return path


def _train_plots(train: training_events.Scalars, evaluation_steps: List[int],
                 problems: List[str]) -> List[Plot]:
  """The loss, and the speed in steps/s with examples/s on its right axis."""
  plots = []
  loss_tag = _first_present(train, curves.LOSS_TAG,
                            ESTIMATOR_LOSS_TAG)
  if loss_tag:
    plots.append(Plot(LOSS_TITLE, 'loss.png', plot_png(
        LOSS_TITLE, {'loss': train.series[loss_tag]})))
  else:
    problems.append(f'No training "{curves.LOSS_TAG}" values in the '
                    f'event files: the "{LOSS_TITLE}" plot is missing.')
  steps_per_sec = train.series.get(curves.STEP_RATE_TAG)
  if steps_per_sec:
    examples = dict(train.series.get(curves.EXAMPLE_RATE_TAG) or [])
    step, rate = steps_per_sec[0]
    batch_size = examples[step] / rate if examples.get(step) else None
    plots.append(Plot(SPEED_TITLE, 'steps_per_sec.png', plot_png(
        SPEED_TITLE, {'steps/s': steps_per_sec}, marks=evaluation_steps,
        right_axis=('examples/s', batch_size) if batch_size else None)))
  elif train.series.get(ESTIMATOR_STEP_RATE_TAG):
    title = 'Training speed (steps/s, evaluations included)'
    plots.append(Plot(title, 'steps_per_sec.png', plot_png(
        title, {'steps/s': train.series[ESTIMATOR_STEP_RATE_TAG]},
        marks=evaluation_steps)))
  else:
    problems.append(
        f'No training "{curves.STEP_RATE_TAG}" values in the event '
        f'files (it needs two loss points): the "{SPEED_TITLE}" plot is '
        'missing.')
  return plots


def _first_present(scalars: training_events.Scalars,
                   *tags: str) -> Optional[str]:
  return next((tag for tag in tags if scalars.series.get(tag)), None)


def _evaluation_steps(evals: training_events.Scalars) -> List[int]:
  return sorted({step for tag, series in evals.series.items()
                 if tag not in _NOT_METRICS for step, _ in series})


def _eval_plots(evals: training_events.Scalars,
                problems: List[str]) -> List[Plot]:
  metrics = {tag: series for tag, series in evals.series.items()
             if tag not in _NOT_METRICS}
  if not metrics:
    problems.append('No evaluation metrics in the event files: the '
                    'evaluation curves are missing.')
    return []
  steps = {step for series in metrics.values() for step, _ in series}
  if len(steps) == 1:
    problems.append(f'Only one evaluation (step {steps.pop()}): each '
                    'evaluation curve is a single point. Evaluate during '
                    "training with custom_config['eval_every_steps'].")
  return [Plot(f'Evaluation: {tag}', f'eval_{_file_part(tag)}.png',
               plot_png(f'Evaluation: {tag}', {tag: series}))
          for tag, series in sorted(metrics.items())]


def plot_png(title: str, series: Mapping[str, training_events.Series],
             marks: Sequence[int] = (),
             right_axis: Optional[Tuple[str, float]] = None) -> bytes:
  """A line plot (value over step) of each series, as PNG bytes.

  Args:
    title: the plot's title.
    series: name -> [(step, value)].
    marks: steps marked with a dotted vertical line (evaluations).
    right_axis: (label, factor): a right axis showing the values times
      factor (examples/s beside steps/s).

  Returns:
    The PNG.
  """
  # Imported here: matplotlib loads only when a report is drawn, and a
  # failure to load it is a report failure (logged), not an executor one.
  from matplotlib import figure as figure_lib  # pylint: disable=g-import-not-at-top
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure_lib.Figure(figsize=(6.4, 3.6), dpi=100)
  backend_agg.FigureCanvasAgg(fig)
  axes = fig.add_subplot(1, 1, 1)
  for name, points in series.items():
    steps = [step for step, _ in points]
    values = [value for _, value in points]
    axes.plot(steps, values, marker='o' if len(points) <= 30 else None,
              markersize=3, label=name)
  for step in marks:
    axes.axvline(step, color='grey', linestyle=':', linewidth=1)
  axes.set_title(title)
  axes.set_xlabel('step')
  if len(series) == 1:
    axes.set_ylabel(next(iter(series)))
  if right_axis:
    label, factor = right_axis
    right = axes.secondary_yaxis(
        'right', functions=(lambda v: v * factor, lambda v: v / factor))
    right.set_ylabel(label)
  axes.grid(True, alpha=0.3)
  if len(series) > 1:
    axes.legend()
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png')
  return buffer.getvalue()


def render_html(plots: Sequence[Plot], final_metrics: Mapping[str, Any],
                config: Mapping[str, Any], timings: Mapping[str, float],
                problems: Sequence[str], model_run_dir: str) -> str:
  """The report page; images embedded as base64 data URIs."""
  parts = [
      '<!DOCTYPE html>', '<html><head><meta charset="utf-8">',
      '<title>Training report</title>', f'<style>{_CSS}</style>',
      '</head><body>', '<h1>Training report</h1>',
      f'<p class="where">{_text(model_run_dir)}</p>'
  ]
  if problems:
    parts.append('<div class="missing"><h2>What is missing</h2><ul>')
    parts.extend(f'<li>{_text(problem)}</li>' for problem in problems)
    parts.append('</ul></div>')
  parts.append('<h2>Final metrics</h2>')
  parts.append(_table(final_metrics, 'No final evaluation was recorded.'))
  parts.append('<h2>Curves</h2>')
  if not plots:
    parts.append('<p>No curves: the event files held no values to plot.</p>')
  for plot in plots:
    data = base64.b64encode(plot.png).decode('ascii')
    # The title is drawn in the image: no caption repeats it.
    parts.append(f'<figure><img alt="{_text(plot.title)}" '
                 f'src="data:image/png;base64,{data}"></figure>')
  parts.append('<h2>Timings</h2>')
  parts.append(_table({name: _seconds(value)
                       for name, value in timings.items()},
                      'No timings were recorded.'))
  parts.append('<h2>Config</h2>')
  # The KFP UI shows the report inline: no token or password in it.
  parts.append(_table(secrets.masked(config), 'No config was given.'))
  parts.append('</body></html>')
  return '\n'.join(parts)


_CSS = ('body{font-family:sans-serif;margin:1.5em;max-width:90em}'
        'table{border-collapse:collapse}td,th{border:1px solid #ccc;'
        'padding:2px 8px;text-align:left}figure{display:inline-block;'
        'margin:0 1em 1em 0}img{max-width:100%}.where{color:#666}'
        '.missing{background:#fff4e5;border:1px solid #f0b400;padding:0 1em}')


def _table(rows: Mapping[str, Any], empty: str) -> str:
  if not rows:
    return f'<p>{_text(empty)}</p>'
  body = ''.join(f'<tr><th>{_text(name)}</th><td>{_text(_value(value))}</td>'
                 '</tr>' for name, value in sorted(rows.items()))
  return f'<table>{body}</table>'


def _value(value: Any) -> str:
  if isinstance(value, float):
    return f'{value:.6g}'
  return str(value)


def _seconds(value: float) -> str:
  if not _is_number(value) or not math.isfinite(value):
    return str(value)
  return f'{value:.1f} s ({datetime.timedelta(seconds=int(round(value)))})'


def _is_number(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _text(value: Any) -> str:
  return html.escape(str(value))


def _file_part(tag: str) -> str:
  return re.sub(r'[^A-Za-z0-9_.-]+', '_', tag).strip('_') or 'metric'


def _remove_stale_temporaries(model_run_dir: str, plots_dir: str) -> None:
  """Removes the `.tmp` files a killed report writer left.

  A report is written by its execution alone, so a temporary file present
  before the write was left by an earlier writer that never renamed it.
  """
  stale = [os.path.join(plots_dir, name) for name in fileio.listdir(plots_dir)
           if name.endswith(_TEMPORARY_SUFFIX)]
  report_temporary = report_path(model_run_dir) + _TEMPORARY_SUFFIX
  if fileio.exists(report_temporary):
    stale.append(report_temporary)
  for path in stale:
    fileio.remove(path)
  if stale:
    logging.warning('Removed %d file(s) that an interrupted training report '
                    'writer left: %s.', len(stale), ', '.join(sorted(stale)))


def _write_atomically(path: str, data: bytes) -> None:
  temporary = path + _TEMPORARY_SUFFIX
  with fileio.open(temporary, 'wb') as f:
    f.write(data)
  fileio.rename(temporary, path, overwrite=True)
