"""The scale run: TPUTrainer's rate and peak memory as the data grows."""

import json
import os
import shutil
from typing import Any, Callable, Dict, List, Optional, Sequence

from benchmarks import report

SCALE_DIR = 'scale'
CACHE_MODES = ('parsed', 'none')
# Issue 22's targets: at the largest factor, the rate within 15% of the 1x
# rate; streaming, peak RSS at most 1.5x the 1x figure.
RATE_TOLERANCE = 0.15
STREAMING_RSS_GROWTH = 1.5


def _train_split_uri(spec: Dict[str, Any]) -> str:
  examples = spec['input_dict']['examples'][0]
  return os.path.join(examples['artifact']['uri'], 'Split-train')


def replicate(spec_path: str, work_dir: str, factor: int) -> str:
  """The data spec of the examples with the train split `factor` times.

  Args:
    spec_path: the original data spec (benchmarks.data).
    work_dir: the benchmark's work dir (replicas live under scale/).
    factor: copies of the training split (1: the original spec).

  Returns:
    The path of the replica's data spec (written once, then reused).
  """
  if factor == 1:
    return spec_path
  target = os.path.join(work_dir, SCALE_DIR, f'x{factor}')
  replica_spec_path = os.path.join(target, 'data.json')
  if os.path.exists(replica_spec_path):
    return replica_spec_path
  with open(spec_path) as f:
    spec = json.load(f)
  source_split = _train_split_uri(spec)
  examples_uri = os.path.join(target, 'examples')
  staging = examples_uri + '.partial'
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(os.path.dirname(source_split), staging,
                  ignore=shutil.ignore_patterns('Split-train'))
  split = os.path.join(staging, 'Split-train')
  os.makedirs(split)
  files = sorted(os.listdir(source_split))
  for copy in range(factor):
    for name in files:
      shutil.copyfile(os.path.join(source_split, name),
                      os.path.join(split, f'copy{copy:04d}-{name}'))
  shutil.rmtree(examples_uri, ignore_errors=True)
  os.rename(staging, examples_uri)  # The replica appears whole or not at all.
  spec['input_dict']['examples'][0]['artifact']['uri'] = examples_uri
  spec['scale_factor'] = factor
  spec['rows'] = spec.get('rows')
  with open(replica_spec_path + '.partial', 'w') as f:
    json.dump(spec, f, indent=2)
  os.rename(replica_spec_path + '.partial', replica_spec_path)
  return replica_spec_path


def train_rows(spec_path: str) -> int:
  """Rows of the training split of a data spec (counted once, cached)."""
  count_path = spec_path + '.train_rows'
  if os.path.exists(count_path):
    with open(count_path) as f:
      return int(f.read())
  # pylint: disable-next=g-import-not-at-top
  import tensorflow as tf
  with open(spec_path) as f:
    split = _train_split_uri(json.load(f))
  files = [os.path.join(split, name) for name in sorted(os.listdir(split))]
  count = int(tf.data.TFRecordDataset(files, compression_type='GZIP').reduce(
      tf.constant(0, tf.int64), lambda total, _: total + 1).numpy())
  with open(count_path, 'w') as f:
    f.write(str(count))
  return count


Measure = Callable[..., Dict[str, Any]]


