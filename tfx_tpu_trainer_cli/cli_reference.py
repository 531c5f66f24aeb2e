"""docs/reference/cli.md, rendered from the argparse parsers of every subcommand."""

import argparse
import sys
from typing import List

from tfx_tpu_trainer.slice import worker
from tfx_tpu_trainer_cli import main as cli

DOC_PATH = 'docs/reference/cli.md'
_HEADER = f"""\
# Command-line reference

<!-- Generated from the argparse parsers in tfx_tpu_trainer_cli/ by
`make docs` (python -m tfx_tpu_trainer_cli.cli_reference > {DOC_PATH});
tests/cli/test_cli_reference.py fails when this page differs. Edit the
parsers' help, not this page. -->

Every option of every `tfx-tpu-trainer` subcommand, as `tfx-tpu-trainer
SUBCOMMAND --help` prints it. Options are never matched by a prefix
(`--train-step` is an error that asks "did you mean --train-steps?"); a bad
option exits with status 2 and `tfx-tpu-trainer SUBCOMMAND: error: ...`.
What the commands are for: [the user's guide](../../README.md#where-to-go-next).
"""


def _subcommands(parser: argparse.ArgumentParser):
  """(name, one-line help, parser) of each subcommand, in the CLI's order."""
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      helps = {a.dest: a.help for a in action._choices_actions}  # pylint: disable=protected-access
      return [(name, helps.get(name, ''), subparser)
              for name, subparser in action.choices.items()]
  return []


def _text(text: str) -> str:
  """Help text as markdown: one line, `<name>` shown, not taken for HTML."""
  return ' '.join(text.split()).replace('<', '&lt;').replace('>', '&gt;')


def _cell(text: str) -> str:
  """Text as one cell of a markdown table."""
  return _text(text).replace('|', '\\|')


def _option(formatter: argparse.HelpFormatter, action) -> str:
  invocation = formatter._format_action_invocation(action)  # pylint: disable=protected-access
  return f'`{invocation}`'


def _help(formatter: argparse.HelpFormatter, parser, action) -> str:
  """The option's help as --help prints it, plus what --help shows apart."""
  text = formatter._expand_help(action) if action.help else ''  # pylint: disable=protected-access
  notes = []
  if action.required:
    notes.append('Required.')
  for group in parser._mutually_exclusive_groups:  # pylint: disable=protected-access
    if action in group._group_actions:  # pylint: disable=protected-access
      others = [a.option_strings[0] for a in group._group_actions  # pylint: disable=protected-access
                if a is not action]
      notes.append('Not with ' + ', '.join(f'`{o}`' for o in others) + '.')
  return _cell(' '.join([text] + notes).strip()) or '-'


def _options_table(parser: argparse.ArgumentParser) -> List[str]:
  formatter = parser._get_formatter()  # pylint: disable=protected-access
  rows = ['| option | what it does |', '|---|---|']
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, (argparse._HelpAction,  # pylint: disable=protected-access
                           argparse._SubParsersAction)):  # pylint: disable=protected-access
      continue
    rows.append(f'| {_option(formatter, action)} | '
                f'{_help(formatter, parser, action)} |')
  return rows


def _section(title: str, parser: argparse.ArgumentParser) -> List[str]:
  return ['', f'## `{title}`', '', _text(parser.description or ''),
          ''] + _options_table(parser)


def render() -> str:
  """The whole page: every subcommand, its description and options."""
  parser = cli.build_parser()
  worker_parser = worker.parser()
  subcommands = _subcommands(parser)
  lines = [_HEADER, '| command | what it does |', '|---|---|']
  for name, summary, _ in subcommands:
    lines.append(f'| [`tfx-tpu-trainer {name}`](#tfx-tpu-trainer-{name}) | '
                 f'{_cell(summary)} |')
  lines.append(f'| [`{worker_parser.prog}`](#{_anchor(worker_parser.prog)}) '
               '| One host\'s TPU worker of a multi-host slice (outside '
               'Kubeflow, on every host). |')
  lines += ['', '## `tfx-tpu-trainer`', ''] + _options_table(parser)
  for name, _, subparser in subcommands:
    lines += _section(f'tfx-tpu-trainer {name}', subparser)
  lines += _section(worker_parser.prog, worker_parser)
  return '\n'.join(lines) + '\n'


def _anchor(title: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation out, - for space."""
  kept = ''.join(c for c in title.lower() if c.isalnum() or c in ' -_')
  return kept.replace(' ', '-')


if __name__ == '__main__':
  sys.stdout.write(render())
