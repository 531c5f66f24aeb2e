"""Benchmark: TPUTrainer (CPU) against the trainers TFX users run today."""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from absl import app
from absl import flags
from absl import logging

from benchmarks import events
from benchmarks import launch
from benchmarks import report
from benchmarks import scale

DEFAULT_OUTPUT_DIR = os.path.join(launch.REPO_ROOT, 'benchmarks', 'results')
# A quick long run must outlast the wall-time noise of a run (a second or
# more on a busy machine) or its pair may give no rate: at 160,000
# examples/s TPUTrainer's 800 steps of 40 took 0.2 s more than 100, and at
# 53,000 the tuned native-Keras Trainer's 1,200 steps took no more than its
# 100 in one fresh-clone run.
QUICK = {'repeats': 1, 'steps': 3000, 'large_batch_steps': 400,
         'fast_steps': 8000, 'fast_large_batch_steps': 2000,
         'short_steps': 100, 'eval_steps': 10, 'rows': 3000,
         'scale_factors': ['1', '3'], 'scale_steps': 1000,
         'embedding_pairs': False}
# TPUTrainer's custom_config in the benchmark, besides batch sizes and label
# (--tpu_trainer_config overrides it): none, the default config (its host
# loop length is `auto`).
TPU_TRAINER_CONFIG = {}
SCALE = 'scale'  # --only: the scale run.
# The scale run's streamed input alone: batches drained after the warm-up.
STREAM_INPUT_BATCHES = 3000

_REPEATS = flags.DEFINE_integer('repeats', 2, 'Runs of each measurement.')
# Long-run step counts: enough timed work (10-60 s on 2 quiet cores) for the
# rate to stand out of the run-to-run spread of Do()'s fixed costs.
_STEPS = flags.DEFINE_integer(
    'steps', 12500, 'Training steps of the long runs of the stock and '
    'native-Keras Trainers at batch 40 (and batches drained by the input '
    'runs at batch 40).')
_LARGE_BATCH_STEPS = flags.DEFINE_integer(
    'large_batch_steps', 3000, 'The same at the large batch.')
_FAST_STEPS = flags.DEFINE_integer(
    'fast_steps', 40000, 'Training steps of the long TPUTrainer runs and of '
    'the compute-limit loop at batch 40: they train several times faster, '
    'so they need more steps for the same timed work.')
_FAST_LARGE_BATCH_STEPS = flags.DEFINE_integer(
    'fast_large_batch_steps', 20000, 'The same at the large batch.')
_SHORT_STEPS = flags.DEFINE_integer(
    'short_steps', 300, 'Training steps of the short trainer runs (and of '
    'the short compute-limit loop).')
_ONLY = flags.DEFINE_list(
    'only', None, 'Measure only these kinds (e.g. tpu_keras,compute_limit), '
    'for A/B runs.')
_STEPS_PER_EXECUTION = flags.DEFINE_integer(
    'steps_per_execution', 100, "The tuned native-Keras Trainer's "
    'steps_per_execution.')
_EVAL_STEPS = flags.DEFINE_integer('eval_steps', 100,
                                   'Evaluation steps of every trainer run.')
_LARGE_BATCH = flags.DEFINE_integer('large_batch', 512,
                                    'The large batch size (TPUTrainer, input).')
_ROWS = flags.DEFINE_integer(
    'rows', None, 'Use only the first N rows of the taxi CSV (default: all '
    '15,002; --quick: 3000).')
_QUICK = flags.DEFINE_boolean(
    'quick', False, f'Smoke run: {QUICK} unless those flags are given.')
_OUTPUT_DIR = flags.DEFINE_string('output_dir', DEFAULT_OUTPUT_DIR,
                                  'Where <timestamp>.json is written.')
_WORK_DIR = flags.DEFINE_string(
    'work_dir', None, 'Working directory (kept; transformed examples found '
    'there are reused). Default: a temporary directory, removed at the end.')
