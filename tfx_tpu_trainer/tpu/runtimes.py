"""TensorFlow 2.15's TPU runtimes per generation, and what sources say."""

import dataclasses
from typing import Dict, Optional, Tuple

from tfx_tpu_trainer import errors

__all__ = ['RUNTIMES', 'RUNTIME_ENV', 'ACCELERATOR_ENV', 'IMAGE_RUNTIME_FIELD',
           'STEP_ENV_NAMES', 'TPURuntimeError', 'DEFAULT_ACCELERATOR',
           'DEFAULT_ACCELERATOR_REASON', 'RuntimeChoice', 'choose']

SE = 'se'
PJRT = 'pjrt'
RUNTIMES = (SE, PJRT)

# Where the Dockerfile's TPU images put libtpu (Google's instructions).
LIBTPU_PATH = '/lib/libtpu.so'
# PJRT's switch: libtpu as TensorFlow's pluggable device.
PJRT_ENV = {'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'true',
            'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': LIBTPU_PATH}
# What the compiled trainer step (and the TPU images) declare, for
# `tpu-check` to compare with what the process really runs.
RUNTIME_ENV = 'TFX_TPU_TRAINER_TPU_RUNTIME'
ACCELERATOR_ENV = 'TFX_TPU_TRAINER_ACCELERATOR'
LIBTPU_VERSION_ENV = 'TFX_TPU_TRAINER_LIBTPU_VERSION'
# In a trainer image name, replaced by the chosen runtime (se, pjrt).
IMAGE_RUNTIME_FIELD = '{runtime}'
# Every variable a compiled TPU step may carry from here.
STEP_ENV_NAMES = (RUNTIME_ENV, ACCELERATOR_ENV) + tuple(PJRT_ENV)

# The sources cited by the matrix.
SOURCE_RUNTIMES = 'https://cloud.google.com/tpu/docs/runtimes'
ISSUE_90807 = 'https://github.com/tensorflow/tensorflow/issues/90807'


class TPURuntimeError(errors.TPUTrainerError, ValueError):
  """A TPU generation or runtime that TensorFlow 2.15 does not support."""


@dataclasses.dataclass(frozen=True)
class Generation:
  """One TPU generation: its runtimes and what is known of TPUEstimator on it.

  Attributes:
    name: v4, v5e, v5p, v6e.
    accelerators: its GKE `gke-tpu-accelerator` label values.
    runtimes: the TF 2.15 runtimes Google documents for it, default first.
    estimator: what the sources say of TPUEstimator on it (one line).
    verified: what this project has verified there (nothing has run on a
      TPU yet).
    broken: runtime -> the report of that combination failing.
  """
  name: str
  accelerators: Tuple[str, ...]
  runtimes: Tuple[str, ...]
  estimator: str
  verified: str = 'not run on this generation'
  broken: Tuple[Tuple[str, str], ...] = ()

  @property
  def default_runtime(self) -> str:
    return self.runtimes[0]


_PJRT_ESTIMATOR_REPORT = (
    f'{ISSUE_90807} (open): tf.estimator with TF 2.15.0 + libtpu 1.9.0 under '
    'the PJRT variables fails on GKE TPU v5p ("No TPU platform registered", '
    'then a segfault); the same code works on TPU v3')

GENERATIONS: Dict[str, Generation] = {g.name: g for g in (
    Generation(
        name='v4',
        accelerators=('tpu-v4-podslice',),
        runtimes=(SE, PJRT),
        estimator=('StreamExecutor (the only runtime before TF 2.15): no '
                   'failure reported. PJRT: no report found either way'),
        broken=((PJRT, 'the PJRT path of ' + _PJRT_ESTIMATOR_REPORT),)),
    Generation(
        name='v5e',
        accelerators=('tpu-v5-lite-podslice', 'tpu-v5-lite-device'),
        runtimes=(PJRT,),
        estimator=('PJRT only (Google); no report of TPUEstimator working '
                   'found, and the PJRT path fails on v5p'),
        broken=((PJRT, 'the same PJRT path as ' + _PJRT_ESTIMATOR_REPORT),)),
    Generation(
        name='v5p',
        accelerators=('tpu-v5p-slice',),
        runtimes=(PJRT,),
        estimator='PJRT only (Google); reported broken for tf.estimator',
        broken=((PJRT, _PJRT_ESTIMATOR_REPORT),)),
    Generation(
        name='v6e',
        accelerators=('tpu-v6e-slice',),
        runtimes=(PJRT,),
        estimator=('PJRT only (Google lists TensorFlow 2.15.0 and later for '
                   'v6e TPU VMs; its Vertex AI page says TensorFlow is not '
                   'supported for training on Vertex AI from v6e, which '
                   'concerns Vertex AI jobs, not GKE); no report of '
                   'TPUEstimator on v6e found, and the PJRT path fails on '
                   'v5p'),
        broken=((PJRT, 'the same PJRT path as ' + _PJRT_ESTIMATOR_REPORT),)),
)}

