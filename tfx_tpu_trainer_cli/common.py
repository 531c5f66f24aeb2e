"""What every subcommand shares: the usage error, argument types, the log."""

import argparse
import contextlib
import dataclasses
import difflib
import os
import re
import sys
import textwrap
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ['EXIT_USAGE', 'EXIT_INTERRUPTED', 'UsageError', 'Interrupted',
           'positive_int', 'non_negative_int', 'CliParser', 'did_you_mean',
           'output_to_log', 'absl_info_logged', 'evaluator_options']

EXIT_USAGE = 2
# What a shell reports for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
# What the bundled pipeline's step and batch options set (run, compile).
BUNDLED_FLAG_HELP = {
    '--train-steps': 'Training steps, train_args.num_steps',
    '--eval-steps': 'Steps of each evaluation, eval_args.num_steps',
    '--train-batch-size': 'Global training batch size, custom_config '
                          'train_batch_size',
    '--eval-batch-size': 'Global evaluation batch size, custom_config '
                         'eval_batch_size',
}


class UsageError(Exception):
  """A command-line argument is invalid; nothing has been written."""


class Interrupted(Exception):
  """A KeyboardInterrupt (Ctrl-C, or raised by user code), with its place."""


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
class _HelpFormatter(argparse.HelpFormatter):
  """argparse's help, its lines never broken inside a word at a hyphen.

  (`--beam-arg=--runner=PortableRunner` stays one word, ready to copy.)
  """

  def _split_lines(self, text, width):
    return textwrap.wrap(self._whitespace_matcher.sub(' ', text).strip(),
                         width, break_on_hyphens=False)

  def _fill_text(self, text, width, indent):
    return textwrap.fill(self._whitespace_matcher.sub(' ', text).strip(),
                         width, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False)


class CliParser(argparse.ArgumentParser):
  """An ArgumentParser that never matches an option by its prefix.

  `allow_abbrev` is always False (argparse's default would take
  `--train-step` for `--train-steps` and call `--pipeline` ambiguous), also
  for the subcommand parsers it creates (`add_subparsers` hands them this
  class), an invalid choice gets a "did you mean", and help text is never
  broken at a hyphen.
  """

  def __init__(self, *args, **kwargs):
    kwargs['allow_abbrev'] = False
    kwargs.setdefault('formatter_class', _HelpFormatter)
    super().__init__(*args, **kwargs)

  def add_subparsers(self, **kwargs):
    kwargs.setdefault('parser_class', CliParser)
    return super().add_subparsers(**kwargs)

  def error(self, message):
    from tfx_tpu_trainer.publishing import secrets  # pylint: disable=g-import-not-at-top
    match = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$",
                      message)
    if match:
      choices = re.findall(r"'([^']*)'", match.group(2))
      message += did_you_mean(match.group(1), choices)
    # A refused `--some_token=X` is named, its value never echoed.
    super().error(secrets.mask_text(message))

  def long_options(self) -> List[str]:
    """Every `--option` this parser takes."""
    return [option for action in self._actions  # pylint: disable=protected-access
            for option in action.option_strings if option.startswith('--')]

  def options_taking_a_value(self) -> List[str]:
    """Every `--option` that takes one value (`--beam-arg ARG`)."""
    return [option for action in self._actions  # pylint: disable=protected-access
            if action.nargs is None and not isinstance(
                action, (argparse._StoreConstAction, argparse._HelpAction,  # pylint: disable=protected-access
                         argparse._VersionAction))  # pylint: disable=protected-access
            for option in action.option_strings if option.startswith('--')]

  def unrecognized(self, extras: Sequence[str]) -> None:
    """Exits with this parser's usage, naming the unknown arguments.

    An unknown `--option` that names a TPUTrainer custom_config key says
    where that key is set; one close to a known option gets a "did you
    mean".
    """
    hints = []
    for extra in extras:
      if extra.startswith('--'):
        hint = (_custom_config_hint(extra) or
                did_you_mean(extra.split('=', 1)[0], self.long_options()))
        if hint:
          hints.append(hint.strip())
    self.error(f'unrecognized arguments: {" ".join(extras)}' +
               (' ' + '; '.join(hints) if hints else ''))


def _custom_config_hint(option: str) -> str:
  """` (KEY is ... custom_config ...)` when `option` names a config key."""
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  key = option[2:].split('=', 1)[0].replace('-', '_')
  if key not in {f.name for f in dataclasses.fields(
      config_lib.TrainerConfig)}:
    return ''
  return (f' ({key} is a key of TPUTrainer\'s custom_config, not an option: '
          f'set it in your pipeline, TPUTrainer(custom_config={{{key!r}: '
          '...}), and run or compile that with --pipeline FILE:FUNCTION; '
          'docs/reference/custom_config.md)')


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
  """` (did you mean X?)` for the closest candidate, or ''."""
  matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
  return f' (did you mean {matches[0]}?)' if matches else ''


@contextlib.contextmanager
def output_to_log(log_path: str, enabled: bool = True):
  """Sends file descriptors 1 and 2 (TF, Beam, pip output) to `log_path`.

  Every line reaches the log with its secrets masked (masked_output.py).
  Yields a stream to the original stdout, for progress lines.
  """
  if not enabled:
    yield sys.stdout
    return
  from tfx_tpu_trainer_cli import masked_output  # pylint: disable=g-import-not-at-top
  sys.stdout.flush()
  sys.stderr.flush()
  saved_out, saved_err = os.dup(1), os.dup(2)
  console = os.fdopen(os.dup(saved_out), 'w', buffering=1)
  with open(log_path, 'ab') as log:
    pipe = masked_output.MaskedPipe(log)
    os.dup2(pipe.write_fd, 1)
    os.dup2(pipe.write_fd, 2)
    try:
      yield console
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os.dup2(saved_out, 1)
      os.dup2(saved_err, 2)
      os.close(saved_out)
      os.close(saved_err)
      pipe.close()
      console.close()


@contextlib.contextmanager
def absl_info_logged():
  """absl's INFO lines logged inside the block (into a command's log file)."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  saved = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.INFO)
  try:
    yield
  finally:
    absl_logging.set_verbosity(saved)


def evaluator_options(trainer_module_file: str, preprocessing_module_file: str,
                      data_root: str, custom_config: Mapping[str, Any],
                      label_key: Optional[str],
                      prediction_key: Optional[str]) -> Dict[str, Any]:
  """The taxi pipeline's Evaluator options, for `run` and `compile` alike.

  Raises:
    UsageError: naming the module and what to pass.
  """
  from tfx_tpu_trainer_cli import evaluator_keys  # pylint: disable=g-import-not-at-top
  try:
    return evaluator_keys.evaluator_options(
        trainer_module_file, preprocessing_module_file, data_root,
        custom_config, label_override=label_key,
        prediction_override=prediction_key)
  except evaluator_keys.EvaluatorKeyError as e:
    raise UsageError(str(e)) from e
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError(
        f'--module-file: the Evaluator\'s keys could not be found from '
        f'{trainer_module_file}: {type(e).__name__}: {e}') from e
