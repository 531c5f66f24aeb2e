"""The scale run: TPUTrainer's rate, first step and memory as data grows."""

import json
import os
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from benchmarks import events
from benchmarks import report

SCALE_DIR = 'scale'
# The training chains by input_cache, in the order each size measures them:
# the parsed in-memory table, the on-disk cache and streaming (all with
# input_shuffle="window", the default).
TABLE, DISK, STREAM = 'parsed', 'disk', 'none'
CACHE_MODES = (TABLE, DISK, STREAM)
# The streamed chain's input alone, no model: the most streaming can feed.
STREAM_INPUT = 'stream_input'
CHAIN_NAMES = {TABLE: 'table', DISK: 'disk', STREAM: 'stream',
               STREAM_INPUT: 'stream input'}
INPUT_SHUFFLE = 'window'
# The table is measured only where it fits `auto`'s 512 MB cap: about 4
# million taxi rows (124 parsed bytes a row, built at twice its size).
TABLE_MAX_ROWS = 4_000_000
# Issue 33's targets (ratios in one run): streaming and the disk cache
# against the table at the same size; at the largest factor, the rate within
# 15% of the smallest's and peak RSS at most 1.5x; the table's time to the
# first step at its largest size at most 2x its smallest's.
STREAM_VS_TABLE = 0.8
DISK_VS_TABLE = 0.9
RATE_TOLERANCE = 0.15
RSS_GROWTH = 1.5
TABLE_FIRST_STEP_GROWTH = 2.0
_FINGERPRINT = 'source_fingerprint'


def _train_split_uri(spec: Dict[str, Any]) -> str:
  examples = spec['input_dict']['examples'][0]
  return os.path.join(examples['artifact']['uri'], 'Split-train')


def _fingerprint(split: str) -> List[List[Any]]:
  """What a replica is made of: the source split's file names and sizes."""
  return [[name, os.path.getsize(os.path.join(split, name))]
          for name in sorted(os.listdir(split))]


def replica_bytes(spec_path: str, factor: int) -> int:
  """The disk a replica of `factor` copies of the training split takes."""
  with open(spec_path) as f:
    split = _train_split_uri(json.load(f))
  return factor * sum(size for _, size in _fingerprint(split))


def replicate(spec_path: str, work_dir: str, factor: int) -> str:
  """The data spec of the examples with the train split `factor` times.

  The split's gzip files are copied as they are (no record is parsed or
  written again), `factor` copies of each, into
  `<work_dir>/scale/x<factor>/examples`; the eval split is copied once. A
  replica is written once and reused while its source split (file names
  and sizes, kept in its data spec) is the same; a changed source rewrites
  it. It appears whole or not at all (written under `.partial`, renamed);
  its row count is the source's times `factor` (`train_rows`).

  Args:
    spec_path: the original data spec (benchmarks.data).
    work_dir: the benchmark's work dir (replicas live under scale/).
    factor: copies of the training split (1: the original spec).

  Returns:
    The path of the replica's data spec.
  """
  if factor == 1:
    return spec_path
  with open(spec_path) as f:
    spec = json.load(f)
  source_split = _train_split_uri(spec)
  fingerprint = _fingerprint(source_split)
  target = os.path.join(work_dir, SCALE_DIR, f'x{factor}')
  replica_spec_path = os.path.join(target, 'data.json')
  if os.path.exists(replica_spec_path):
    with open(replica_spec_path) as f:
      if json.load(f).get(_FINGERPRINT) == fingerprint:
        return replica_spec_path
    os.remove(replica_spec_path)  # Another source: written again.
  examples_uri = os.path.join(target, 'examples')
  staging = examples_uri + '.partial'
  shutil.rmtree(staging, ignore_errors=True)
  shutil.copytree(os.path.dirname(source_split), staging,
                  ignore=shutil.ignore_patterns('Split-train'))
  split = os.path.join(staging, 'Split-train')
  os.makedirs(split)
  for copy in range(factor):
    for name, _ in fingerprint:
      shutil.copyfile(os.path.join(source_split, name),
                      os.path.join(split, f'copy{copy:04d}-{name}'))
  shutil.rmtree(examples_uri, ignore_errors=True)
  os.rename(staging, examples_uri)
  spec['input_dict']['examples'][0]['artifact']['uri'] = examples_uri
  spec['scale_factor'] = factor
  spec[_FINGERPRINT] = fingerprint
  with open(replica_spec_path + '.partial', 'w') as f:
    json.dump(spec, f, indent=2)
  # Exact copies: the rows are the source's times `factor` (counting ten
  # million gzip records again would take minutes).
  _save_rows(replica_spec_path, os.path.join(examples_uri, 'Split-train'),
             factor * train_rows(spec_path))
  os.rename(replica_spec_path + '.partial', replica_spec_path)
  return replica_spec_path