_TPU_TRAINER_CONFIG = flags.DEFINE_string(
    'tpu_trainer_config', json.dumps(TPU_TRAINER_CONFIG), 'JSON dict merged '
    'into the TPUTrainer custom_config (e.g. \'{"host_iterations_per_loop": '
    '1}\' for the one-step-per-run estimator loop).')
_PROGRESS_ROW = flags.DEFINE_boolean(
    'progress_row', True, 'Also measure TPUTrainer (model_fn module, batch '
    '40) with the training progress off (custom_config show_progress=false) '
    'beside its default run with progress on: the tpu_no_progress@40 row and '
    'the tpu_trainer@40/tpu_no_progress@40 ratio.')
_SCALE_FACTORS = flags.DEFINE_list(
    'scale_factors', ['1', '10', '100', '1000'], 'The scale run: copies of '
    'the training split (replicas written once under the work dir and reused '
    'with the same --work_dir; x1000: about 10 million rows, 450 MB of gzip '
    'files); empty: no scale run. --scale_factors=1,10,100 leaves out x1000 '
    '(about 10 of the scale run\'s 25 minutes here).')
_SCALE_STEPS = flags.DEFINE_integer(
    'scale_steps', 10000, 'The scale run: training steps of the long run '
    '(the short run takes --short_steps).')
_EMBEDDING_PAIRS = flags.DEFINE_boolean(
    'embedding_pairs', True, 'The TPU embedding trainers (tpu_embedding, '
    'tpu_keras_embedding) at two step counts, for their external rate; '
    'false (--quick): one long run each, its event-file rate only.')
_TIMEOUT = flags.DEFINE_float(
    'timeout', None, 'Seconds before a subprocess is killed (default: '
    'never; a loaded machine is slow, not broken).')


def _setting(flag: flags.FlagHolder, key: str) -> Any:
  """The flag's value; under --quick, the quick value unless it was given."""
  if _QUICK.value and not flags.FLAGS[flag.name].present and key in QUICK:
    return QUICK[key]
  return flag.value


def _measurements(large_batch: int,
                  progress_row: bool = False) -> List[Tuple[str, int]]:
  """(measurement kind, batch) in the order one repeat takes them."""
  result = []
  for batch in (40, large_batch):
    result.extend((kind, batch) for kind in (
        report.STOCK, report.KERAS_FIT, report.KERAS_FIT_SPE, report.TPU,
        report.TPU_KERAS, report.LIMIT, report.LIMIT_MODEL_FN, report.INPUT))
    if progress_row and batch == 40:
      result.insert(result.index((report.TPU, 40)) + 1,
                    (report.TPU_NO_PROGRESS, 40))
  return result + [(report.TRAINER_INPUT, large_batch)] + [
      (kind, large_batch) for kind in report.EMBEDDING_KINDS]


def _is_trainer(kind: str) -> bool:
  """Measured as a pair of runs (the external rate); else once."""
  return (kind in report.TRAINERS or kind in report.EMBEDDING_TRAINERS or
          kind == report.TPU_NO_PROGRESS)


def _progress_off(tpu_trainer_config: str) -> str:
  """The TPUTrainer config with the progress off."""
  return json.dumps(dict(json.loads(tpu_trainer_config), show_progress=False))


def _measure_args(kind: str, steps_per_execution: int,
                  tpu_trainer_config: str) -> List[str]:
  """benchmarks.measure's --kind and the flags of one measurement kind."""
  if kind == report.TPU_NO_PROGRESS:
    return ['--kind=tpu_trainer', '--module=tpu',
            f'--tpu_trainer_config={_progress_off(tpu_trainer_config)}']
  if kind in (report.TPU, report.TPU_KERAS):
    return ['--kind=tpu_trainer',
            f'--module={"keras" if kind == report.TPU_KERAS else "tpu"}',
            f'--tpu_trainer_config={tpu_trainer_config}']
  if kind in report.EMBEDDING_KINDS:
    return ['--kind=tpu_trainer',
            '--module=' + ('keras_embeddings' if kind == report.KERAS_EMBEDDING
                           else 'embeddings'),
            f'--tpu_trainer_config={_embedding_config(kind, tpu_trainer_config)}']
  if kind in (report.KERAS_FIT, report.KERAS_FIT_SPE):
    spe = steps_per_execution if kind == report.KERAS_FIT_SPE else 1
    return ['--kind=keras_trainer', f'--steps_per_execution={spe}']
  if kind in report.LIMITS:
    return ['--kind=compute_limit',
            f'--module={"tpu" if kind == report.LIMIT_MODEL_FN else "keras"}']
  return [f'--kind={kind}']


