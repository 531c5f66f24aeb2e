"""Turns the runs of each measurement into medians, ratios and a verdict."""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence

from benchmarks import events

# Measurement names: "<kind>@<batch size>".
STOCK = 'stock_trainer'      # the stock TFX estimator Trainer (taxi_utils.py)
KERAS_FIT = 'keras_fit'      # native-Keras TFX Trainer, model.fit
KERAS_FIT_SPE = 'keras_fit_spe'  # the same with steps_per_execution
TPU = 'tpu_trainer'          # TPUTrainer, components/taxi_tpu_module.py
TPU_KERAS = 'tpu_keras'      # TPUTrainer, components/taxi_keras_module.py
LIMIT = 'compute_limit'      # the Keras model's step in a tf.function loop
# The model_fn module's train op in an in-graph loop on one constant batch.
LIMIT_MODEL_FN = 'compute_limit_model_fn'
INPUT = 'input'              # read + parse + batch, no model
TRAINER_INPUT = 'trainer_input'  # TPUTrainer's input chain, no model
# TPUTrainer (model_fn module) with custom_config show_progress=false: the
# progress-off row beside TPU (progress on, its default), at batch 40.
TPU_NO_PROGRESS = 'tpu_no_progress'
# TPU embeddings, at the large batch: TPUTrainer with the taxi embedding
# module (components/taxi_embedding_module.py), with a Keras Embedding of
# the same tables (benchmarks/keras_embedding_module.py), and the embedding
# module with its hashed table at 10,000,000 rows (one run: peak memory,
# checkpoint and export size).
TPU_EMBEDDING = 'tpu_embedding'
KERAS_EMBEDDING = 'tpu_keras_embedding'
EMBEDDING_10M = 'tpu_embedding_10m'
EMBEDDING_TRAINERS = (TPU_EMBEDDING, KERAS_EMBEDDING)
EMBEDDING_KINDS = EMBEDDING_TRAINERS + (EMBEDDING_10M,)
EMBEDDING_10M_ROWS = 10_000_000
STOCK_40 = f'{STOCK}@40'
TPU_40 = f'{TPU}@40'
INPUT_40 = f'{INPUT}@40'
TRAINERS = (STOCK, KERAS_FIT, KERAS_FIT_SPE, TPU, TPU_KERAS)
TPU_TRAINERS = (TPU, TPU_KERAS)
LIMITS = (LIMIT, LIMIT_MODEL_FN)
# Each TPUTrainer module's own compute limit.
MODULE_LIMITS = {TPU: LIMIT_MODEL_FN, TPU_KERAS: LIMIT}

# Figures taken as medians over runs (None where a kind has no such figure).
# external_*: from the wall time of Do() at two step counts (trainers) or of
# two loop lengths (compute_limit); the others from the event files.
MEDIAN_FIELDS = ('rate', 'external_examples_per_sec', 'examples_per_sec',
                 'steps_per_sec', 'do_seconds', 'short_do_seconds',
                 'external_overhead_seconds', 'train_seconds_at_median_rate',
                 'overhead_seconds', 'import_seconds', 'process_seconds',
                 'max_rss_kb', 'checkpoint_bytes', 'export_bytes')
PHASE_FIELDS = ('before_first_step_seconds', 'training_loop_seconds',
                'after_last_step_seconds')
# The after-last-step part, split at the end of the final evaluation.
AFTER_FIELDS = ('last_step_to_eval_end_seconds', 'eval_end_to_do_end_seconds')


def name(kind: str, batch_size: int) -> str:
  """The measurement name, e.g. 'tpu_trainer@40'."""
  return f'{kind}@{batch_size}'


def run_rate(run: Mapping[str, Any]) -> Optional[float]:
  """A run's examples/s: a trainer's external rate (None when its two runs
  gave none), the compute limit's, else (input) its own."""
  external = run.get('external_examples_per_sec')
  if 'short_do_seconds' in run or external is not None:
    return external
  return run.get('examples_per_sec')


def external_figures(short: Mapping[str, Any], long: Mapping[str, Any],
                     batch_size: int) -> Dict[str, Optional[float]]:
  """Rate and overhead from the wall time of Do() at two step counts.

  Do(n) = overhead + n * batch / rate: the rate is the extra examples over
  the extra wall time, and the overhead is what Do() spends outside the
  training steps (start, evaluation, export), read at n = 0.

  Args:
    short: the run at the smaller step count (train_steps, do_seconds).
    long: the run at the larger step count.
    batch_size: examples per step.

  Returns:
    external_examples_per_sec, external_overhead_seconds and
    short_do_seconds (None when the long run was not slower).
  """
  extra_steps = long['train_steps'] - short['train_steps']
  extra_seconds = long['do_seconds'] - short['do_seconds']
  if extra_steps <= 0 or extra_seconds <= 0:
    return {'external_examples_per_sec': None,
            'external_overhead_seconds': None,
            'short_do_seconds': short['do_seconds']}
  rate = extra_steps * batch_size / extra_seconds
  return {
      'external_examples_per_sec': rate,
      'external_overhead_seconds': (
          long['do_seconds'] - long['train_steps'] * batch_size / rate),
      'short_do_seconds': short['do_seconds'],
  }