def run(work_dir: str, factors: Sequence[int], batch_size: int,
        short_steps: int, steps: int, measure_pair: Measure,
        progress: Callable[[str], None] = print) -> List[Dict[str, Any]]:
  """Measures TPUTrainer at each factor and cache mode.

  Args:
    work_dir: the benchmark's work dir, holding data.json.
    factors: replication factors (the first is the reference, usually 1).
    batch_size: the training batch size.
    short_steps: training steps of the short run.
    steps: training steps of the long run.
    measure_pair: `measure_pair(spec_path, cache, run_name)` -> the
      measurement of TPUTrainer at short_steps and steps (run_benchmark).
    progress: prints a line per measurement.

  Returns:
    One row per (factor, cache mode): factor, rows, cache, rate, overhead,
    peak RSS, and the error if the measurement failed.
  """
  spec_path = os.path.join(work_dir, 'data.json')
  rows = []
  for factor in factors:
    replica = replicate(spec_path, work_dir, factor)
    count = train_rows(replica)
    for cache in CACHE_MODES:
      progress(f'scale x{factor} ({count:,} rows), input_cache={cache} ...')
      result = measure_pair(replica, cache, f'x{factor}-{cache}')
      row = {'factor': factor, 'rows': count, 'cache': cache,
             'batch_size': batch_size, 'short_steps': short_steps,
             'steps': steps}
      if 'error' in result:
        row['error'] = result['error']
      else:
        row.update(rate=report.run_rate(result),
                   overhead_seconds=result.get('external_overhead_seconds'),
                   do_seconds=result.get('do_seconds'),
                   max_rss_kb=result.get('max_rss_kb'))
      rows.append(row)
  return rows


def _relative(rows: List[Dict[str, Any]], row: Dict[str, Any],
              field: str) -> Optional[float]:
  base = next((r for r in rows if r['cache'] == row['cache']), None)
  if base is None or not base.get(field) or row.get(field) is None:
    return None
  return row[field] / base[field]


def verdicts(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Issue 22's scale targets at the largest factor, per cache mode."""
  if not rows:
    return []
  largest = max(row['factor'] for row in rows)
  smallest = min(row['factor'] for row in rows)
  result = []
  for row in rows:
    if row['factor'] != largest or largest == smallest:
      continue
    rate = _relative(rows, row, 'rate')
    result.append(_verdict(
        f'scale x{largest} / x{smallest} rate, input_cache={row["cache"]}, '
        f'>= {1 - RATE_TOLERANCE:.2f}', rate,
        None if rate is None else rate >= 1 - RATE_TOLERANCE))
    if row['cache'] == 'none':
      rss = _relative(rows, row, 'max_rss_kb')
      result.append(_verdict(
          f'scale x{largest} / x{smallest} peak RSS, streaming, <= '
          f'{STREAMING_RSS_GROWTH}', rss,
          None if rss is None else rss <= STREAMING_RSS_GROWTH))
  return result


def _verdict(target: str, value: Optional[float],
             passed: Optional[bool]) -> Dict[str, Any]:
  return {'target': target, 'value': value,
          'verdict': {True: 'PASS', False: 'FAIL', None: 'N/A'}[passed]}


def format_table(rows: List[Dict[str, Any]]) -> str:
  """One line per factor and cache mode: rate and memory, and vs the first."""
  header = (f'{"factor":>6} {"train rows":>11} {"input_cache":>11} '
            f'{"ext ex/s":>10} {"vs x1":>6} {"overhead s":>10} '
            f'{"peak RSS MB":>11} {"vs x1":>6} {"RSS-x1 MB/100k rows":>19}')
  lines = [header, '-' * len(header)]
  for row in rows:
    if 'error' in row:
      lines.append(f'{row["factor"]:>6} {row["rows"]:>11,} '
                   f'{row["cache"]:>11} FAILED: {row["error"]}')
      continue
    base = next(r for r in rows if r['cache'] == row['cache'])
    rss = row.get('max_rss_kb')
    extra_rows = row['rows'] - base['rows']
    per_rows = ((rss - base['max_rss_kb']) / 1024 / extra_rows * 100_000
                if extra_rows > 0 and rss and base.get('max_rss_kb')
                else None)
    lines.append(
        f'{row["factor"]:>6} {row["rows"]:>11,} {row["cache"]:>11} '
        f'{report.fmt(row.get("rate"), ",.0f"):>10} '
        f'{report.fmt(_relative(rows, row, "rate"), ".2f"):>6} '
        f'{report.fmt(row.get("overhead_seconds"), ".1f"):>10} '
        f'{report.fmt(None if rss is None else rss / 1024, ",.0f"):>11} '
        f'{report.fmt(_relative(rows, row, "max_rss_kb"), ".2f"):>6} '
        f'{report.fmt(per_rows, ",.1f"):>19}')
  return '\n'.join(lines)