def _embedding_config(kind: str, tpu_trainer_config: str) -> str:
  """The 10-million-row run: its hashed table's size; one checkpoint kept."""
  config = json.loads(tpu_trainer_config)
  if kind == report.EMBEDDING_10M:
    config['params'] = dict(config.get('params', {}),
                            tract_buckets=report.EMBEDDING_10M_ROWS)
    config['keep_checkpoint_max'] = 1
  return json.dumps(config)


def _machine() -> Dict[str, Any]:
  model = ''
  try:
    with open('/proc/cpuinfo') as f:
      model = next((line.split(':', 1)[1].strip() for line in f
                    if line.startswith('model name')), '')
  except OSError:
    pass
  return {
      'cpus': os.cpu_count(),
      'cpu_model': model,
      'platform': platform.platform(),
      'python': sys.version.split()[0],
      'load_average_start': list(os.getloadavg()),
  }


def _git_state() -> Dict[str, Any]:
  """The commit measured and whether the library had local changes."""
  def git(*args):
    try:
      return subprocess.run(['git', *args], cwd=launch.REPO_ROOT,
                            capture_output=True, text=True, check=True,
                            timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
      return None
  changed = git('status', '--porcelain', '--', 'tfx_tpu_trainer',
                'components')
  return {'commit': git('rev-parse', 'HEAD'),
          'library_changes': changed.splitlines() if changed else []}


def _prepare_data(work_dir: str, rows: Any, timeout: float) -> Dict[str, Any]:
  """Runs benchmarks.data once (in a subprocess) unless work_dir has it."""
  spec_path = os.path.join(work_dir, 'data.json')
  if os.path.exists(spec_path):
    logging.info('Reusing the transformed examples of %s.', spec_path)
    with open(spec_path) as f:
      spec = json.load(f)
    spec['reused'] = True
    return spec
  args = [f'--work_dir={work_dir}']
  if rows:
    args.append(f'--rows={rows}')
  print(f'Preparing the transformed taxi examples in {work_dir} ...',
        flush=True)
  result = launch.run_module('benchmarks.data', args,
                             os.path.join(work_dir, 'logs', 'data.log'),
                             timeout)
  if result.returncode != 0:
    raise RuntimeError('Data preparation failed (log: '
                       f'{result.log_path}):\n{result.log_tail()}')
  with open(spec_path) as f:
    spec = json.load(f)
  spec.update(process_seconds=result.seconds, max_rss_kb=result.max_rss_kb,
              reused=False)
  return spec


def _measure(work_dir: str, kind: str, batch_size: int, repeat: int,
             steps: int, eval_steps: int, timeout: Optional[float],
             args: List[str], suffix: str = '',
             data_spec: Optional[str] = None) -> Dict[str, Any]:
  """One measurement in a fresh subprocess; its result with peak memory."""
  run_name = (f'{report.name(kind, batch_size)}-r{repeat}{suffix}'
              ).replace('@', '-b')
  data_spec = data_spec or os.path.join(work_dir, 'data.json')
  run_dir = os.path.join(work_dir, 'runs', run_name)
  result_path = os.path.join(run_dir, 'result.json')
  shutil.rmtree(run_dir, ignore_errors=True)  # A reused work dir's old run.
  process = launch.run_module(
      'benchmarks.measure', args + [
          f'--data_spec={data_spec}',
          f'--batch_size={batch_size}',
          f'--train_steps={steps}',
          f'--eval_steps={eval_steps}',
          f'--output_dir={os.path.join(run_dir, "output")}',
          f'--result={result_path}',
      ], os.path.join(run_dir, 'log.txt'), timeout)
  if process.returncode != 0 or not os.path.exists(result_path):
    reason = 'timed out' if process.timed_out else (
        f'exit code {process.returncode}')
    return {'error': f'{reason}; log: {process.log_path}',
            'log_tail': process.log_tail()}
  with open(result_path) as f:
    result = json.load(f)
  result.update(max_rss_kb=process.max_rss_kb,
                process_seconds=process.seconds)
  return result


def long_steps(kind: str, batch_size: int,
               step_counts: Dict[str, int]) -> int:
  """The long-run step count of a measurement (see the step flags)."""
  fast = (kind in report.TPU_TRAINERS or kind in report.LIMITS or
          kind in report.EMBEDDING_TRAINERS or kind == report.TPU_NO_PROGRESS)
  large = batch_size != 40
  return step_counts[('fast_' if fast else '') +
                     ('large_batch_steps' if large else 'steps')]


def _measure_pair(work_dir: str, kind: str, batch_size: int, repeat: int,
                  short_steps: int, steps: int, eval_steps: int,
                  timeout: Optional[float], args: List[str], suffix: str = '',
                  data_spec: Optional[str] = None) -> Dict[str, Any]:
  """A trainer at two step counts: the long run's result with the pair's
  external figures (report.external_figures), peak memory the larger."""
  short = _measure(work_dir, kind, batch_size, repeat, short_steps,
                   eval_steps, timeout, args, suffix=suffix + '-short',
                   data_spec=data_spec)
  if 'error' in short:
    return short
  long = _measure(work_dir, kind, batch_size, repeat, steps, eval_steps,
                  timeout, args, suffix=suffix, data_spec=data_spec)
  if 'error' in long:
    return long
  long.update(report.external_figures(short, long, batch_size))
  long['max_rss_kb'] = max(long['max_rss_kb'], short['max_rss_kb'])
  long['short_process_seconds'] = short['process_seconds']
  return long


def run_scale(work_dir: str, factors: List[int], batch_size: int,
              short_steps: int, steps: int, eval_steps: int,
              timeout: Optional[float],
              tpu_trainer_config: str) -> List[Dict[str, Any]]:
  """The scale run (benchmarks.scale) with this harness's measurements.

  Every run is a pipeline execution (`measure --pipeline_run`), so each
  chain trains as in a pipeline, in a resumable directory (where the disk
  cache lives); the streaming rows set `input_shuffle` explicitly.
  """

  def measure_pair(spec_path, cache, run_name, extra_steps):
    overrides = dict(json.loads(tpu_trainer_config), input_cache=cache,
                     input_shuffle=scale.INPUT_SHUFFLE)
    args = _measure_args(report.TPU, 0, json.dumps(overrides)) + [
        '--pipeline_run']
    return _measure_pair(work_dir, report.TPU, batch_size, 0,
                         short_steps + extra_steps, steps + extra_steps,
                         eval_steps, timeout, args,
                         suffix=f'-scale-{run_name}', data_spec=spec_path)

  def measure_stream_input(spec_path):
    return _measure(work_dir, scale.STREAM_INPUT, batch_size, 0,
                    STREAM_INPUT_BATCHES, eval_steps, timeout,
                    _measure_args(scale.STREAM_INPUT, 0, '{}'), suffix='-scale',
                    data_spec=spec_path)

  return scale.run(work_dir, factors, batch_size, short_steps, steps,
                   measure_pair, measure_stream_input,
                   progress=lambda line: print(line, flush=True))


def _measure_kind(work_dir: str, kind: str, batch_size: int, repeat: int,
                  step_counts: Dict[str, int], short_steps: int,
                  eval_steps: int,
                  timeout: Optional[float], steps_per_execution: int,
                  tpu_trainer_config: str,
                  embedding_pairs: bool = True) -> Dict[str, Any]:
  """One run of a measurement: a trainer at two step counts, else once.

  The 10-million-row embedding run is one short run; without
  `embedding_pairs` the embedding trainers are one long run each.

  A trainer's result is its long run's, plus the external figures of the
  pair (report.external_figures) and the short run's peak memory folded into
  the maximum.
  """
  args = _measure_args(kind, steps_per_execution, tpu_trainer_config)
  if kind == report.EMBEDDING_10M:
    # One short run: its memory and sizes, not its rate.
    return _measure(work_dir, kind, batch_size, repeat, short_steps,
                    eval_steps, timeout, args)
  steps = long_steps(kind, batch_size, step_counts)
  if kind in report.EMBEDDING_TRAINERS and not embedding_pairs:
    return _measure(work_dir, kind, batch_size, repeat, steps, eval_steps,
                    timeout, args)
  if not _is_trainer(kind):
    if kind in report.LIMITS:
      args.append(f'--short_steps={short_steps}')
    return _measure(work_dir, kind, batch_size, repeat, steps, eval_steps,
                    timeout, args)
  return _measure_pair(work_dir, kind, batch_size, repeat, short_steps,
                       steps, eval_steps, timeout, args)


def _ratio_pairs(large_batch: int) -> List[Tuple[str, str]]:
  """(numerator, denominator) measurements of the printed ratios."""
  pairs = []
  for batch in (40, large_batch):
    at = lambda kind, batch=batch: report.name(kind, batch)
    for kind in report.TRAINERS:
      pairs.append((at(kind), at(report.LIMIT)))
    pairs.append((at(report.TPU), at(report.LIMIT_MODEL_FN)))
    for kind in report.TPU_TRAINERS:
      for reference in (report.STOCK, report.KERAS_FIT,
                        report.KERAS_FIT_SPE):
        pairs.append((at(kind), at(reference)))
    pairs.append((at(report.KERAS_FIT_SPE), at(report.STOCK)))
  pairs.append((report.name(report.TRAINER_INPUT, large_batch),
                report.name(report.INPUT, large_batch)))
  # TPU embedding tables against the bundled wide-and-deep and against a
  # Keras Embedding of the same tables.
  for reference in (report.TPU, report.KERAS_EMBEDDING):
    pairs.append((report.name(report.TPU_EMBEDDING, large_batch),
                  report.name(reference, large_batch)))
  # Progress on (the default) over progress off: 1.0 is no cost.
  pairs.append((report.name(report.TPU, 40),
                report.name(report.TPU_NO_PROGRESS, 40)))
  return pairs


def scale_command(work_dir: str, factors: Optional[List[int]], steps: int,
                  large_batch: int) -> str:
  """The command that runs this scale run again, alone, on the same data."""
  return ('python -m benchmarks.run_benchmark --only=scale --repeats=1 '
          f'--work_dir={work_dir} --scale_factors='
          f'{",".join(str(f) for f in factors or [])} '
          f'--scale_steps={steps} --large_batch={large_batch}')


def run(repeats: int, step_counts: Dict[str, int], eval_steps: int,
        large_batch: int, rows: Any, work_dir: str, timeout: Optional[float],
        tpu_trainer_config: str = json.dumps(TPU_TRAINER_CONFIG),
        short_steps: int = 300,
        steps_per_execution: int = 100,
        only: Optional[List[str]] = None,
        progress_row: bool = False,
        scale_factors: Optional[List[int]] = None,
        scale_steps: int = 10000,
        embedding_pairs: bool = True) -> Dict[str, Any]:
  """Prepares the data and takes every measurement `repeats` times.

  The measurements of one repeat run back to back, and repeats follow each
  other, so slow phases of a shared machine spread over all measurements.

  Args:
    repeats: runs of each measurement.
    step_counts: the long-run step counts, keyed by the flag names (steps,
      large_batch_steps, fast_steps, fast_large_batch_steps).
    eval_steps: evaluation steps of every trainer run.
    large_batch: the large batch size.
    rows: CSV rows to use (None: all).
    work_dir: the working directory.
    timeout: seconds before a subprocess is killed.
    tpu_trainer_config: JSON dict merged into TPUTrainer's custom_config.
    short_steps: training steps of the short trainer runs.
    steps_per_execution: the tuned native-Keras Trainer's setting.
    only: measure only these kinds (None: all; 'scale': the scale run).
    progress_row: also measure TPUTrainer at batch 40 with progress off.
    scale_factors: the scale run's replication factors (None or empty: no
      scale run).
    scale_steps: the scale run's long-run training steps.
    embedding_pairs: the TPU embedding trainers at two step counts (else
      one long run each).

  Returns:
    The whole result: settings, machine, data, runs, summary, ratios,
    targets, and the scale run's rows and targets.
  """
  started = time.time()
  machine = _machine()
  git_state = _git_state()
  data = _prepare_data(work_dir, rows, timeout)
  measurements = [(kind, batch) for kind, batch in
                  _measurements(large_batch, progress_row)
                  if not only or kind in only]
  runs: Dict[str, List[Dict[str, Any]]] = {
      report.name(kind, batch): [] for kind, batch in measurements
  }
  total = repeats * len(runs)
  count = 0
  for repeat in range(repeats):
    for kind, batch in measurements:
      count += 1
      measurement = report.name(kind, batch)
      print(f'[{count}/{total}] {measurement} (repeat {repeat + 1}) ...',
            end=' ', flush=True)
      result = _measure_kind(work_dir, kind, batch, repeat, step_counts,
                             short_steps, eval_steps, timeout,
                             steps_per_execution, tpu_trainer_config,
                             embedding_pairs)
      runs[measurement].append(result)
      if 'error' in result:
        print(f'FAILED: {result["error"]}\n{result["log_tail"]}', flush=True)
      else:
        rate = report.run_rate(result)
        print(f'{rate:,.0f} examples/s, ' if rate else 'no rate, ',
              end='')
        print(f'{result["process_seconds"]:.0f} s', flush=True)

  summary = {measurement: report.summarize_runs(results)
             for measurement, results in runs.items()}
  ratios = {
      f'{top}/{bottom}': {
          'ratio_of_medians': report.ratio(summary, top, bottom),
          'per_repeat': report.paired_ratios(runs, top, bottom),
          'event_ratio': report.ratio(summary, top, bottom,
                                      'examples_per_sec'),
      } for top, bottom in _ratio_pairs(large_batch)
      if top in summary and bottom in summary
  }
  scale_rows = []
  if scale_factors and (not only or SCALE in only):
    scale_rows = run_scale(work_dir, scale_factors, large_batch, short_steps,
                           scale_steps, eval_steps, timeout,
                           tpu_trainer_config)
  machine['load_average_end'] = list(os.getloadavg())
  return {
      'timestamp': time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(started)),
      'settings': {
          'repeats': repeats, **step_counts, 'short_steps': short_steps,
          'eval_steps': eval_steps,
          'steps_per_execution': steps_per_execution,
          'large_batch': large_batch, 'rows': data.get('rows'),
          'window_steps': events.WINDOW_STEPS, 'warmup_windows_dropped': 1,
          'tpu_trainer_config_overrides': json.loads(tpu_trainer_config),
          'scale_factors': scale_factors, 'scale_steps': scale_steps,
          'embedding_pairs': embedding_pairs,
      },
      'machine': machine,
      'git': git_state,
      'data': {key: data.get(key) for key in (
          'rows', 'seconds', 'process_seconds', 'max_rss_kb', 'reused',
          'preprocessing_module_file')},
      'summary': summary,
      'ratios': ratios,
      'targets': report.evaluate(summary, large_batch),
      'runs': runs,
      'scale': {'rows': scale_rows, 'targets': scale.verdicts(scale_rows),
                'command': scale_command(work_dir, scale_factors,
                                         scale_steps, large_batch),
                'replica_bytes': {
                    str(factor): scale.replica_bytes(
                        os.path.join(work_dir, 'data.json'), factor)
                    for factor in scale_factors or [] if factor > 1}},
      'seconds': time.time() - started,
  }


