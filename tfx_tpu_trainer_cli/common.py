"""What every subcommand shares: the usage error, argument types, the log."""

import argparse
import contextlib
import difflib
import os
import re
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

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
class CliParser(argparse.ArgumentParser):
  """An ArgumentParser that never matches an option by its prefix.

  `allow_abbrev` is always False (argparse's default would take
  `--train-step` for `--train-steps` and call `--pipeline` ambiguous), also
  for the subcommand parsers it creates (`add_subparsers` hands them this
  class), and an invalid choice gets a "did you mean".
  """

  def __init__(self, *args, **kwargs):
    kwargs['allow_abbrev'] = False
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

  def unrecognized(self, extras: Sequence[str]) -> None:
    """Exits with this parser's usage, naming the unknown arguments.

    Each unknown `--option` that is close to a known one gets a "did you
    mean".
    """
    hints = []
    for extra in extras:
      if extra.startswith('--'):
        hint = did_you_mean(extra.split('=', 1)[0], self.long_options())
        if hint:
          hints.append(hint.strip())
    self.error(f'unrecognized arguments: {" ".join(extras)}' +
               (' ' + '; '.join(hints) if hints else ''))


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
