"""Does this machine's TPU run the trainer? Checks in order, each timed."""

import dataclasses
import glob
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.tpu import runtimes

__all__ = ['TPU_STEP', 'LIBTPU_STEP', 'RUNTIME_STEP', 'SYSTEM_STEP',
           'ROUND_TRIP_STEP', 'INFERENCE_STEP', 'CHILD_STEPS', 'PROBE_MODULE',
           'TPU_NAME_ENVS', 'LIBTPU_ENVS', 'LIBTPU_DISTRIBUTIONS',
           'DEFAULT_TIMEOUT_SECS', 'ROUND_TRIP_TRAIN_STEPS',
           'ROUND_TRIP_EVAL_STEPS', 'ROUND_TRIP_BATCH_SIZE', 'IN_THE_TPU_IMAGE',
           'TPUCheckError', 'CheckResult', 'tpu_devices', 'check_tpu_present',
           'find_libtpu', 'libtpu_version', 'check_libtpu',
           'check_runtime', 'initialize_tpu_system',
           'round_trip', 'INFERENCE_EXAMPLES', 'inference_check',
           'run_steps_in_process', 'run_child_steps',
           'run_checks']

TPU_STEP, LIBTPU_STEP, RUNTIME_STEP, SYSTEM_STEP, ROUND_TRIP_STEP = (
    'tpu', 'libtpu', 'runtime', 'tpu system', 'round trip')