def print_report(results: Dict[str, Any]) -> None:
  """The table, the ratios and the targets, on stdout."""
  settings = results['settings']
  machine = results['machine']
  data = results['data']
  print()
  print(f'TPUTrainer benchmark, {results["timestamp"]}: '
        f'{settings["eval_steps"]} eval steps, '
        f'{settings["repeats"]} repeat(s), {data["rows"]} CSV rows; '
        f'{machine["cpus"]} CPUs ({machine["cpu_model"]}), load average '
        f'{machine["load_average_start"][0]:.1f} -> '
        f'{machine["load_average_end"][0]:.1f}')
  git_state = results.get('git') or {}
  print(f'Commit {git_state.get("commit") or "?"}' + (
      f', with local changes to {len(git_state["library_changes"])} library '
      'file(s)' if git_state.get('library_changes') else ''))
  print('TPUTrainer custom_config (besides batch sizes, label_key, '
        f'use_tpu=false): {settings.get("tpu_trainer_config_overrides")}; '
        'native-Keras steps_per_execution: '
        f'{settings.get("steps_per_execution")}')
  if data.get('reused'):
    print('Data: transformed examples reused from the work dir.')
  else:
    print(f'Data: ExampleGen+StatisticsGen+SchemaGen+Transform '
          f'{data["seconds"]:.0f} s ({data["process_seconds"]:.0f} s with '
          'imports), once for all measurements.')
  print(f'Training steps of the short / long runs: stock and native-Keras '
        f'{settings["short_steps"]} / {settings["steps"]} at batch 40, '
        f'{settings["short_steps"]} / {settings["large_batch_steps"]} at '
        f'batch {settings["large_batch"]}; TPUTrainer and the compute-limit '
        f'loop {settings["short_steps"]} / {settings["fast_steps"]} and '
        f'{settings["short_steps"]} / {settings["fast_large_batch_steps"]}.')
  print('Figures are medians over runs. ext ex/s: (steps - short_steps) x '
        'batch / (Do() at steps - Do() at short_steps), the rate every '
        'ratio uses;')
  print('event ex/s: median of the 100-step windows of global_step/sec '
        'after the first, x batch (estimators only); overhead: Do() - '
        'steps x batch / ext ex/s;')
  print("short s: Do() at short_steps; peak RSS: the measurement process's "
        'ru_maxrss (the larger of the two runs).')
  print()
  print(report.format_table(results['summary']))
  print()
  print('Trainer time by phase (s; imports are outside Do(); Do() = to 1st '
        'step + train loop + ckpt+eval + export+copy):')
  print(report.format_phase_table(results['summary']))
  print()
  print('Ratios of ext ex/s (of medians; per repeat in brackets; of the '
        'event-file rates after "event"):')
  for key, entry in results['ratios'].items():
    value = entry['ratio_of_medians']
    event = entry.get('event_ratio')
    per_repeat = ', '.join(f'{r:.2f}' for r in entry['per_repeat'])
    print(f'  {key:<36} '
          f'{"-" if value is None else format(value, ".2f") + "x":>7} '
          f'[{per_repeat}]' +
          ('' if event is None else f'  event {event:.2f}x'))
  if any(report.name(kind, settings['large_batch']) in results['summary']
         for kind in report.EMBEDDING_KINDS):
    print()
    notes = [] if settings.get('embedding_pairs') else [
        'one run each, ext ex/s: the event-file rate']
    notes += [
        'ckpt: the last checkpoint in model_run, with the optimizer slots',
        'export: Format-Serving',
        f'accuracy, AUC: the final evaluation, {settings["eval_steps"]} steps',
        f'{report.EMBEDDING_10M}: its hashed table at '
        f'{report.EMBEDDING_10M_ROWS:,} rows, {settings["short_steps"]} steps, '
        'one run']
    print(f'TPU embeddings on CPU at batch {settings["large_batch"]} '
          f'({"; ".join(notes)}):')
    print(report.format_embedding_table(results['summary'],
                                        settings['large_batch']))
  print()
  print('Targets:')
  print(report.format_verdicts(results['targets']))
  scale_rows = results.get('scale', {}).get('rows')
  if scale_rows:
    print()
    print(f'Scale run: TPUTrainer (model_fn module, a pipeline execution) '
          f'at batch {settings["large_batch"]}, {settings["short_steps"]} / '
          f'{settings["scale_steps"]} steps, the training split replicated '
          f'x{", x".join(str(f) for f in settings["scale_factors"])}; '
          'chains: table (input_cache=parsed, up to '
          f'{scale.TABLE_MAX_ROWS:,} rows), disk (input_cache=disk: both '
          'runs first train one epoch, so the rate is read from the '
          'snapshot), stream (input_cache=none); input_shuffle='
          f'{scale.INPUT_SHUFFLE}. 1st step s: Do() start to the first '
          'training event (after the first host loop); peak RSS: the larger '
          'process of the pair; pair s: both runs, with imports.')
    print(scale.format_table(scale_rows))
    print('Scale targets (issue 33):')
    print(scale.format_verdicts(results['scale']['targets']))
    print('Again (the scale run alone, replicas reused): '
          f'{results["scale"].get("command")}')


