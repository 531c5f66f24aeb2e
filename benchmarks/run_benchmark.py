r"""Benchmark: TPUTrainer (CPU) vs the stock TFX Trainer vs the raw input rate.

One run prepares the transformed taxi examples once (benchmarks.data), then
measures, each in a fresh subprocess and `--repeats` times in turn:

  stock_trainer@40  tfx.components.trainer.executor.Executor + taxi_utils.py
  tpu_trainer@40    tfx_tpu_trainer.executor.Executor + taxi_tpu_module.py
  input@40          read + parse + batch with no model (the default chain
                    with input_cache="serialized"): the raw input rate
  tpu_trainer@B     the same at the large batch B (default 512)
  input@B
  trainer_input@B   the chain as the trainer runs it (input_cache="auto")

and prints a table of medians, the ratios, and PASS/FAIL against the targets
of issue 7; the results go to <output_dir>/<timestamp>.json.

Usage:
  python -m benchmarks.run_benchmark [--repeats=3] [--steps=3000] [--quick]
  make bench BENCH_ARGS="--quick"
  # A/B of a TPUTrainer setting against the same stock and input figures:
  python -m benchmarks.run_benchmark \
      --tpu_trainer_config='{"save_checkpoints_steps": 1000}'
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

from absl import app
from absl import flags
from absl import logging

from benchmarks import events
from benchmarks import launch
from benchmarks import report

DEFAULT_OUTPUT_DIR = os.path.join(launch.REPO_ROOT, 'benchmarks', 'results')
QUICK = {'repeats': 1, 'steps': 300, 'eval_steps': 10, 'rows': 3000}

_REPEATS = flags.DEFINE_integer('repeats', 3, 'Runs of each measurement.')
_STEPS = flags.DEFINE_integer(
    'steps', 3000, 'Training steps of every trainer run (and batches drained '
    'by every input run).')
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
    'tpu_trainer_config', '{}', 'JSON dict merged into the TPUTrainer '
    'custom_config, for A/B runs (e.g. \'{"save_checkpoints_steps": '
    '1000}\').')
_TIMEOUT = flags.DEFINE_float('timeout', 1200.0,
                              'Seconds before a subprocess is killed.')


def _setting(flag: flags.FlagHolder, key: str) -> Any:
  """The flag's value; under --quick, the quick value unless it was given."""
  if _QUICK.value and not flags.FLAGS[flag.name].present and key in QUICK:
    return QUICK[key]
  return flag.value