INFERENCE_STEP = 'inference'
CHILD_STEPS = (SYSTEM_STEP, ROUND_TRIP_STEP, INFERENCE_STEP)
PROBE_MODULE = 'tfx_tpu_trainer.tpu.check_module'
TPU_NAME_ENVS = ('TPU_NAME', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS')
# Where libtpu is looked for when no variable names it.
LIBTPU_ENVS = ('TF_PLUGGABLE_DEVICE_LIBRARY_PATH', 'TPU_LIBRARY_PATH')
LIBTPU_DISTRIBUTIONS = ('libtpu', 'libtpu-nightly')
# TPU chips on the PCI bus: Google's vendor id and the TPU device ids, as
# jax/_src/hardware_utils.py reads them (a /dev/vfio/<n> group alone may be
# any VFIO device, ray-project/ray#65034).
PCI_DEVICES_DIR = '/sys/bus/pci/devices'
GOOGLE_PCI_VENDOR = '0x1ae0'
TPU_PCI_DEVICES = {'0x0027': 'v2/v3', '0x005e': 'v4', '0x0062': 'v5p',
                   '0x0063': 'v5e', '0x006f': 'v6e'}
DEFAULT_TIMEOUT_SECS = 900
ROUND_TRIP_TRAIN_STEPS = 20
ROUND_TRIP_EVAL_STEPS = 2
ROUND_TRIP_BATCH_SIZE = 128  # Divides by every single-host replica count.
# The inference check scores this many examples in batches of
# ROUND_TRIP_BATCH_SIZE: two full batches and a padded one.
INFERENCE_EXAMPLES = 2 * ROUND_TRIP_BATCH_SIZE + 44
_EXPECTED_TAG_SETS = [('serve',), ('serve', 'tpu')]

IN_THE_TPU_IMAGE = (
    'run it in the TPU image (Dockerfile targets tpu-se / tpu-pjrt) on a TPU '
    'VM or a GKE TPU node, or compile the pipeline with --tpu-check')


class TPUCheckError(errors.TPUTrainerError, RuntimeError):
  """A check failed; the message names it and says what to do."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """One check: passed or not, what it found, how long it took."""
  step: str
  ok: bool
  detail: str
  seconds: float = 0.0
  advice: str = ''

  def line(self) -> str:
    if self.ok:
      return f'ok      {self.step}: {self.detail} ({self.seconds:.1f} s)'
    return (f'FAILED  {self.step}: {self.detail}' +
            (f'; {self.advice}' if self.advice else ''))


# --- Steps 1-3: no TensorFlow -------------------------------------------


def tpu_devices(dev_dir: str = '/dev') -> List[str]:
  """The TPU device files: `accel<n>` (v4 and older), `vfio/<n>` (v5e+)."""
  found = sorted(glob.glob(os.path.join(dev_dir, 'accel[0-9]*')))
  found += sorted(p for p in glob.glob(os.path.join(dev_dir, 'vfio', '*'))
                  if os.path.basename(p).isdigit())
  return found


def pci_tpu_chips(pci_dir: str = PCI_DEVICES_DIR) -> Optional[List[str]]:
  """`<PCI address> (TPU <generation>)` per TPU chip; None: PCI unreadable."""
  if not os.path.isdir(pci_dir):
    return None
  chips = []
  for device in sorted(os.listdir(pci_dir)):
    try:
      with open(os.path.join(pci_dir, device, 'vendor')) as f:
        vendor = f.read().strip()
      with open(os.path.join(pci_dir, device, 'device')) as f:
        device_id = f.read().strip()
    except OSError:
      continue
    if vendor == GOOGLE_PCI_VENDOR and device_id in TPU_PCI_DEVICES:
      chips.append(f'{device} (TPU {TPU_PCI_DEVICES[device_id]})')
  return chips


def check_tpu_present(environ: Mapping[str, str], dev_dir: str = '/dev',
                      pci_dir: str = PCI_DEVICES_DIR) -> CheckResult:
  """Step 1: a TPU attached (on the PCI bus) or named."""
  devices = tpu_devices(dev_dir)
  chips = pci_tpu_chips(pci_dir)
  named = [f'{k}={environ[k]}' for k in TPU_NAME_ENVS if environ.get(k)]
  if chips or named:
    return CheckResult(TPU_STEP, True,
                       ', '.join((chips or []) + devices + named))
  if devices and chips is None:
    return CheckResult(
        TPU_STEP, True,
        f'{", ".join(devices)} (unsure: {pci_dir} is not readable, so the '
        'devices are not known to be TPU chips)')
  if devices:
    return CheckResult(
        TPU_STEP, False,
        f'{", ".join(devices)} but no TPU chip on the PCI bus ({pci_dir}: no '
        f'device of vendor {GOOGLE_PCI_VENDOR} with a TPU device id): another '
        'VFIO or accelerator device, not a TPU', advice=IN_THE_TPU_IMAGE)
  return CheckResult(
      TPU_STEP, False,
      f'no TPU on this machine (no {dev_dir}/accel*, no {dev_dir}/vfio/<n>, '
      f'no {" or ".join(TPU_NAME_ENVS)})', advice=IN_THE_TPU_IMAGE)


def find_libtpu(environ: Mapping[str, str]) -> Optional[str]:
  """The libtpu the runtime loads: named by a variable, /lib, or the wheel."""
  candidates = [environ[k] for k in LIBTPU_ENVS if environ.get(k)]
  candidates.append(runtimes.LIBTPU_PATH)
  spec = importlib.util.find_spec('libtpu')
  if spec is not None and spec.submodule_search_locations:
    for location in spec.submodule_search_locations:
      candidates.append(os.path.join(location, 'libtpu.so'))
  for path in candidates:
    if os.path.isfile(path):
      return path
  return None


def libtpu_version(environ: Mapping[str, str]) -> str:
  """From a libtpu wheel, else what the TPU image recorded, else unknown."""
  for name in LIBTPU_DISTRIBUTIONS:
    try:
      return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      continue
  if environ.get(runtimes.LIBTPU_VERSION_ENV):
    return environ[runtimes.LIBTPU_VERSION_ENV]
  return 'unknown (a bare libtpu.so records none)'


def check_libtpu(environ: Mapping[str, str]) -> CheckResult:
  """Step 2: libtpu found, and its version."""
  path = find_libtpu(environ)
  if path is None:
    return CheckResult(
        LIBTPU_STEP, False,
        f'no libtpu.so ({", ".join(LIBTPU_ENVS)} unset or missing, none at '
        f'{runtimes.LIBTPU_PATH}, no libtpu wheel)',
        advice=('this is not the TPU image: ' + IN_THE_TPU_IMAGE))
  return CheckResult(LIBTPU_STEP, True,
                     f'{path}, version {libtpu_version(environ)}')


def check_runtime(environ: Mapping[str, str]) -> CheckResult:
  """Step 3: the runtime in use is supported here and the one asked for."""
  runtime = runtimes.runtime_in_use(dict(environ))
  expected = environ.get(runtimes.RUNTIME_ENV)
  accelerator = environ.get(runtimes.ACCELERATOR_ENV)
  pjrt_vars = ', '.join(f'{k}={v}' for k, v in runtimes.PJRT_ENV.items())
  if expected and expected != runtime:
    return CheckResult(
        RUNTIME_STEP, False,
        f'the step asks for the {expected} runtime ({runtimes.RUNTIME_ENV}) '
        f'but the process runs {runtime}',
        advice=(f'use the Dockerfile target tpu-{expected} as the trainer '
                'image' + (f' (PJRT needs {pjrt_vars})' if expected ==
                           runtimes.PJRT else
                           ' (StreamExecutor: without the PJRT variables)')))
  detail = f'{runtime}'
  if accelerator:
    try:
      choice = runtimes.choose(accelerator, runtime)
    except runtimes.TPURuntimeError as e:
      return CheckResult(RUNTIME_STEP, False, str(e),
                         advice='compile for a supported accelerator/runtime')
    detail += f' on {accelerator} (TPU {choice.generation})'
    if choice.warnings:
      detail += f'; reported broken: {runtimes.ISSUE_90807}'
  return CheckResult(RUNTIME_STEP, True, detail)


# --- Steps 4-5: TensorFlow, in the child process --------------------------


def initialize_tpu_system(tpu_name: str) -> Dict[str, Any]:
  """Step 4: initialises the TPU system from a TF1 session; its topology."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_name)
  config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
  cluster_spec = resolver.cluster_spec()
  if cluster_spec and cluster_spec.as_dict():
    config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())
  with tf.Graph().as_default():
    initialize = tf.compat.v1.tpu.initialize_system()
    shutdown = tf.compat.v1.tpu.shutdown_system()
    with tf.compat.v1.Session(resolver.master(), config=config) as session:
      serialized = session.run(initialize)
      session.run(shutdown)
  topology = tf.tpu.experimental.Topology(serialized=serialized)
  return {
      'master': resolver.master(),
      'mesh_shape': [int(d) for d in topology.mesh_shape],
      'hosts': int(topology.num_tasks),
      'devices_per_host': int(topology.num_tpus_per_task),
      'devices': int(topology.num_tasks * topology.num_tpus_per_task),
  }


