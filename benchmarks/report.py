"""Turns the runs of each measurement into medians, ratios and a verdict.

A run is the result dict of one `benchmarks.measure` subprocess plus the
parent's figures for it (`max_rss_kb`, `process_seconds`). Every figure of a
measurement is the median over its runs; the ratios are ratios of those
medians (the per-repeat ratios of runs taken side by side are kept too).
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence

from benchmarks import events

# Measurement names: "<kind>@<batch size>".
STOCK_40 = 'stock_trainer@40'
TPU_40 = 'tpu_trainer@40'
INPUT_40 = 'input@40'

# Figures taken as medians over runs (None where a kind has no such figure).
MEDIAN_FIELDS = ('examples_per_sec', 'steps_per_sec', 'do_seconds',
                 'train_seconds_at_median_rate', 'overhead_seconds',
                 'import_seconds', 'process_seconds', 'max_rss_kb')
PHASE_FIELDS = ('before_first_step_seconds', 'training_loop_seconds',
                'after_last_step_seconds')
# The after-last-step part, split at the end of the final evaluation.
AFTER_FIELDS = ('last_step_to_eval_end_seconds', 'eval_end_to_do_end_seconds')


def name(kind: str, batch_size: int) -> str:
  """The measurement name, e.g. 'tpu_trainer@40'."""
  return f'{kind}@{batch_size}'


@dataclasses.dataclass(frozen=True)
class Target:
  """A pass/fail target on a ratio or a figure of the summary."""
  description: str
  kind: str  # 'ratio_at_least' or 'seconds_below'
  numerator: str
  denominator: Optional[str]
  threshold: float

  def value(self, summary: Mapping[str, Mapping[str, Any]]) -> Optional[float]:
    if self.kind == 'ratio_at_least':
      return ratio(summary, self.numerator, self.denominator)
    entry = summary.get(self.numerator)
    return None if entry is None else entry.get('overhead_seconds')

  def passed(self, value: Optional[float]) -> Optional[bool]:
    if value is None:
      return None
    if self.kind == 'ratio_at_least':
      return value >= self.threshold
    return value < self.threshold


def targets(large_batch: int) -> List[Target]:
  """The targets of issue 7, at batch 40 and at `large_batch`."""
  tpu_large = name('tpu_trainer', large_batch)
  return [
      Target(f'TPUTrainer / stock Trainer examples/s at batch 40 >= 1.5',
             'ratio_at_least', TPU_40, STOCK_40, 1.5),
      Target(f'TPUTrainer / raw input examples/s at batch {large_batch} '
             '>= 0.6', 'ratio_at_least', tpu_large,
             name('input', large_batch), 0.6),
      Target('TPUTrainer executor overhead at batch 40 < 10 s',
             'seconds_below', TPU_40, None, 10.0),
      Target(f'TPUTrainer executor overhead at batch {large_batch} < 10 s',
             'seconds_below', tpu_large, None, 10.0),
  ]


def summarize_runs(runs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """The medians of one measurement's successful runs.

  Args:
    runs: result dicts of one measurement (failed runs carry 'error').

  Returns:
    {field: median} for MEDIAN_FIELDS and phases, plus 'runs' (how many
    succeeded), 'failed', and the per-run examples/s ('examples_per_sec_runs').
  """
  good = [run for run in runs if 'error' not in run]
  summary: Dict[str, Any] = {'runs': len(good), 'failed': len(runs) - len(good)}
  for field in MEDIAN_FIELDS:
    summary[field] = events.median(run.get(field) for run in good)
  phases = {
      field: events.median(run.get('phases', {}).get(field) for run in good)
      for field in PHASE_FIELDS + AFTER_FIELDS
  }
  if any(value is not None for value in phases.values()):
    summary['phases'] = phases
  summary['examples_per_sec_runs'] = [run.get('examples_per_sec')
                                      for run in good]
  return summary


def ratio(summary: Mapping[str, Mapping[str, Any]], numerator: str,
          denominator: str, field: str = 'examples_per_sec') -> Optional[float]:
  """summary[numerator][field] / summary[denominator][field], or None."""
  top = (summary.get(numerator) or {}).get(field)
  bottom = (summary.get(denominator) or {}).get(field)
  if top is None or not bottom:
    return None
  return top / bottom


def paired_ratios(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                  numerator: str, denominator: str) -> List[float]:
  """Ratios of the runs of the same repeat (taken minutes apart)."""
  result = []
  for top, bottom in zip(runs.get(numerator, ()), runs.get(denominator, ())):
    if 'error' in top or 'error' in bottom:
      continue
    if top.get('examples_per_sec') and bottom.get('examples_per_sec'):
      result.append(top['examples_per_sec'] / bottom['examples_per_sec'])
  return result


def evaluate(summary: Mapping[str, Mapping[str, Any]],
             large_batch: int) -> List[Dict[str, Any]]:
  """Each target with its measured value and PASS/FAIL (or N/A)."""
  verdicts = []
  for target in targets(large_batch):
    value = target.value(summary)
    passed = target.passed(value)
    verdicts.append({
        'target': target.description,
        'value': value,
        'threshold': target.threshold,
        'verdict': {True: 'PASS', False: 'FAIL', None: 'N/A'}[passed],
    })
  return verdicts


def _fmt(value: Optional[float], spec: str) -> str:
  return '-' if value is None else format(value, spec)


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
  """A fixed-width table of the medians of every measurement."""
  header = (f'{"measurement":<17} {"runs":>4} {"examples/s":>11} '
            f'{"(min-max of runs)":>19} {"steps/s":>8} {"Do() s":>7} '
            f'{"overhead s":>10} {"peak RSS MB":>11}')
  lines = [header, '-' * len(header)]
  for measurement, entry in summary.items():
    per_run = [value for value in entry.get('examples_per_sec_runs', [])
               if value is not None]
    spread = (f'{min(per_run):,.0f}-{max(per_run):,.0f}'
              if len(per_run) > 1 else '')
    rss = entry.get('max_rss_kb')
    lines.append(
        f'{measurement:<17} {entry.get("runs", 0):>4} '
        f'{_fmt(entry.get("examples_per_sec"), ",.0f"):>11} {spread:>19} '
        f'{_fmt(entry.get("steps_per_sec"), ",.0f"):>8} '
        f'{_fmt(entry.get("do_seconds"), ".1f"):>7} '
        f'{_fmt(entry.get("overhead_seconds"), ".1f"):>10} '
        f'{_fmt(None if rss is None else rss / 1024, ",.0f"):>11}')
  return '\n'.join(lines)


def format_phase_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
  """Where each trainer's process time goes (medians, seconds)."""
  columns = (('imports', 'import_seconds'),
             ('to 1st step', 'before_first_step_seconds'),
             ('train loop', 'training_loop_seconds'),
             ('ckpt+eval', 'last_step_to_eval_end_seconds'),
             ('export+copy', 'eval_end_to_do_end_seconds'),
             ('overhead', 'overhead_seconds'))
  header = f'{"measurement":<17} ' + ' '.join(
      f'{title:>11}' for title, _ in columns)
  lines = [header, '-' * len(header)]
  for measurement, entry in summary.items():
    phases = entry.get('phases')
    if not phases:
      continue
    cells = []
    for _, field in columns:
      value = entry.get(field) if field in entry else phases.get(field)
      cells.append(f'{_fmt(value, ".1f"):>11}')
    lines.append(f'{measurement:<17} ' + ' '.join(cells))
  return '\n'.join(lines)


def format_verdicts(verdicts: Sequence[Mapping[str, Any]]) -> str:
  """One line per target: verdict, measured value, target."""
  lines = []
  for verdict in verdicts:
    value = verdict['value']
    unit = 'x' if 'overhead' not in verdict['target'] else ' s'
    lines.append(f'  [{verdict["verdict"]:<4}] {verdict["target"]}: '
                 f'{_fmt(value, ".2f")}{unit if value is not None else ""}')
  return '\n'.join(lines)