def _measurements(large_batch: int) -> List[Tuple[str, int]]:
  return [('stock_trainer', 40), ('tpu_trainer', 40), ('input', 40),
          ('tpu_trainer', large_batch), ('input', large_batch),
          ('trainer_input', large_batch)]


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
             steps: int, eval_steps: int, timeout: float,
             tpu_trainer_config: str) -> Dict[str, Any]:
  """One measurement in a fresh subprocess; its result with peak memory."""
  run_name = f'{report.name(kind, batch_size)}-r{repeat}'.replace('@', '-b')
  run_dir = os.path.join(work_dir, 'runs', run_name)
  result_path = os.path.join(run_dir, 'result.json')
  shutil.rmtree(run_dir, ignore_errors=True)  # A reused work dir's old run.
  process = launch.run_module(
      'benchmarks.measure', [
          f'--kind={kind}',
          f'--data_spec={os.path.join(work_dir, "data.json")}',
          f'--batch_size={batch_size}',
          f'--train_steps={steps}',
          f'--eval_steps={eval_steps}',
          f'--output_dir={os.path.join(run_dir, "output")}',
          f'--result={result_path}',
          f'--tpu_trainer_config={tpu_trainer_config}',
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


def run(repeats: int, steps: int, eval_steps: int, large_batch: int,
        rows: Any, work_dir: str, timeout: float,
        tpu_trainer_config: str = '{}') -> Dict[str, Any]:
  """Prepares the data and takes every measurement `repeats` times.

  The measurements of one repeat run back to back, and repeats follow each
  other, so slow phases of a shared machine spread over all measurements.

  Args:
    repeats: runs of each measurement.
    steps: training steps (input: batches) of every run.
    eval_steps: evaluation steps of every trainer run.
    large_batch: the large batch size.
    rows: CSV rows to use (None: all).
    work_dir: the working directory.
    timeout: seconds before a subprocess is killed.
    tpu_trainer_config: JSON dict merged into TPUTrainer's custom_config.

  Returns:
    The whole result: settings, machine, data, runs, summary, ratios,
    targets.
  """
  started = time.time()
  machine = _machine()
  git_state = _git_state()
  data = _prepare_data(work_dir, rows, timeout)
  runs: Dict[str, List[Dict[str, Any]]] = {
      report.name(kind, batch): [] for kind, batch in _measurements(large_batch)
  }
  total = repeats * len(runs)
  count = 0
  for repeat in range(repeats):
    for kind, batch in _measurements(large_batch):
      count += 1
      measurement = report.name(kind, batch)
      print(f'[{count}/{total}] {measurement} (repeat {repeat + 1}) ...',
            end=' ', flush=True)
      result = _measure(work_dir, kind, batch, repeat, steps, eval_steps,
                        timeout, tpu_trainer_config)
      runs[measurement].append(result)
      if 'error' in result:
        print(f'FAILED: {result["error"]}\n{result["log_tail"]}', flush=True)
      else:
        print(f'{result["examples_per_sec"]:,.0f} examples/s, '
              f'{result["process_seconds"]:.0f} s', flush=True)

  summary = {measurement: report.summarize_runs(results)
             for measurement, results in runs.items()}
  tpu_large = report.name('tpu_trainer', large_batch)
  input_large = report.name('input', large_batch)
  ratio_pairs = {
      'tpu_trainer/stock_trainer@40': (report.TPU_40, report.STOCK_40),
      'tpu_trainer/input@40': (report.TPU_40, report.INPUT_40),
      f'tpu_trainer/input@{large_batch}': (tpu_large, input_large),
      f'trainer_input/input@{large_batch}': (
          report.name('trainer_input', large_batch), input_large),
  }
  ratios = {
      key: {
          'ratio_of_medians': report.ratio(summary, top, bottom),
          'per_repeat': report.paired_ratios(runs, top, bottom),
      } for key, (top, bottom) in ratio_pairs.items()
  }
  machine['load_average_end'] = list(os.getloadavg())
  return {
      'timestamp': time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(started)),
      'settings': {
          'repeats': repeats, 'steps': steps, 'eval_steps': eval_steps,
          'large_batch': large_batch, 'rows': data.get('rows'),
          'window_steps': events.WINDOW_STEPS, 'warmup_windows_dropped': 1,
          'tpu_trainer_config_overrides': json.loads(tpu_trainer_config),
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
      'seconds': time.time() - started,
  }


def print_report(results: Dict[str, Any]) -> None:
  """The table, the ratios and the targets, on stdout."""
  settings = results['settings']
  machine = results['machine']
  data = results['data']
  print()
  print(f'TPUTrainer benchmark, {results["timestamp"]}: {settings["steps"]} '
        f'steps, {settings["eval_steps"]} eval steps, '
        f'{settings["repeats"]} repeat(s), {data["rows"]} CSV rows; '
        f'{machine["cpus"]} CPUs ({machine["cpu_model"]}), load average '
        f'{machine["load_average_start"][0]:.1f} -> '
        f'{machine["load_average_end"][0]:.1f}')
  git_state = results.get('git') or {}
  print(f'Commit {git_state.get("commit") or "?"}' + (
      f', with local changes to {len(git_state["library_changes"])} library '
      'file(s)' if git_state.get('library_changes') else ''))
  if settings.get('tpu_trainer_config_overrides'):
    print('TPUTrainer custom_config overrides: '
          f'{settings["tpu_trainer_config_overrides"]}')
  if data.get('reused'):
    print('Data: transformed examples reused from the work dir.')
  else:
    print(f'Data: ExampleGen+StatisticsGen+SchemaGen+Transform '
          f'{data["seconds"]:.0f} s ({data["process_seconds"]:.0f} s with '
          'imports), once for all measurements.')
  print('Figures are medians over runs; examples/s = median of the 100-step '
        'windows after the first, x batch size;')
  print('overhead = Do() wall time - steps / median steps/s; peak RSS = '
        "the measurement process's ru_maxrss.")
  print()
  print(report.format_table(results['summary']))
  print()
  print('Trainer time by phase (s; imports are outside Do(); Do() = to 1st '
        'step + train loop + ckpt+eval + export+copy):')
  print(report.format_phase_table(results['summary']))
  print()
  print('Ratios (of medians; per repeat in brackets):')
  for key, entry in results['ratios'].items():
    value = entry['ratio_of_medians']
    per_repeat = ', '.join(f'{r:.2f}' for r in entry['per_repeat'])
    print(f'  {key:<32} '
          f'{"-" if value is None else format(value, ".2f") + "x"} '
          f'[{per_repeat}]')
  print()
  print('Targets:')
  print(report.format_verdicts(results['targets']))


def main(argv: List[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  repeats = _setting(_REPEATS, 'repeats')
  steps = _setting(_STEPS, 'steps')
  eval_steps = _setting(_EVAL_STEPS, 'eval_steps')
  rows = _setting(_ROWS, 'rows')
  temporary = _WORK_DIR.value is None
  work_dir = _WORK_DIR.value or tempfile.mkdtemp(prefix='tfx_tpu_bench_')
  os.makedirs(work_dir, exist_ok=True)
  try:
    results = run(repeats, steps, eval_steps, _LARGE_BATCH.value, rows,
                  work_dir, _TIMEOUT.value, _TPU_TRAINER_CONFIG.value)
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