@dataclasses.dataclass(frozen=True)
class Target:
  """A pass/fail target: a ratio of two measurements' figures."""
  description: str
  kind: str  # 'ratio_at_least' or 'ratio_at_most'
  numerator: str
  denominator: str
  threshold: float
  field: str = 'rate'

  def value(self, summary: Mapping[str, Mapping[str, Any]]) -> Optional[float]:
    return ratio(summary, self.numerator, self.denominator, self.field)

  def passed(self, value: Optional[float]) -> Optional[bool]:
    if value is None:
      return None
    if self.kind == 'ratio_at_least':
      return value >= self.threshold
    return value <= self.threshold


# Issue 22's targets, for the default TPUTrainer config: each module's
# rate over its own compute limit, (module, batch) -> at least; other batch
# sizes take the 512 figure.
LIMIT_TARGETS = {(TPU_KERAS, 40): 0.9, (TPU_KERAS, 512): 0.85,
                 (TPU, 40): 0.85, (TPU, 512): 0.85}
MODULE_LABELS = ((TPU, 'model_fn module'), (TPU_KERAS, 'Keras module'))
STOCK_TARGET = 3.0
TUNED_KERAS_TARGET = 2.0


def targets(large_batch: int) -> List[Target]:
  """The targets of issue 22, at batch 40 and at `large_batch`."""
  result = []
  for batch in (40, large_batch):
    for kind, label in MODULE_LABELS:
      threshold = LIMIT_TARGETS[(kind, 40 if batch == 40 else 512)]
      result.append(Target(
          f'TPUTrainer ({label}) / its compute limit at batch {batch} >= '
          f'{threshold}', 'ratio_at_least', name(kind, batch),
          name(MODULE_LIMITS[kind], batch), threshold))
  for batch in (40, large_batch):
    for kind, label in MODULE_LABELS:
      result.append(Target(
          f'TPUTrainer ({label}) / stock Trainer at batch {batch} >= '
          f'{STOCK_TARGET:g}', 'ratio_at_least', name(kind, batch),
          name(STOCK, batch), STOCK_TARGET))
      result.append(Target(
          f'TPUTrainer ({label}) / native-Keras Trainer with '
          f'steps_per_execution at batch {batch} >= {TUNED_KERAS_TARGET:g}',
          'ratio_at_least', name(kind, batch), name(KERAS_FIT_SPE, batch),
          TUNED_KERAS_TARGET))
  for batch in (40, large_batch):
    for kind, label in MODULE_LABELS:
      for keras in (KERAS_FIT, KERAS_FIT_SPE):
        result.append(Target(
            f'TPUTrainer ({label}) overhead / {keras} overhead at batch '
            f'{batch} <= 1', 'ratio_at_most', name(kind, batch),
            name(keras, batch), 1.0, field='external_overhead_seconds'))
  return result