def round_trip(work_dir: str, use_tpu: bool = True,
               tpu_name: Optional[str] = None,
               timings: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
  """Step 5: train, evaluate, predict and export through the trainer's code.

  Args:
    work_dir: an empty directory for checkpoints and the exported model.
    use_tpu: train on the TPU (False: the same path on CPU, as tests run it).
    tpu_name: the TPU to resolve (default `local`, a TPU VM's own).
    timings: filled with the seconds of each phase.

  Returns:
    The final evaluation metrics, the predictions' count and the tag sets
    of the exported SavedModel.

  Raises:
    TPUCheckError: when the export lacks `{serve}` or `{serve, tpu}`.
  """
  # pylint: disable=g-import-not-at-top
  import itertools
  from tfx_tpu_trainer import config as config_lib
  from tfx_tpu_trainer import prepare
  from tfx_tpu_trainer import user_module as user_module_lib
  from tfx_tpu_trainer.publishing import export
  from tfx_tpu_trainer.training import estimator_builder
  from tfx_tpu_trainer.training import schedule
  # pylint: enable=g-import-not-at-top
  timings = {} if timings is None else timings
  custom_config = {
      'use_tpu': use_tpu,
      'train_batch_size': ROUND_TRIP_BATCH_SIZE,
      'eval_batch_size': ROUND_TRIP_BATCH_SIZE,
      'predict_batch_size': ROUND_TRIP_BATCH_SIZE,
      'iterations_per_loop': 10,
      'eval_strategy': 'alternate',
  }
  if use_tpu:
    custom_config['tpu'] = config_lib.tpu_entry(tpu_name or 'local')
  started = time.monotonic()
  config = config_lib.TrainerConfig.from_custom_config(custom_config,
                                                       environ={})
  module = user_module_lib.load_user_module({'module_path': PROBE_MODULE})
  run = prepare.prepare_run(config, module, schemas=None,
                            model_dir=os.path.join(work_dir, 'model_run'))
  train_input_fn = run.input_fn([], None, training=True, repeat=True,
                                cache='none')
  eval_input_fn = run.input_fn([], None, training=False, repeat=True,
                               cache='none')
  run_config = estimator_builder.build_run_config(
      config, os.path.join(work_dir, 'model_run'))
  estimator = estimator_builder.build_estimator(run.model_fn, config,
                                                run_config, run.params)
  timings['build'] = time.monotonic() - started
  started = time.monotonic()
  metrics = schedule.train_and_evaluate(
      estimator, config, train_input_fn, eval_input_fn,
      ROUND_TRIP_TRAIN_STEPS, ROUND_TRIP_EVAL_STEPS)
  timings['train and evaluate'] = time.monotonic() - started
  started = time.monotonic()
  batches = list(itertools.islice(
      estimator.predict(eval_input_fn, yield_single_examples=False), 2))
  timings['predict'] = time.monotonic() - started
  started = time.monotonic()
  model_dir = export.export_serving_model(
      estimator, run.serving_input_receiver_fn,
      os.path.join(work_dir, 'serving_model'))
  tag_sets = export.saved_model_tag_sets(model_dir)
  timings['export'] = time.monotonic() - started
  missing = [t for t in _EXPECTED_TAG_SETS if t not in tag_sets]
  if missing:
    raise TPUCheckError(
        f'the exported model at {model_dir} has tag sets {tag_sets}, '
        f'lacking {missing}.')
  return {
      'metrics': {k: float(v) for k, v in (metrics or {}).items()},
      'predicted_examples': sum(len(b['prediction']) for b in batches),
      'tag_sets': [list(t) for t in tag_sets],
  }


def inference_check(work_dir: str, use_tpu: bool = True,
                    tpu_name: Optional[str] = None,
                    timings: Optional[Dict[str, float]] = None
                    ) -> Dict[str, Any]:
  """Step 6: the round trip's export scored as the TPUBulkInferrer scores.

  The `{serve, tpu}` graph is loaded into a session on the TPU after
  `initialize_system` (off a TPU, `{serve}`), and INFERENCE_EXAMPLES
  examples go through the inferrer's model handler in fixed batches of
  ROUND_TRIP_BATCH_SIZE, the last one padded.

  Args:
    work_dir: the round trip's directory (its `serving_model`).
    use_tpu: the TPU graph on the TPU (False: `{serve}` on CPU, as tests run).
    tpu_name: the TPU to resolve (default `local`).
    timings: filled with the seconds of loading, the first batch (XLA's
      compile on a TPU) and the rest.

  Returns:
    The tag set, batch size, examples scored, examples/s after the first
    batch, and the TPU the session saw.

  Raises:
    TPUCheckError: when the scores are not the model's (y = x . w + b).
  """
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  from tfx_bsl.public.proto import model_spec_pb2
  from tfx_tpu_trainer import config as config_lib
  from tfx_tpu_trainer.bulk_inferrer import inference_config
  from tfx_tpu_trainer.bulk_inferrer import model_checks
  from tfx_tpu_trainer.bulk_inferrer import model_handler
  from tfx_tpu_trainer.tpu import check_module
  # pylint: enable=g-import-not-at-top
  timings = {} if timings is None else timings
  config = inference_config.InferenceConfig(
      use_tpu=use_tpu, tpu=config_lib.TPUSpec(name=tpu_name or 'local'),
      batch_size=ROUND_TRIP_BATCH_SIZE)
  spec = model_spec_pb2.InferenceSpecType()
  spec.saved_model_spec.model_path = os.path.join(work_dir, 'serving_model')
  spec.saved_model_spec.tag.extend(model_checks.default_tags(config))
  started = time.monotonic()
  model_checks.check_model(spec, config)
  handler = model_handler.create_model_handler(spec, config)
  model = handler.load_model()
  timings['load'] = time.monotonic() - started
  features = np.random.default_rng(4).uniform(
      size=(INFERENCE_EXAMPLES, len(check_module.WEIGHTS))).astype(np.float32)
  examples = [tf.train.Example(features=tf.train.Features(feature={
      check_module.FEATURE_KEY: tf.train.Feature(
          float_list=tf.train.FloatList(value=row))})) for row in features]
  try:
    started = time.monotonic()
    first = handler.run_inference(examples[:ROUND_TRIP_BATCH_SIZE], model)
    timings['first batch'] = time.monotonic() - started
    started = time.monotonic()
    rest = handler.run_inference(examples[ROUND_TRIP_BATCH_SIZE:], model)
    timings['other batches'] = time.monotonic() - started
    described = model.describe()
  finally:
    model.close()
  logs = list(first) + list(rest)
  scores = np.array([log.predict_log.response.outputs['prediction']
                     .float_val[0] for log in logs])
  if len(logs) != INFERENCE_EXAMPLES or not np.all(np.isfinite(scores)):
    raise TPUCheckError(
        f'the inference check got {len(logs)} finite scores for '
        f'{INFERENCE_EXAMPLES} examples.')
  rest_count = INFERENCE_EXAMPLES - ROUND_TRIP_BATCH_SIZE
  return {
      'tags': described['tags'],
      'batch_size': ROUND_TRIP_BATCH_SIZE,
      'examples': len(logs),
      'examples_per_second': rest_count / max(timings['other batches'], 1e-9),
      'tpu_devices': described.get('devices'),
  }


_ADVICE = {
    SYSTEM_STEP: (
        'the TPU runtime could not start: check that the runtime matches the '
        'generation (v5e/v5p need PJRT; see docs/guide/tpu_slices.md, "TPU '
        'runtimes"), that no other process holds the TPU, and that libtpu '
        'matches TensorFlow (1.9.0 for 2.15)'),
    ROUND_TRIP_STEP: (
        'the TPU starts but TPUEstimator does not run on it with this runtime: '
        'on v4 use the StreamExecutor runtime (tpu-se); see '
        f'{runtimes.ISSUE_90807} and docs/guide/tpu_slices.md, "TPU runtimes"'),
    INFERENCE_STEP: (
        'training runs but the TPUBulkInferrer cannot score on this TPU: '
        'score with custom_config use_tpu=false (the {serve} graph on CPU) '
        'and see docs/guide/batch_inference.md'),
}


def _child_main(work_dir: str, tpu_name: str) -> int:
  """Runs steps 4 to 6, one JSON line per start and end (stdout)."""

  def emit(**fields):
    print(json.dumps(fields), flush=True)

  steps = (
      (SYSTEM_STEP, lambda timings: initialize_tpu_system(tpu_name)),
      (ROUND_TRIP_STEP, lambda timings: round_trip(
          work_dir, use_tpu=True, tpu_name=tpu_name, timings=timings)),
      (INFERENCE_STEP, lambda timings: inference_check(
          work_dir, use_tpu=True, tpu_name=tpu_name, timings=timings)),
  )
  for step, run in steps:
    emit(event='start', step=step)
    started = time.monotonic()
    timings: Dict[str, float] = {}
    try:
      result = run(timings)
    except Exception as e:  # pylint: disable=broad-except
      emit(event='end', step=step, ok=False,
           detail=f'{type(e).__name__}: {str(e).splitlines()[0][:500]}',
           seconds=time.monotonic() - started)
      return 1
    emit(event='end', step=step, ok=True, result=result, timings=timings,
         seconds=time.monotonic() - started)
  return 0


def run_steps_in_process(tpu_name: str) -> List[CheckResult]:
  """Steps 4 to 6 in this process, stopping at the first that fails."""
  results = []
  with tempfile.TemporaryDirectory(prefix='tpu-check-') as work_dir:
    steps = (
        (SYSTEM_STEP, lambda timings: initialize_tpu_system(tpu_name)),
        (ROUND_TRIP_STEP, lambda timings: round_trip(
            work_dir, use_tpu=True, tpu_name=tpu_name, timings=timings)),
        (INFERENCE_STEP, lambda timings: inference_check(
            work_dir, use_tpu=True, tpu_name=tpu_name, timings=timings)),
    )
    for step, run in steps:
      started = time.monotonic()
      timings: Dict[str, float] = {}
      try:
        event = {'ok': True, 'result': run(timings), 'timings': timings}
      except Exception as e:  # pylint: disable=broad-except
        event = {'ok': False,
                 'detail': f'{type(e).__name__}: {str(e).splitlines()[0][:500]}'
                           if str(e) else type(e).__name__}
      event['seconds'] = time.monotonic() - started
      results.append(_describe_child_result(step, event))
      if not event['ok']:
        break
  return results


def _describe_child_result(step: str, event: Dict[str, Any]) -> CheckResult:
  if not event.get('ok'):
    return CheckResult(step, False, event.get('detail', ''),
                       event.get('seconds', 0.0), _ADVICE[step])
  result = event.get('result') or {}
  if step == INFERENCE_STEP:
    timings = event.get('timings') or {}
    detail = (f'{result.get("examples")} examples in batches of '
              f'{result.get("batch_size")} (the last padded) through the '
              f'{{{", ".join(result.get("tags") or [])}}} graph: ' +
              ', '.join(f'{k} {v:.2f} s' for k, v in timings.items()) +
              f'; {result.get("examples_per_second", 0):.0f} examples/s '
              'after the first batch')
    return CheckResult(step, True, detail, event.get('seconds', 0.0))
  if step == SYSTEM_STEP:
    mesh = 'x'.join(map(str, result.get('mesh_shape', [])))
    detail = (f'initialised from a TF1 session on {result.get("master")!r}: '
              f'{result.get("devices")} TPU devices, {result.get("hosts")} '
              f'host(s), mesh {mesh}')
  else:
    timings = event.get('timings') or {}
    detail = ('train+eval+predict+export: ' + ', '.join(
        f'{k} {v:.1f} s' for k, v in timings.items()) +
              f'; metrics {result.get("metrics")}; '
              f'{result.get("predicted_examples")} predictions; tag sets '
              f'{result.get("tag_sets")}')
  return CheckResult(step, True, detail, event.get('seconds', 0.0))


def run_child_steps(tpu_name: str, timeout_secs: float,
                    python: str = sys.executable) -> List[CheckResult]:
  """Steps 4 to 6 in a child process; a crash or hang names its step."""
  with tempfile.TemporaryDirectory(prefix='tpu-check-') as work_dir:
    process = subprocess.Popen(
        [python, '-m', __name__, '--child', work_dir, tpu_name],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
      stdout, stderr = process.communicate(timeout=timeout_secs)
      timed_out = False
    except subprocess.TimeoutExpired:
      process.kill()
      stdout, stderr = process.communicate()
      timed_out = True
  results, current = [], None
  for line in stdout.splitlines():
    try:
      event = json.loads(line)
    except ValueError:
      continue
    if not isinstance(event, dict):
      continue
    if event.get('event') == 'start':
      current = event.get('step')
    elif event.get('event') == 'end' and event.get('step') in CHILD_STEPS:
      results.append(_describe_child_result(event['step'], event))
      current = None
  if current is not None:
    if timed_out:
      why = f'did not finish in {timeout_secs:.0f} s (killed)'
    else:
      why = _exit_description(process.returncode)
    tail = ' | '.join(stderr.strip().splitlines()[-3:])
    results.append(CheckResult(
        current, False, why + (f'; last output: {tail[:400]}' if tail else ''),
        advice=_ADVICE[current]))
  elif not results or (results[-1].ok and len(results) < len(CHILD_STEPS)):
    tail = ' | '.join(stderr.strip().splitlines()[-3:])
    results.append(CheckResult(
        SYSTEM_STEP, False,
        f'the check process ended ({_exit_description(process.returncode)}) '
        f'before reporting: {tail[:400]}', advice=IN_THE_TPU_IMAGE))
  return results


def _exit_description(returncode: int) -> str:
  if returncode is not None and returncode < 0:
    import signal  # pylint: disable=g-import-not-at-top
    try:
      name = signal.Signals(-returncode).name
    except ValueError:
      name = f'signal {-returncode}'
    return f'the process died of {name}'
  return f'the process exited with status {returncode}'


def run_checks(environ: Optional[Mapping[str, str]] = None,
               dev_dir: str = '/dev',
               pci_dir: str = PCI_DEVICES_DIR,
               timeout_secs: float = DEFAULT_TIMEOUT_SECS,
               report: Optional[Callable[[CheckResult], None]] = None
               ) -> List[CheckResult]:
  """Runs the checks in order, stopping at the first that fails.

  Args:
    environ: the environment (default `os.environ`).
    dev_dir: where device files are (tests point it elsewhere).
    pci_dir: where the PCI devices are listed (likewise).
    timeout_secs: how long steps 4 to 6 may take together.
    report: called with each result as it comes.

  Returns:
    The results, the last one failed unless all passed.
  """
  environ = os.environ if environ is None else environ
  report = report or (lambda result: None)
  results = []
  for check in (check_tpu_present, check_libtpu, check_runtime):
    started = time.monotonic()
    result = (check(environ, dev_dir, pci_dir) if check is check_tpu_present
              else check(environ))
    result = dataclasses.replace(result, seconds=time.monotonic() - started)
    results.append(result)
    report(result)
    if not result.ok:
      return results
  tpu_name = next((environ[k] for k in TPU_NAME_ENVS if environ.get(k)),
                  'local')
  in_process = 'tensorflow' in sys.modules  # See the module docstring.
  for result in (run_steps_in_process(tpu_name) if in_process else
                 run_child_steps(tpu_name, timeout_secs)):
    results.append(result)
    report(result)
  return results


if __name__ == '__main__':
  if len(sys.argv) == 4 and sys.argv[1] == '--child':
    sys.exit(_child_main(sys.argv[2], sys.argv[3]))
  sys.exit(f'usage: python -m {__name__} --child WORK_DIR TPU_NAME')
