"""docs/architecture.md's import tables and module list against the code.

  python -m tests.test_architecture   # prints both tables
"""

import ast
import os
import re
from typing import Dict, List, Set

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = 'tfx_tpu_trainer'
DOC = os.path.join(REPO_ROOT, 'docs', 'architecture.md')
# The repository's Python parts, from the top layer down.
PARTS = ('tfx_tpu_trainer_cli', 'benchmarks', 'pipelines', 'components',
         LIBRARY)
# Folders of files that are loaded by path (TFX's module files, the bundled
# pipeline), never imported as packages.
LOADED_BY_PATH = ('pipelines', 'components')
LIBRARY_TABLE = 'library'
MAX_FLAT_MODULES = 10
REPOSITORY_TABLE = 'repository'

Graph = Dict[str, Set[str]]


def _python_files(top: str) -> List[str]:
  found = []
  for directory, _, files in os.walk(os.path.join(REPO_ROOT, top)):
    found.extend(os.path.join(directory, name) for name in files
                 if name.endswith('.py'))
  return sorted(found)


def _imported_modules(path: str) -> List[str]:
  """Every module an import statement of the file names (absolute imports)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  modules = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      # `from a.b import c` may import the module a.b.c or a name of a.b.
      modules.extend(f'{node.module}.{alias.name}' for alias in node.names)
  return modules


def _library_part(module: str) -> str:
  """`data/` for tfx_tpu_trainer.data.*, `config` for tfx_tpu_trainer.config."""
  names = module.split('.')
  if len(names) == 1:
    return '__init__'
  if os.path.isdir(os.path.join(REPO_ROOT, LIBRARY, names[1])):
    return names[1] + '/'
  return names[1]


def _module_file(names: List[str]) -> str:
  """The file or package of the checkout that `a.b.c` names, or ''."""
  path = os.path.join(REPO_ROOT, *names)
  for candidate in (path + '.py', os.path.join(path, '__init__.py')):
    if os.path.isfile(candidate):
      return candidate
  return ''


def library_graph() -> Graph:
  """Import edges between the library's top-level modules and subpackages."""
  graph: Graph = {}
  for path in _python_files(LIBRARY):
    relative = os.path.relpath(path, REPO_ROOT)[:-len('.py')]
    source = _library_part(relative.replace(os.sep, '.'))
    graph.setdefault(source, set())
    for module in _imported_modules(path):
      if module.split('.')[0] == LIBRARY:
        target = _library_part(module)
        if target != source:
          graph[source].add(target)
  return graph


def repository_graph() -> Graph:
  """Import edges between the repository's Python parts.

  The bundled module files in components/ import each other by bare name
  (they are loaded by path); an import of one of those names counts as
  an import of components/.
  """
  component_modules = {
      os.path.splitext(os.path.basename(path))[0]
      for path in _python_files('components')}
  graph: Graph = {}
  for part in PARTS:
    graph[part] = set()
    for path in _python_files(part):
      for module in _imported_modules(path):
        first = module.split('.')[0]
        target = (first if first in PARTS else
                  'components' if first in component_modules else None)
        if target and target != part:
          graph[part].add(target)
  return graph


def floors(graph: Graph) -> Dict[str, int]:
  """1 for a part that imports no other part, else 1 + its highest import."""
  result: Dict[str, int] = {}

  def floor(part: str, path: tuple) -> int:  # pylint: disable=g-bare-generic
    if part in path:
      raise AssertionError(f'import cycle: {" -> ".join(path + (part,))}')
    if part not in result:
      result[part] = 1 + max(
          (floor(target, path + (part,)) for target in graph.get(part, ())),
          default=0)
    return result[part]

  for part in graph:
    floor(part, ())
  return result


def _label(part: str) -> str:
  return f'`{part}`'


def render_table(graph: Graph) -> str:
  """The doc's table: floor, part, what it imports; top floor first."""
  part_floors = floors(graph)
  rows = ['| floor | part | imports |', '|---|---|---|']
  for part in sorted(graph, key=lambda p: (-part_floors[p], p)):
    imports = ', '.join(_label(target) for target in sorted(graph[part]))
    rows.append(f'| {part_floors[part]} | {_label(part)} | {imports or "-"} |')
  return '\n'.join(rows)


def _doc_table(name: str) -> str:
  with open(DOC) as f:
    text = f.read()
  match = re.search(
      rf'<!-- imports: {name} [^>]*-->\n(.*?)\n<!-- end imports: {name} -->',
      text, re.S)
  assert match, f'{DOC} has no "<!-- imports: {name} ... -->" block.'
  return match.group(1).strip()


def _check_table(name: str, graph: Graph) -> None:
  expected = render_table(graph)
  assert _doc_table(name) == expected, (
      f'The {name} import table of docs/architecture.md no longer matches the '
      'code; update the text around it, and paste this table between its '
      f'markers (python -m tests.test_architecture prints it):\n{expected}')


def test_library_import_table_matches_the_code():
  _check_table(LIBRARY_TABLE, library_graph())


def test_repository_import_table_matches_the_code():
  _check_table(REPOSITORY_TABLE, repository_graph())


def test_the_library_imports_nothing_above_it():
  assert repository_graph()[LIBRARY] == set()


