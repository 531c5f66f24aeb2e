"""Every pointer into the docs leads somewhere.

The code's pointers (`docs/guide/kubeflow.md, "Secrets"` in an error message,
a comment or a help text) name a doc file that exists and a heading it has;
so do the docs' own links (`[x](file.md#anchor)`) and textual pointers, and
the repository files the guides name exist.
"""

import ast
import io
import os
import re
import tokenize
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where code points at the docs: every part of the repository that users or
# developers read messages, help texts and comments of.
CODE_FOLDERS = ('tfx_tpu_trainer', 'tfx_tpu_trainer_cli', 'pipelines',
                'components', 'examples', 'benchmarks', 'scripts', 'tests')
CODE_FILES = ('Makefile', 'Dockerfile', 'setup.py', os.path.join('.ci', 'run'))
CODE_SUFFIXES = ('.py', '.sh', '.yaml', '.yml', '.proto', '.cfg', '.toml')
# A doc file, then optionally its heading in quotes: `docs/x.md, "Heading"`,
# `docs/x.md ("Heading")`, `README, "Heading"`.
POINTER = re.compile(
    r'(?<![\w/.-])(?P<file>docs/[\w./-]+\.md|README(?:\.md)?|CHANGELOG\.md)'
    r'(?:,?\s*\(?\s*"(?P<heading>[^"]+)")?')
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
# A repository path a guide names in backticks.
REPO_PATH = re.compile(
    r'`((?:tfx_tpu_trainer|tfx_tpu_trainer_cli|tests|components|pipelines|'
    r'examples|benchmarks|scripts)/[\w/.-]*\w)`')
# The history names files and sections that no longer exist.
NO_TEXT_POINTER_CHECK = ('CHANGELOG.md',)
NO_REPO_PATH_CHECK = ('CHANGELOG.md',)


def doc_files() -> List[str]:
  """README.md, CHANGELOG.md and every .md under docs/, repo-relative."""
  found = ['README.md', 'CHANGELOG.md']
  for directory, _, files in os.walk(os.path.join(REPO, 'docs')):
    found.extend(os.path.relpath(os.path.join(directory, name), REPO)
                 for name in sorted(files) if name.endswith('.md'))
  return found


def _read(relative: str) -> str:
  with open(os.path.join(REPO, relative), encoding='utf-8') as f:
    return f.read()


def _without_code_blocks(markdown: str) -> str:
  return re.sub(r'^```.*?^```', '', markdown, flags=re.S | re.M)


def _normalized(text: str) -> str:
  return ' '.join(text.replace('`', '').split())


def anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation out, - for space."""
  kept = ''.join(c for c in heading.lower().replace('`', '')
                 if c.isalnum() or c in ' -_')
  return kept.replace(' ', '-')


def headings(relative: str) -> List[str]:
  """The file's headings, normalized (backticks out, spaces collapsed)."""
  return [_normalized(line.lstrip('#'))
          for line in _without_code_blocks(_read(relative)).splitlines()
          if re.match(r'#{1,6} ', line)]


def anchors(relative: str) -> Set[str]:
  """Every anchor GitHub gives the file's headings (-1, -2 for repeats)."""
  seen: Dict[str, int] = {}
  result = set()
  for heading in headings(relative):
    slug = anchor(heading)
    result.add(f'{slug}-{seen[slug]}' if slug in seen else slug)
    seen[slug] = seen.get(slug, 0) + 1
  return result


def _doc_path(name: str) -> str:
  return 'README.md' if name == 'README' else name


def pointer_problem(name: str, heading: str) -> str:
  """What is wrong with a pointer to `name` (and its heading), or ''."""
  path = _doc_path(name)
  if not os.path.isfile(os.path.join(REPO, path)):
    return f'{path} does not exist'
  if heading is None:
    return ''
  wanted = _normalized(heading)
  for text in headings(path):
    if wanted in (text, text.split(':')[0]):
      return ''
  return f'{path} has no heading "{wanted}"'


def _python_texts(path: str) -> Iterator[Tuple[int, str]]:
  """(line, text) of each string (implicit concatenation joined) and comment
  block of a Python file."""
  with open(path, encoding='utf-8') as f:
    source = f.read()
  for node in ast.walk(ast.parse(source, path)):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      yield node.lineno, node.value
    elif isinstance(node, ast.JoinedStr):
      yield node.lineno, ''.join(
          v.value if isinstance(v, ast.Constant) else '{}' for v in node.values)
  block, start, last = [], 0, -1
  for token in tokenize.generate_tokens(io.StringIO(source).readline):
    if token.type != tokenize.COMMENT:
      continue
    line = token.start[0]
    if line != last + 1 and block:
      yield start, ' '.join(block)
      block = []
    if not block:
      start = line
    block.append(token.string.lstrip('#').strip())
    last = line
  if block:
    yield start, ' '.join(block)


