"""The `tfx-tpu-trainer` command: run, compile, preflight and tpu-check."""

import argparse
import atexit
import os
import sys
import threading
from typing import List, Optional

# TensorFlow's C++ start-up chatter hides the progress lines; set before any
# subcommand module imports TensorFlow.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top,wrong-import-position
from tfx_tpu_trainer import version
from tfx_tpu_trainer.publishing import secrets
from tfx_tpu_trainer.training import leftover_threads
from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import compile as compile_command
from tfx_tpu_trainer_cli import preflight as preflight_command
from tfx_tpu_trainer_cli import quiet_start
from tfx_tpu_trainer_cli import run as run_command
from tfx_tpu_trainer_cli import tpu_check as tpu_check_command
# pylint: enable=g-import-not-at-top,wrong-import-position

__all__ = ['build_parser', 'main']

_SUBCOMMANDS = (run_command, compile_command, preflight_command,
                tpu_check_command)
# Subcommands that import user code (a module file, a pipeline file) in this
# process: a non-daemon thread it leaves would keep the finished command
# from exiting.
_USER_CODE_IN_PROCESS = ('compile', 'preflight')


def build_parser() -> argparse.ArgumentParser:
  """The argument parser of every subcommand."""
  parser = common.CliParser(
      prog='tfx-tpu-trainer',
      description='TPUTrainer for TFX: run and compile the bundled pipeline '
      'or your own.')
  parser.add_argument('--version', action='version',
                      version=f'%(prog)s {version.__version__}')
  # Every subcommand's parser is a CliParser too: no prefix matching.
  subparsers = parser.add_subparsers(dest='command', required=True)
  for subcommand in _SUBCOMMANDS:
    subcommand.add_parser(subparsers)
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  """Entry point of the `tfx-tpu-trainer` console script.

  Args:
    argv: the arguments; None: the program's own (`sys.argv`).

  Returns:
    The exit status.
  """
  code = _main(argv)
  if argv is None:
    _end_process(code)
  return code


def _end_process(code: int) -> None:
  """Ends the program now that its work and its output are done.

  Python's own exit would then collect and tear down the ~1M objects
  TensorFlow, TFX and Beam made: 2-5 s of silence after the summary
  (docs/guide/performance.md, "The first and last seconds of a command").
  The exit handlers still run (the module check server's, logging's
  flush); only that teardown is skipped.
  """
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


def _main(argv: Optional[List[str]]) -> int:
  """`main`: parses, runs the subcommand, reports its usage errors."""
  quiet_start.install()
  # Secrets (by option name and value pattern) masked in every log record.
  secrets.mask_logs(uncaught=True)
  parser = build_parser()
  argv = sys.argv[1:] if argv is None else list(argv)
  _refuse_unknown_options(parser, argv)
  args, extras = parser.parse_known_args(argv)
  if extras:
    # The subcommand's usage, with a "did you mean" (exits with status 2).
    _subcommand_parser(parser, args.command).unrecognized(extras)
  # Threads running before the command are not its (tests run it in-process).
  existing = threading.enumerate()
  try:
    code = _handle(args, existing)
  except common.UsageError as e:
    print(f'tfx-tpu-trainer {args.command}: error: '
          f'{secrets.mask_text(str(e))}', file=sys.stderr)
    code = common.EXIT_USAGE
  except common.Interrupted as e:
    print(f'tfx-tpu-trainer {args.command}: interrupted: {e}',
          file=sys.stderr)
    return common.EXIT_INTERRUPTED
  except KeyboardInterrupt:
    print(f'tfx-tpu-trainer {args.command}: interrupted (KeyboardInterrupt).',
          file=sys.stderr)
    return common.EXIT_INTERRUPTED
  if args.command in _USER_CODE_IN_PROCESS:
    # `run` does this itself, before its summary's last word.
    leftover_threads.end_process_if_threads_left(
        code, f'tfx-tpu-trainer {args.command}', existing=existing)
  return code


def _handle(args, existing) -> int:
  """The subcommand's handler; a failure also ends threads user code left."""
  try:
    return args.handler(args)
  except (common.UsageError, common.Interrupted, KeyboardInterrupt):
    raise
  except BaseException as e:  # pylint: disable=broad-except
    if (args.command in _USER_CODE_IN_PROCESS and
        leftover_threads.non_daemon_threads(existing)):
      # The process may end before Python prints it.
      sys.stderr.write(secrets.masked_exception(e))
      leftover_threads.end_process_if_threads_left(
          1, f'tfx-tpu-trainer {args.command} (failed)', existing=existing)
    raise


def _refuse_unknown_options(parser: argparse.ArgumentParser,
                            argv: List[str]) -> None:
  """An unknown `--option` of a subcommand: its usage and a "did you mean".

  Checked before argparse parses, so the unknown option is reported, not a
  required option it was meant to be.
  """
  commands = [i for i, a in enumerate(argv)
              if a in _subcommand_names(parser)]
  if not commands:
    return
  subparser = _subcommand_parser(parser, argv[commands[0]])
  known = set(subparser.long_options())
  rest = argv[commands[0] + 1:]
  if '--' in rest:
    rest = rest[:rest.index('--')]
  _refuse_values_taken_for_options(subparser, rest)
  unknown = [a for a in rest
             if a.startswith('--') and a.split('=', 1)[0] not in known]
  if unknown:
    subparser.unrecognized(unknown)


def _refuse_values_taken_for_options(subparser: common.CliParser,
                                     rest: List[str]) -> None:
  """`--beam-arg --runner=X`: a value that starts with '-' needs '='.

  argparse reads `--runner=X` as an option of its own; say what to write.
  """
  taking = set(subparser.options_taking_a_value())
  for option, value in zip(rest, rest[1:]):
    if (option in taking and value.startswith('-') and
        not subparser._negative_number_matcher.match(value)):  # pylint: disable=protected-access
      subparser.error(
          f'argument {option}: expected one argument, got the option-like '
          f'{value!r}; a value that starts with "-" goes after "=": write '
          f'{option}={value}.')


def _subcommand_names(parser: argparse.ArgumentParser) -> List[str]:
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      return list(action.choices)
  return []


def _subcommand_parser(parser: argparse.ArgumentParser,
                       command: str) -> common.CliParser:
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      return action.choices[command]
  raise KeyError(command)


if __name__ == '__main__':
  sys.exit(main())