def main(argv: List[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  repeats = _setting(_REPEATS, 'repeats')
  step_counts = {
      flag.name: _setting(flag, flag.name)
      for flag in (_STEPS, _LARGE_BATCH_STEPS, _FAST_STEPS,
                   _FAST_LARGE_BATCH_STEPS)
  }
  short_steps = _setting(_SHORT_STEPS, 'short_steps')
  eval_steps = _setting(_EVAL_STEPS, 'eval_steps')
  rows = _setting(_ROWS, 'rows')
  temporary = _WORK_DIR.value is None
  work_dir = _WORK_DIR.value or tempfile.mkdtemp(prefix='tfx_tpu_bench_')
  os.makedirs(work_dir, exist_ok=True)
  try:
    results = run(repeats, step_counts, eval_steps, _LARGE_BATCH.value, rows,
                  work_dir, _TIMEOUT.value, _TPU_TRAINER_CONFIG.value,
                  short_steps, _STEPS_PER_EXECUTION.value, _ONLY.value,
                  _PROGRESS_ROW.value,
                  [int(factor) for factor in
                   _setting(_SCALE_FACTORS, 'scale_factors')],
                  _setting(_SCALE_STEPS, 'scale_steps'),
                  _setting(_EMBEDDING_PAIRS, 'embedding_pairs'))
  except BaseException:
    print(f'The work dir {work_dir} is kept (logs under logs/ and runs/).')
    raise
  failed = sum(entry['failed'] for entry in results['summary'].values())
  if temporary and not failed:
    shutil.rmtree(work_dir, ignore_errors=True)
    results['work_dir'] = None
  else:
    results['work_dir'] = work_dir
  print_report(results)
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  stamp = time.strftime('%Y%m%d-%H%M%S',
                        time.strptime(results['timestamp'],
                                      '%Y-%m-%dT%H:%M:%S'))
  path = os.path.join(_OUTPUT_DIR.value, f'{stamp}.json')
  with open(path, 'w') as f:
    json.dump(results, f, indent=2)
  print(f'\nResults: {path}')
  if failed:
    print(f'{failed} measurement run(s) failed; logs are kept in {work_dir}.')
    sys.exit(1)


if __name__ == '__main__':
  app.run(main)