def _other_texts(path: str) -> Iterator[Tuple[int, str]]:
  """The whole file, comment markers of continued lines dropped."""
  with open(path, encoding='utf-8') as f:
    text = f.read()
  yield 1, re.sub(r'\n\s*(#|//)\s*', ' ', text)


def code_files() -> List[str]:
  found = [os.path.join(REPO, name) for name in CODE_FILES
           if os.path.isfile(os.path.join(REPO, name))]
  for folder in CODE_FOLDERS:
    for directory, folders, files in os.walk(os.path.join(REPO, folder)):
      folders[:] = [f for f in folders if f != '__pycache__']
      found.extend(os.path.join(directory, name) for name in sorted(files)
                   if name.endswith(CODE_SUFFIXES))
  return [path for path in found if path != os.path.abspath(__file__)]


def code_pointers() -> List[Tuple[str, str, str]]:
  """(where, file, heading) of every doc pointer in the code."""
  pointers = []
  for path in code_files():
    texts = (_python_texts(path) if path.endswith('.py')
             else _other_texts(path))
    for line, text in texts:
      for match in POINTER.finditer(' '.join(text.split())):
        where = f'{os.path.relpath(path, REPO)}:{line}'
        pointers.append((where, match.group('file'), match.group('heading')))
  return pointers


def test_every_doc_pointer_in_the_code_names_a_file_and_its_heading():
  pointers = code_pointers()
  assert len(pointers) >= 20  # The scan finds them (comments, strings).
  problems = [f'{where}: {problem}' for where, name, heading in pointers
              for problem in [pointer_problem(name, heading)] if problem]
  assert not problems, (
      'Doc pointers in the code that lead nowhere (move the pointer with the '
      'section):\n' + '\n'.join(problems))


def test_the_pointer_scan_reads_strings_split_over_lines(tmp_path):
  module = tmp_path / 'm.py'
  module.write_text(
      "MESSAGE = ('see docs/guide/tpu_slices.md, \"TPU '\n"
      "           'runtimes\"')\n"
      '# A comment that points at docs/guide/performance.md,\n'
      '# "The host loop", over two lines.\n')
  found = [POINTER.search(' '.join(text.split()))
           for _, text in _python_texts(str(module))]
  found = [(m.group('file'), m.group('heading')) for m in found if m]
  assert found == [('docs/guide/tpu_slices.md', 'TPU runtimes'),
                   ('docs/guide/performance.md', 'The host loop')]
  assert pointer_problem('docs/guide/tpu_slices.md', 'TPU runtimes') == ''
  assert pointer_problem('docs/guide/tpu_slices.md', 'TPU runtime') == (
      'docs/guide/tpu_slices.md has no heading "TPU runtime"')
  assert pointer_problem('docs/kubeflow.md', None) == (
      'docs/kubeflow.md does not exist')


@pytest.mark.parametrize('doc', doc_files())
def test_every_link_of_a_doc_leads_to_a_file_and_anchor(doc):
  problems = []
  for target in LINK.findall(_without_code_blocks(_read(doc))):
    if re.match(r'[a-z]+:', target):
      continue  # https://, mailto: ...
    path, _, fragment = target.partition('#')
    resolved = (os.path.normpath(os.path.join(os.path.dirname(doc), path))
                if path else doc)
    if not os.path.exists(os.path.join(REPO, resolved)):
      problems.append(f'{target}: no file {resolved}')
    elif fragment and fragment not in anchors(resolved):
      problems.append(f'{target}: {resolved} has no heading with anchor '
                      f'#{fragment}')
  assert not problems, f'{doc}: ' + '; '.join(problems)


@pytest.mark.parametrize(
    'doc', [d for d in doc_files() if d not in NO_TEXT_POINTER_CHECK])
def test_every_textual_pointer_of_a_doc_leads_to_a_heading(doc):
  text = ' '.join(_without_code_blocks(_read(doc)).split())
  problems = [problem for match in POINTER.finditer(text)
              for problem in [pointer_problem(match.group('file'),
                                              match.group('heading'))]
              if problem]
  assert not problems, f'{doc}: ' + '; '.join(problems)


@pytest.mark.parametrize(
    'doc', [d for d in doc_files() if d not in NO_REPO_PATH_CHECK])
def test_the_repository_files_a_doc_names_exist(doc):
  missing = sorted({path for path in REPO_PATH.findall(_read(doc))
                    if not os.path.exists(os.path.join(REPO, path))})
  assert not missing, f'{doc} names files that do not exist: {missing}'


def test_anchors_are_githubs():
  assert anchor('Keras models: `build_keras_model(params)`') == (
      'keras-models-build_keras_modelparams')
  assert anchor('Running it: `run --pipeline`') == 'running-it-run---pipeline'
  assert anchor('`python -m tfx_tpu_trainer.slice.worker`') == (
      'python--m-tfx_tpu_trainersliceworker')
