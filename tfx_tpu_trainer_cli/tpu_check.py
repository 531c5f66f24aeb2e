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
          'dual-tag export through the trainer\'s own code. Exits 0 only when '
          'all pass.'))
  parser.add_argument(
      '--timeout', type=common.positive_int,
      default=tpu_check.DEFAULT_TIMEOUT_SECS, metavar='SECONDS',
      help='How long the TPU system start and the round trip may take '
      f'together (default: {tpu_check.DEFAULT_TIMEOUT_SECS}).')
  parser.set_defaults(handler=_tpu_check)


def _tpu_check(args) -> int:
  """Runs the checks, printing each result as it comes."""
  from tfx_tpu_trainer.tpu import check as tpu_check  # pylint: disable=g-import-not-at-top

  def report(result):
    if result.ok:
      print(f'tpu-check: {result.line()}', flush=True)

  results = tpu_check.run_checks(timeout_secs=args.timeout, report=report)
  failed = [r for r in results if not r.ok]
  if failed:
    print(f'tfx-tpu-trainer tpu-check: {failed[0].line()}', file=sys.stderr)
    return EXIT_FAILED
  total = sum(r.seconds for r in results)
  print(f'tpu-check: all {len(results)} checks passed in {total:.1f} s.')
  return 0