# The default accelerator and why (docs/guide/tpu_slices.md repeats it).
DEFAULT_ACCELERATOR = 'tpu-v4-podslice'
DEFAULT_ACCELERATOR_REASON = (
    'v4 is the newest generation on which TensorFlow 2.15 runs the '
    'StreamExecutor runtime, the only one before TF 2.15 and so the one '
    'TPUEstimator was developed on; v5e, v5p and v6e need PJRT, under which '
    f'tf.estimator is reported broken ({ISSUE_90807}).')


def generation(accelerator: str) -> Generation:
  """The generation of a GKE TPU accelerator.

  Raises:
    TPURuntimeError: for an accelerator of no known generation.
  """
  for gen in GENERATIONS.values():
    if accelerator in gen.accelerators:
      return gen
  known = sorted(a for g in GENERATIONS.values() for a in g.accelerators)
  raise TPURuntimeError(
      f'accelerator {accelerator!r} has no known TPU generation; accepted '
      f'values: {", ".join(known)}.')


@dataclasses.dataclass(frozen=True)
class RuntimeChoice:
  """The runtime the trainer step runs for one accelerator."""
  accelerator: str
  generation: str
  runtime: str
  warnings: Tuple[str, ...] = ()

  @property
  def env(self) -> Dict[str, str]:
    """The step environment: PJRT's switch, and what tpu-check compares."""
    env = dict(PJRT_ENV) if self.runtime == PJRT else {}
    env[RUNTIME_ENV] = self.runtime
    env[ACCELERATOR_ENV] = self.accelerator
    return env

  @property
  def image_target(self) -> str:
    """The Dockerfile target built for this runtime."""
    return f'tpu-{self.runtime}'

  def image_name(self, template: str) -> str:
    """`template` with `IMAGE_RUNTIME_FIELD` replaced by the runtime."""
    return template.replace(IMAGE_RUNTIME_FIELD, self.runtime)

  def describe(self) -> str:
    return (f'{self.runtime} (TPU {self.generation}, Dockerfile target '
            f'{self.image_target}; env ' + ', '.join(
                f'{k}={v}' for k, v in self.env.items()) + ')')


def choose(accelerator: str, runtime: Optional[str] = None) -> RuntimeChoice:
  """The runtime for `accelerator`: as asked, else the generation's default.

  Args:
    accelerator: a GKE TPU accelerator (`cloud.google.com/gke-tpu-accelerator`).
    runtime: `se` or `pjrt`, or None for the generation's default.

  Returns:
    The choice, with a warning per source that reports it broken.

  Raises:
    TPURuntimeError: for an unknown accelerator, or a runtime Google does not
      document for its generation (naming the source).
  """
  gen = generation(accelerator)
  if runtime is None:
    runtime = gen.default_runtime
  if runtime not in RUNTIMES:
    raise TPURuntimeError(
        f'tpu-runtime {runtime!r} is not a TPU runtime; accepted values: '
        f'{", ".join(RUNTIMES)}.')
  if runtime not in gen.runtimes:
    raise TPURuntimeError(
        f'tpu-runtime {runtime} is not supported on TPU {gen.name} '
        f'({accelerator}): TensorFlow 2.15 runs {gen.name} with '
        f'{" or ".join(gen.runtimes)} only ({SOURCE_RUNTIMES}); use '
        f'--tpu-runtime {gen.default_runtime}.')
  warnings = tuple(
      f'TPU {gen.name} with the {runtime} runtime: reported broken: {report}. '
      'Run `tfx-tpu-trainer tpu-check` on such a TPU (or compile with '
      '--tpu-check) before the pipeline.'
      for broken_runtime, report in gen.broken if broken_runtime == runtime)
  return RuntimeChoice(accelerator=accelerator, generation=gen.name,
                       runtime=runtime, warnings=warnings)


def runtime_in_use(environ: Dict[str, str]) -> str:
  """`pjrt` when PJRT's two variables are set as `PJRT_ENV`, else `se`."""
  on = environ.get('NEXT_PLUGGABLE_DEVICE_USE_C_API', '').lower() in (
      'true', '1')
  return PJRT if on and environ.get('TF_PLUGGABLE_DEVICE_LIBRARY_PATH') else SE


def support_matrix_markdown() -> str:
  """The support matrix as docs/guide/tpu_slices.md shows it."""
  lines = ['| TPU | GKE accelerator | TF 2.15 runtimes (default first) | '
           'TPUEstimator: what the sources say | verified here |',
           '|---|---|---|---|---|']
  for gen in GENERATIONS.values():
    lines.append(f'| {gen.name} | {", ".join(gen.accelerators)} | '
                 f'{", ".join(gen.runtimes)} | {gen.estimator} | '
                 f'{gen.verified} |')
  return '\n'.join(lines)