def summarize_runs(runs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """The medians of one measurement's successful runs.

  Args:
    runs: result dicts of one measurement (failed runs carry 'error').

  Returns:
    {field: median} for MEDIAN_FIELDS and phases, plus 'runs' (how many
    succeeded), 'failed', and the per-run examples/s ('examples_per_sec_runs').
  """
  good = [dict(run, rate=run_rate(run)) for run in runs
          if 'error' not in run]
  summary: Dict[str, Any] = {'runs': len(good), 'failed': len(runs) - len(good)}
  for field in MEDIAN_FIELDS:
    summary[field] = events.median(run.get(field) for run in good)
  phases = {
      field: events.median(run.get('phases', {}).get(field) for run in good)
      for field in PHASE_FIELDS + AFTER_FIELDS
  }
  if any(value is not None for value in phases.values()):
    summary['phases'] = phases
  summary['examples_per_sec_runs'] = [run['rate'] for run in good]
  metrics = [run['final_metrics'] for run in good if run.get('final_metrics')]
  if metrics:
    summary['final_metrics'] = {
        key: events.median(m.get(key) for m in metrics)
        for key in ('accuracy', 'auc', 'loss', 'global_step')}
  return summary


def ratio(summary: Mapping[str, Mapping[str, Any]], numerator: str,
          denominator: str, field: str = 'rate') -> Optional[float]:
  """summary[numerator][field] / summary[denominator][field], or None."""
  top = (summary.get(numerator) or {}).get(field)
  bottom = (summary.get(denominator) or {}).get(field)
  if top is None or not bottom:
    return None
  return top / bottom


def paired_ratios(runs: Mapping[str, Sequence[Mapping[str, Any]]],
                  numerator: str, denominator: str) -> List[float]:
  """Rate ratios of the runs of the same repeat (taken minutes apart)."""
  result = []
  for top, bottom in zip(runs.get(numerator, ()), runs.get(denominator, ())):
    if 'error' in top or 'error' in bottom:
      continue
    if run_rate(top) and run_rate(bottom):
      result.append(run_rate(top) / run_rate(bottom))
  return result


def evaluate(summary: Mapping[str, Mapping[str, Any]],
             large_batch: int) -> List[Dict[str, Any]]:
  """Each target with its measured value and PASS/FAIL (or N/A)."""
  verdicts = []
  for target in targets(large_batch):
    value = target.value(summary)
    passed = target.passed(value)
    figures = [(summary.get(key) or {}).get(target.field)
               for key in (target.numerator, target.denominator)]
    verdicts.append({
        'target': target.description,
        'value': value,
        'threshold': target.threshold,
        'figures': figures,
        'field': target.field,
        'verdict': {True: 'PASS', False: 'FAIL', None: 'N/A'}[passed],
    })
  return verdicts


def fmt(value: Optional[float], spec: str) -> str:
  """`value` formatted with `spec`, or '-' for None."""
  return '-' if value is None else format(value, spec)


def format_table(summary: Mapping[str, Mapping[str, Any]]) -> str:
  """A fixed-width table of the medians of every measurement.

  ext ex/s: from the wall time of Do() at two step counts (the figure every
  ratio uses); event ex/s: the trainer's own global_step/sec summaries (none
  for model.fit); overhead: Do() time outside training steps (external).
  """
  header = (f'{"measurement":<19} {"runs":>4} {"ext ex/s":>10} '
            f'{"(min-max of runs)":>19} {"event ex/s":>10} {"ext/event":>9} '
            f'{"Do() s":>7} {"short s":>7} {"overhead s":>10} '
            f'{"peak RSS MB":>11}')
  lines = [header, '-' * len(header)]
  for measurement, entry in summary.items():
    per_run = [value for value in entry.get('examples_per_sec_runs', [])
               if value is not None]
    spread = (f'{min(per_run):,.0f}-{max(per_run):,.0f}'
              if len(per_run) > 1 else '')
    rss = entry.get('max_rss_kb')
    external = entry.get('external_examples_per_sec')
    event = entry.get('examples_per_sec')
    lines.append(
        f'{measurement:<19} {entry.get("runs", 0):>4} '
        f'{fmt(entry.get("rate"), ",.0f"):>10} {spread:>19} '
        f'{fmt(event, ",.0f"):>10} '
        f'{fmt(external / event if external and event else None, ".2f"):>9} '
        f'{fmt(entry.get("do_seconds"), ".1f"):>7} '
        f'{fmt(entry.get("short_do_seconds"), ".1f"):>7} '
        f'{fmt(entry.get("external_overhead_seconds"), ".1f"):>10} '
        f'{fmt(None if rss is None else rss / 1024, ",.0f"):>11}')
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
      cells.append(f'{fmt(value, ".1f"):>11}')
    lines.append(f'{measurement:<17} ' + ' '.join(cells))
  return '\n'.join(lines)


def _megabytes(value: Optional[float], unit: int) -> str:
  return fmt(None if value is None else value * unit / 2**20, ',.1f')


def format_embedding_table(summary: Mapping[str, Mapping[str, Any]],
                           batch_size: int) -> str:
  """The TPU embedding rows beside the bundled wide-and-deep (medians)."""
  header = (f'{"measurement":<24} {"ext ex/s":>10} {"peak RSS MB":>11} '
            f'{"ckpt MB":>8} {"export MB":>9} {"accuracy":>8} {"AUC":>6}')
  lines = [header, '-' * len(header)]
  for kind in (TPU,) + EMBEDDING_KINDS:
    entry = summary.get(name(kind, batch_size))
    if not entry:
      continue
    metrics = entry.get('final_metrics') or {}
    lines.append(
        f'{name(kind, batch_size):<24} {fmt(entry.get("rate"), ",.0f"):>10} '
        f'{_megabytes(entry.get("max_rss_kb"), 1024):>11} '
        f'{_megabytes(entry.get("checkpoint_bytes"), 1):>8} '
        f'{_megabytes(entry.get("export_bytes"), 1):>9} '
        f'{fmt(metrics.get("accuracy"), ".3f"):>8} '
        f'{fmt(metrics.get("auc"), ".3f"):>6}')
  return '\n'.join(lines)


def format_verdicts(verdicts: Sequence[Mapping[str, Any]]) -> str:
  """One line per target: verdict, measured value, target."""
  lines = []
  for verdict in verdicts:
    value = verdict['value']
    top, bottom = verdict.get('figures') or (None, None)
    spec = '.1f' if 'seconds' in verdict.get('field', '') else ',.0f'
    lines.append(f'  [{verdict["verdict"]:<4}] {verdict["target"]}: '
                 f'{fmt(value, ".2f")}{"x" if value is not None else ""} '
                 f'({fmt(top, spec)} / {fmt(bottom, spec)})')
  return '\n'.join(lines)
