"""What every subcommand shares: the usage error, its exit code, argument types."""

import argparse

EXIT_USAGE = 2


class UsageError(Exception):
  """A command-line argument is invalid; nothing has been written."""


def positive_int(text: str) -> int:
  """argparse type: a positive integer."""
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not an integer') from None
  if value <= 0:
    raise argparse.ArgumentTypeError(f'must be a positive integer, got {value}')
  return value


def non_negative_int(text: str) -> int:
  """argparse type: an integer >= 0."""
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not an integer') from None
  if value < 0:
    raise argparse.ArgumentTypeError(f'must be an integer >= 0, got {value}')
  return value