def test_every_library_module_is_named_in_the_doc():
  with open(DOC) as f:
    text = f.read()
  missing = []
  for path in _python_files(LIBRARY):
    relative = os.path.relpath(path, os.path.join(REPO_ROOT, LIBRARY))
    if os.path.basename(relative) == '__init__.py':
      continue
    if f'`{relative}`' not in text:
      missing.append(relative)
  assert not missing, (
      f'docs/architecture.md does not name these modules of {LIBRARY}/ (as '
      f'`path/module.py`): {missing}. Say what each owns.')


def _repository_files() -> List[str]:
  found = []
  for directory, folders, files in os.walk(REPO_ROOT):
    folders[:] = [f for f in folders if not f.startswith('.') and
                  f not in ('build', 'dist', '__pycache__') and
                  not f.endswith('.egg-info')]
    found.extend(os.path.join(directory, name) for name in files
                 if name.endswith('.py'))
  return sorted(found)


def missing_imports() -> List[str]:
  """Imports of this repository's modules that name no file of the checkout.

  `from a.b import c` may name the module a/b/c.py or a name of a/b.py;
  either file will do. The folders that are loaded by path are never
  imported: an installed wheel has no package of that name.
  """
  own = set(PARTS) | {'tests'}
  missing = []
  for path in _repository_files():
    relative = os.path.relpath(path, REPO_ROOT)
    for module in _imported_modules(path):
      names = module.split('.')
      if names[0] not in own:
        continue
      if names[0] in LOADED_BY_PATH:
        missing.append(f'{relative}: {module} (load it by path)')
      elif not (_module_file(names) or _module_file(names[:-1])):
        missing.append(f'{relative}: {module}')
  return missing


def test_every_import_names_a_file_of_the_checkout():
  missing = missing_imports()
  assert not missing, (
      'These imports name no module file of the checkout (the installed '
      'layout is the checkout\'s layout: import the path where the file is):'
      f'\n' + '\n'.join(missing))


def modules_imported_from_outside() -> List[str]:
  """The modules of the two packages that a file of another folder imports."""
  found = set()
  for path in _repository_files():
    folder = os.path.dirname(path)
    for module in _imported_modules(path):
      names = module.split('.')
      if names[0] not in (LIBRARY, 'tfx_tpu_trainer_cli'):
        continue
      target = _module_file(names) or _module_file(names[:-1])
      if (target and os.path.basename(target) != '__init__.py' and
          os.path.dirname(target) != folder):
        found.add(target)
  return sorted(found)


def _all_names(path: str):
  """The module's `__all__` (None without one) and its top-level names."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  declared, defined = None, set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
      defined.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        for name in ast.walk(target):
          if isinstance(name, ast.Name):
            defined.add(name.id)
            if name.id == '__all__':
              declared = ast.literal_eval(node.value)
    elif isinstance(node, ast.ImportFrom):
      defined.update(a.asname or a.name for a in node.names)
  return declared, defined


def test_every_module_imported_from_another_folder_has_all():
  problems = []
  for path in modules_imported_from_outside():
    relative = os.path.relpath(path, REPO_ROOT)
    declared, defined = _all_names(path)
    if declared is None:
      problems.append(f'{relative}: no __all__')
    elif set(declared) - defined:
      undefined = sorted(set(declared) - defined)
      problems.append(f'{relative}: __all__ names {undefined}, which it does '
                      'not define')
  assert not problems, (
      'A module that another folder imports declares its public names in '
      '__all__:\n' + '\n'.join(problems))


def test_module_docstrings_are_one_or_two_lines():
  long = []
  for part in PARTS:
    for path in _python_files(part):
      with open(path) as f:
        doc = ast.get_docstring(ast.parse(f.read(), path), clean=False)
      if doc is None or len(doc.strip().splitlines()) > 2:
        long.append(os.path.relpath(path, REPO_ROOT))
  assert not long, (
      'A module says in a docstring of one or two lines what it is for (the '
      f'story goes in docs/architecture.md): {long}')


def test_at_most_ten_flat_library_modules():
  flat = sorted(name for name in os.listdir(os.path.join(REPO_ROOT, LIBRARY))
                if name.endswith('.py') and name != '__init__.py')
  assert len(flat) <= MAX_FLAT_MODULES, (
      f'{LIBRARY}/ has {len(flat)} flat modules {flat}, at most '
      f'{MAX_FLAT_MODULES}: put the new one in the folder of the step that '
      'owns it (data/, model_fn/, training/, preflight/, publishing/, tpu/, '
      'slice/, kubeflow/).')


def test_render_table_floors_and_cycles():
  graph = {'a': {'b', 'c'}, 'b': {'c'}, 'c': set()}
  assert render_table(graph) == '\n'.join([
      '| floor | part | imports |', '|---|---|---|',
      '| 3 | `a` | `b`, `c` |', '| 2 | `b` | `c` |', '| 1 | `c` | - |'])
  try:
    floors({'a': {'b'}, 'b': {'a'}})
  except AssertionError as e:
    assert 'import cycle: a -> b -> a' in str(e)
  else:
    raise AssertionError('a cycle was not found')


if __name__ == '__main__':
  for table_name, table_graph in ((LIBRARY_TABLE, library_graph()),
                                  (REPOSITORY_TABLE, repository_graph())):
    print(f'{table_name}:\n{render_table(table_graph)}\n')
