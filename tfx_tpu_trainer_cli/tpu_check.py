"""`tfx-tpu-trainer tpu-check`: does this machine's TPU run the trainer?"""

import sys

from tfx_tpu_trainer_cli import common

EXIT_FAILED = 1


def add_parser(subparsers) -> None:
  """Defines `tfx-tpu-trainer tpu-check`."""
  from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top
  parser = subparsers.add_parser(
      'tpu-check', help='Check that this machine\'s TPU runs the trainer.',
      description=(
          'Checks, each timed: a TPU attached or named; libtpu and its '
          'version; the TPU runtime (StreamExecutor or PJRT) against the '
          'generation; the TPU system initialising from a TF1 session (chips '
          'and topology); a tiny TPUEstimator train, evaluate, predict and '
          'dual-tag export through the trainer\'s own code. With --workers '
          '(or TPU_WORKER_HOSTNAMES naming several hosts): a multi-host '
          'slice\'s workers, from here. In the driver pod of a compiled '
          'multi-host step (TFX_TPU_TRAINER_WORKER_GROUP set): what the '
          'driver needs from Kubernetes (its own pod, the Role\'s verbs, the '
          'worker image). Exits 0 only when all pass.'))
  parser.add_argument(
      '--timeout', type=common.positive_int,
      default=tpu_check.DEFAULT_TIMEOUT_SECS, metavar='SECONDS',
      help='How long the TPU system start and the round trip may take '
      'together; with --workers, how long to wait for every worker to '
      f'answer (default: {tpu_check.DEFAULT_TIMEOUT_SECS}).')
  parser.add_argument(
      '--workers', default=None, metavar='HOST[:PORT],...',
      help='a multi-host slice: check from here that every host\'s worker '
      '(python -m tfx_tpu_trainer.tpu.worker) answers, lists its TPU and '
      'the TPU system initialises across them; a name that does not resolve '
      'fails at once, the others are waited for up to --timeout (default: '
      'TPU_WORKER_HOSTNAMES when it names several hosts).')
  parser.set_defaults(handler=_tpu_check)


def _slice_workers(args):
  """The slice's worker addresses, or () for this machine's TPU."""
  import os  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  where, text = '--workers', args.workers
  if text is None:
    where = config_lib.TPU_WORKER_HOSTNAMES_ENV
    text = os.environ.get(where, '')
    if not text.strip():
      return ()
  try:
    addresses = config_lib.worker_addresses(
        [h for h in text.split(',') if h.strip()] or [''], where)
  except config_lib.ConfigError as e:
    raise common.UsageError(str(e)) from e
  # One host in TPU_WORKER_HOSTNAMES is this machine's TPU.
  return addresses if args.workers is not None or len(addresses) > 1 else ()


def _print(line: str) -> None:
  print(f'tpu-check: {line}', flush=True)


def _slice_check(addresses, timeout) -> int:
  """Checks every host of a slice from here."""
  from tfx_tpu_trainer.tpu import slice_check  # pylint: disable=g-import-not-at-top
  try:
    lines = slice_check.check_slice(addresses, timeout, report=_print,
                                    wait_set_by='--timeout')
  except slice_check.SliceCheckError as e:
    print(f'tfx-tpu-trainer tpu-check: {e}', file=sys.stderr)
    return EXIT_FAILED
  for line in lines:
    _print(line)
  return 0


def _driver_pod_check() -> int:
  """In a compiled multi-host step's pod: what the driver needs."""
  from tfx_tpu_trainer.tpu import driver_pod_check  # pylint: disable=g-import-not-at-top
  _print('the driver pod of a multi-host slice (TFX_TPU_TRAINER_WORKER_GROUP '
         'is set): checking what it needs from Kubernetes.')
  try:
    driver_pod_check.check_driver_pod(_print)
  except driver_pod_check.DriverPodCheckError as e:
    print(f'tfx-tpu-trainer tpu-check: FAILED  {e}', file=sys.stderr)
    return EXIT_FAILED
  _print('the driver pod can create its worker group.')
  return 0


def _tpu_check(args) -> int:
  """Runs the checks, printing each result as it comes."""
  import os  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top
  addresses = _slice_workers(args)
  if addresses:
    return _slice_check(addresses, args.timeout)
  if os.environ.get(config_lib.WORKER_GROUP_ENV):
    return _driver_pod_check()

  def report(result):
    if result.ok:
      _print(result.line())

  results = tpu_check.run_checks(timeout_secs=args.timeout, report=report)
  failed = [r for r in results if not r.ok]
  if failed:
    print(f'tfx-tpu-trainer tpu-check: {failed[0].line()}', file=sys.stderr)
    return EXIT_FAILED
  total = sum(r.seconds for r in results)
  print(f'tpu-check: all {len(results)} checks passed in {total:.1f} s.')
  return 0