def _save_rows(spec_path: str, split: str, rows: int) -> None:
  with open(spec_path + '.train_rows', 'w') as f:
    json.dump({'rows': rows, _FINGERPRINT: _fingerprint(split)}, f)


def train_rows(spec_path: str) -> int:
  """Rows of the training split of a data spec (counted once, cached).

  The count is kept beside the spec with the split's file names and sizes,
  and counted again when they change.
  """
  with open(spec_path) as f:
    split = _train_split_uri(json.load(f))
  try:
    with open(spec_path + '.train_rows') as f:
      cached = json.load(f)
    if (isinstance(cached, dict) and
        cached.get(_FINGERPRINT) == _fingerprint(split)):
      return int(cached['rows'])
  except (OSError, ValueError):
    pass  # No count yet, or one from before the fingerprint: count.
  # pylint: disable-next=g-import-not-at-top
  import tensorflow as tf
  files = [os.path.join(split, name) for name in sorted(os.listdir(split))]
  count = int(tf.data.TFRecordDataset(files, compression_type='GZIP').reduce(
      tf.constant(0, tf.int64), lambda total, _: total + 1).numpy())
  _save_rows(spec_path, split, count)
  return count


Measure = Callable[..., Dict[str, Any]]


def first_epoch_steps(cache: str, rows: int, batch_size: int) -> int:
  """Steps both runs of a pair train first: one epoch for the caches.

  The disk cache streams its first epoch while it writes its blocks, the
  table while it keeps the parsed rows; with that epoch in both runs, the
  rate after it is the cache's own.
  """
  return -(-rows // batch_size) if cache in (DISK, TABLE) else 0


def run(work_dir: str, factors: Sequence[int], batch_size: int,
        short_steps: int, steps: int, measure_pair: Measure,
        measure_stream_input: Optional[Measure] = None,
        progress: Callable[[str], None] = print) -> List[Dict[str, Any]]:
  """Measures TPUTrainer at each factor with each training chain.

  Args:
    work_dir: the benchmark's work dir, holding data.json.
    factors: replication factors (the first is the reference, usually 1).
    batch_size: the training batch size.
    short_steps: training steps of the short run.
    steps: training steps of the long run.
    measure_pair: `measure_pair(spec_path, cache, run_name, extra_steps)` ->
      the measurement of TPUTrainer at `extra_steps` + short_steps and
      `extra_steps` + steps (run_benchmark).
    measure_stream_input: `measure_stream_input(spec_path)` -> the
      streamed chain's input alone, no training (run_benchmark): what
      streaming could feed here at most. None: not measured.
    progress: prints a line per measurement.

  Returns:
    One row per (factor, chain): factor, rows, cache, rate, time to the
    first training step, overhead, peak RSS, and the error if the
    measurement failed. The table (`parsed`) only up to TABLE_MAX_ROWS.
    With `measure_stream_input`, a row per factor of cache
    `STREAM_INPUT` (its rate only).
  """
  spec_path = os.path.join(work_dir, 'data.json')
  rows = []
  for factor in factors:
    replica = replicate(spec_path, work_dir, factor)
    count = train_rows(replica)
    for cache in CACHE_MODES:
      if cache == TABLE and count > TABLE_MAX_ROWS:
        progress(f'scale x{factor} ({count:,} rows): no table (over '
                 f'{TABLE_MAX_ROWS:,} rows, the 512 MB cap)')
        continue
      extra = first_epoch_steps(cache, count, batch_size)
      progress(f'scale x{factor} ({count:,} rows), input_cache={cache}' +
               (f' ({extra:,} steps of a first epoch in both runs)'
                if extra else '') + ' ...')
      started = time.time()
      result = measure_pair(replica, cache, f'x{factor}-{cache}', extra)
      row = {'factor': factor, 'rows': count, 'cache': cache,
             'chain': CHAIN_NAMES[cache], 'batch_size': batch_size,
             'short_steps': short_steps + extra, 'steps': steps + extra,
             'first_epoch_steps': extra,
             'pair_seconds': time.time() - started}
      if 'error' in result:
        row['error'] = result['error']
      else:
        row.update(rate=_rate(result, short_steps + extra, batch_size),
                   pair_rate=report.run_rate(result),
                   first_step_seconds=result.get('phases', {}).get(
                       'before_first_step_seconds'),
                   overhead_seconds=result.get('external_overhead_seconds'),
                   do_seconds=result.get('do_seconds'),
                   max_rss_kb=result.get('max_rss_kb'))
      rows.append(row)
    if measure_stream_input is not None:
      progress(f'scale x{factor} ({count:,} rows), the streamed input '
               'alone ...')
      result = measure_stream_input(replica)
      row = {'factor': factor, 'rows': count, 'cache': STREAM_INPUT,
             'chain': CHAIN_NAMES[STREAM_INPUT], 'batch_size': batch_size}
      if 'error' in result:
        row['error'] = result['error']
      else:
        row['rate'] = result.get('examples_per_sec')
      rows.append(row)
  return rows


def _rate(result: Dict[str, Any], after_step: int,
          batch_size: int) -> Optional[float]:
  """Examples/s of a pair's long run past `after_step`, from its events.

  Every chain's rate is read from the long run's own `global_step/sec`
  samples past the short run's steps and, for the caches, their first
  epoch. The pair's external rate (report.run_rate, kept as `pair_rate`)
  divides the long run's extra steps by its extra time; with a first epoch
  of streaming in both runs, that epoch's variation between the runs
  swamps the difference (x1000: 19,459 steps of it against 9,700 read from
  the cache).
  """
  steps_per_sec = events.rate_after_step(result.get('step_rate_samples', []),
                                         after_step)
  if steps_per_sec is None:
    return report.run_rate(result)
  return steps_per_sec * batch_size


def _find(rows: List[Dict[str, Any]], factor: int,
          cache: str) -> Optional[Dict[str, Any]]:
  return next((row for row in rows if row['factor'] == factor and
               row['cache'] == cache and 'error' not in row), None)


def _ratio(top: Optional[Dict[str, Any]], bottom: Optional[Dict[str, Any]],
           field: str) -> Optional[float]:
  if top is None or bottom is None or not bottom.get(field) or (
      top.get(field) is None):
    return None
  return top[field] / bottom[field]


def _relative(rows: List[Dict[str, Any]], row: Dict[str, Any],
              field: str) -> Optional[float]:
  """`row`'s figure over the same chain's at the smallest factor."""
  smallest = min(r['factor'] for r in rows)
  return _ratio(row, _find(rows, smallest, row['cache']), field)


def _vs_table(rows: List[Dict[str, Any]], row: Dict[str, Any]
             ) -> Optional[float]:
  return _ratio(row, _find(rows, row['factor'], TABLE), 'rate')


def verdicts(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Issue 33's scale targets, each with its value and verdict.

  Streaming and the disk cache against the table at the largest factor
  the table ran; at the largest factor against the smallest, the rate and
  peak RSS of streaming and the disk cache, and the table's time to the
  first step at its largest factor. A target whose figures are missing is
  N/A; one that needs two factors is left out with one factor.
  """
  if not rows:
    return []
  factors = sorted({row['factor'] for row in rows})
  smallest, largest = factors[0], factors[-1]
  result = []
  table_factors = [f for f in factors if _find(rows, f, TABLE)]
  if table_factors:
    at = table_factors[-1]
    for cache, target in ((STREAM, STREAM_VS_TABLE), (DISK, DISK_VS_TABLE)):
      value = _ratio(_find(rows, at, cache), _find(rows, at, TABLE), 'rate')
      result.append(_verdict(
          f'x{at} rate, {CHAIN_NAMES[cache]} / table, >= {target}', value,
          None if value is None else value >= target))
      ceiling = _ratio(_find(rows, at, STREAM_INPUT), _find(rows, at, TABLE),
                       'rate')
      if cache == STREAM and ceiling is not None:
        result.append({
            'target': f'x{at} streamed input alone, no training / table '
                      '(the most streaming can reach on this machine)',
            'value': ceiling, 'verdict': 'INFO'})
  if largest == smallest:
    return result
  for cache in (STREAM, DISK):
    top, base = _find(rows, largest, cache), _find(rows, smallest, cache)
    rate = _ratio(top, base, 'rate')
    result.append(_verdict(
        f'{CHAIN_NAMES[cache]} rate x{largest} / x{smallest}, >= '
        f'{1 - RATE_TOLERANCE:.2f}', rate,
        None if rate is None else rate >= 1 - RATE_TOLERANCE))
    rss = _ratio(top, base, 'max_rss_kb')
    result.append(_verdict(
        f'{CHAIN_NAMES[cache]} peak RSS x{largest} / x{smallest}, <= '
        f'{RSS_GROWTH}', rss, None if rss is None else rss <= RSS_GROWTH))
  if len(table_factors) > 1 or (table_factors and
                                table_factors[0] != smallest):
    at = table_factors[-1]
    value = _ratio(_find(rows, at, TABLE), _find(rows, smallest, TABLE),
                   'first_step_seconds')
    result.append(_verdict(
        f'table time to the first step x{at} / x{smallest}, <= '
        f'{TABLE_FIRST_STEP_GROWTH}', value,
        None if value is None else value <= TABLE_FIRST_STEP_GROWTH))
  return result


def _verdict(target: str, value: Optional[float],
             passed: Optional[bool]) -> Dict[str, Any]:
  return {'target': target, 'value': value,
          'verdict': {True: 'PASS', False: 'FAIL', None: 'N/A'}[passed]}


def format_verdicts(targets: List[Dict[str, Any]]) -> str:
  """One line per target: `[PASS] target: value`."""
  return '\n'.join(f'  [{target["verdict"]:<4}] {target["target"]}: '
                   f'{report.fmt(target["value"], ".2f")}'
                   for target in targets)


def format_table(rows: List[Dict[str, Any]]) -> str:
  """One line per factor and chain: rate, time to the first step, memory."""
  header = (f'{"factor":>6} {"train rows":>11} {"chain":>12} '
            f'{"ex/s":>10} {"vs table":>8} {"vs x1":>6} '
            f'{"1st step s":>10} {"vs x1":>6} {"overhead s":>10} '
            f'{"peak RSS MB":>11} {"vs x1":>6} {"pair s":>7}')
  lines = [header, '-' * len(header)]
  for row in rows:
    chain = CHAIN_NAMES.get(row['cache'], row['cache'])
    if 'error' in row:
      lines.append(f'{row["factor"]:>6} {row["rows"]:>11,} {chain:>12} '
                   f'FAILED: {row["error"]}')
      continue
    rss = row.get('max_rss_kb')
    lines.append(
        f'{row["factor"]:>6} {row["rows"]:>11,} {chain:>12} '
        f'{report.fmt(row.get("rate"), ",.0f"):>10} '
        f'{report.fmt(_vs_table(rows, row), ".2f"):>8} '
        f'{report.fmt(_relative(rows, row, "rate"), ".2f"):>6} '
        f'{report.fmt(row.get("first_step_seconds"), ".1f"):>10} '
        f'{report.fmt(_relative(rows, row, "first_step_seconds"), ".2f"):>6} '
        f'{report.fmt(row.get("overhead_seconds"), ".1f"):>10} '
        f'{report.fmt(None if rss is None else rss / 1024, ",.0f"):>11} '
        f'{report.fmt(_relative(rows, row, "max_rss_kb"), ".2f"):>6} '
        f'{report.fmt(row.get("pair_seconds"), ".0f"):>7}')
  return '\n'.join(lines)
