"""docs/reference/cli.md is the parsers' own reference: every option of every
command, with what it does, rendered from argparse (`make docs`)."""

import argparse
import os

from tfx_tpu_trainer.slice import worker
from tfx_tpu_trainer_cli import cli_reference
from tfx_tpu_trainer_cli import main as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _page() -> str:
  with open(os.path.join(REPO, cli_reference.DOC_PATH), encoding='utf-8') as f:
    return f.read()


def _parsers():
  """(title, parser) of the command, each subcommand and the TPU worker."""
  parser = cli.build_parser()
  yield 'tfx-tpu-trainer', parser
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      for name, subparser in action.choices.items():
        yield f'tfx-tpu-trainer {name}', subparser
  yield worker.parser().prog, worker.parser()


def test_the_page_is_rendered_from_the_parsers():
  assert _page() == cli_reference.render(), (
      f'{cli_reference.DOC_PATH} differs from the parsers: run `make docs` '
      f'(python -m tfx_tpu_trainer_cli.cli_reference > '
      f'{cli_reference.DOC_PATH}).')


def test_every_option_of_every_command_is_on_the_page_with_its_help():
  page = _page()
  for title, parser in _parsers():
    section = page.split(f'## `{title}`\n')[1].split('\n## ')[0]
    for action in parser._actions:  # pylint: disable=protected-access
      if isinstance(action, (argparse._HelpAction,  # pylint: disable=protected-access
                             argparse._SubParsersAction)):  # pylint: disable=protected-access
        continue
      assert action.help, f'{title} {action.option_strings}: no help text'
      for option in action.option_strings:
        assert f'`{option}' in section, (title, option)


def test_the_page_does_not_depend_on_the_terminal_width(monkeypatch):
  monkeypatch.setenv('COLUMNS', '40')
  narrow = cli_reference.render()
  monkeypatch.setenv('COLUMNS', '250')
  assert cli_reference.render() == narrow
