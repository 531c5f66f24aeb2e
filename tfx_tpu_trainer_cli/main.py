"""The `tfx-tpu-trainer` command: run, compile and preflight.

Subcommands:
  run        the taxi pipeline on the local runner (the README's main job).
  compile    the taxi pipeline for Kubeflow Pipelines (v1 and v2).
  preflight  checks on CPU that a trainer module is TPU-ready.
  tpu-check  checks that this machine's TPU runs the trainer.
"""

import argparse
import os
import sys
from typing import List, Optional

# TensorFlow's C++ start-up chatter hides the progress lines; set before any
# subcommand module imports TensorFlow.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top,wrong-import-position
from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import compile as compile_command
from tfx_tpu_trainer_cli import preflight as preflight_command
from tfx_tpu_trainer_cli import run as run_command
from tfx_tpu_trainer_cli import tpu_check as tpu_check_command
# pylint: enable=g-import-not-at-top,wrong-import-position

_SUBCOMMANDS = (run_command, compile_command, preflight_command,
                tpu_check_command)


def build_parser() -> argparse.ArgumentParser:
  """The argument parser of every subcommand."""
  parser = argparse.ArgumentParser(
      prog='tfx-tpu-trainer',
      description='TPUTrainer for TFX: run the bundled pipelines.')
  subparsers = parser.add_subparsers(dest='command', required=True)
  for subcommand in _SUBCOMMANDS:
    subcommand.add_parser(subparsers)
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  """Entry point of the `tfx-tpu-trainer` console script."""
  parser = build_parser()
  args = parser.parse_args(argv)
  try:
    return args.handler(args)
  except common.UsageError as e:
    print(f'tfx-tpu-trainer {args.command}: error: {e}', file=sys.stderr)
    return common.EXIT_USAGE


if __name__ == '__main__':
  sys.exit(main())
