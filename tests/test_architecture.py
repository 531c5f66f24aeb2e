"""The repository's structure, and docs/architecture.md's account of it.

Layers: the repository's parts and the library's folders and flat modules
stand on floors (1 + the highest floor they import), which exist only
without a cycle, so nothing imports upward; no two modules of one folder
import each other in a circle either. Every import of this repository's
code names a real module or a real name of one; each folder says its
purpose in one line, which the doc's folder list repeats.

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
PARTS = ('benchmarks', 'tfx_tpu_trainer_cli', 'pipelines', 'components',
         LIBRARY)
# Folders of files that are loaded by path (TFX's module files, the bundled
# pipeline), never imported as packages.
LOADED_BY_PATH = ('pipelines', 'components')
LIBRARY_TABLE = 'library'
REPOSITORY_TABLE = 'repository'
# Circles between modules of one folder that are known and being removed,
# as (folder, modules of the circle sorted); none today.
KNOWN_CYCLES = ()
# The packages whose folders say their purpose (their __init__.py docstring).
PACKAGES = (LIBRARY, 'tfx_tpu_trainer_cli', 'benchmarks')

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


def test_no_part_imports_a_part_above_it():
  """PARTS lists the repository's parts from the top floor down."""
  graph = repository_graph()
  upward = [f'{part} -> {target}' for part in PARTS for target in graph[part]
            if PARTS.index(target) < PARTS.index(part)]
  assert not upward, (
      f'These imports point up the layers {PARTS} (top first): {upward}. '
      'Move the shared code down into the part both use (the library), or '
      'the import up into the part above.')


def _repository_files() -> List[str]:
  found = []
  for directory, folders, files in os.walk(REPO_ROOT):
    folders[:] = [f for f in folders if not f.startswith('.') and
                  f not in ('build', 'dist', '__pycache__') and
                  not f.endswith('.egg-info')]
    found.extend(os.path.join(directory, name) for name in files
                 if name.endswith('.py'))
  return sorted(found)


def _import_statements(path: str):
  """(module, name or None) for each absolute import of the file.

  `import a.b` is ('a.b', None); `from a.b import c` is ('a.b', 'c'), which
  names the module a.b.c or the name c of a.b. Imports inside functions
  count: they are imports all the same.
  """
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, None
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      for alias in node.names:
        yield node.module, alias.name


def _module_names(path: str):
  """The module's `__all__` (None without one), its top-level names, and
  whether it answers other names too (a module `__getattr__`)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  declared, defined = None, set()
  statements = list(tree.body)
  while statements:
    node = statements.pop(0)
    if isinstance(node, (ast.If, ast.Try)):  # Names bound either way.
      statements.extend(node.body + node.orelse +
                        getattr(node, 'finalbody', []) +
                        [s for h in getattr(node, 'handlers', [])
                         for s in h.body])
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                           ast.ClassDef)):
      defined.add(node.name)
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      for target in targets:
        for name in ast.walk(target):
          if isinstance(name, ast.Name):
            defined.add(name.id)
            if name.id == '__all__' and isinstance(node, ast.Assign):
              declared = ast.literal_eval(node.value)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      defined.update((a.asname or a.name).split('.')[0] for a in node.names)
  return declared, defined, '__getattr__' in defined


def missing_imports() -> List[str]:
  """Imports of this repository's code that name no module or name of it.

  `from a.b import c` must name the module a/b/c.py or a name that a/b.py
  defines or imports (one in `__all__` where a module `__getattr__` answers
  it). The folders that are loaded by path are never imported: an installed
  wheel has no package of that name.
  """
  own = set(PARTS) | {'tests'}
  missing = []
  for path in _repository_files():
    relative = os.path.relpath(path, REPO_ROOT)
    for module, name in _import_statements(path):
      names = module.split('.')
      if names[0] not in own:
        continue
      shown = f'{module}.{name}' if name else module
      if names[0] in LOADED_BY_PATH:
        missing.append(f'{relative}: {shown} (load it by path)')
        continue
      source = _module_file(names)
      if not source:
        missing.append(f'{relative}: {shown} (no module {module})')
      elif name and not _module_file(names + [name]):
        declared, defined, dynamic = _module_names(source)
        if name not in defined and not (dynamic and name in (declared or ())):
          missing.append(f'{relative}: {shown} ({module} has no {name})')
  return missing


def test_every_import_names_a_module_or_a_name_of_one():
  missing = missing_imports()
  assert not missing, (
      'These imports name no module file of the checkout, or a name the '
      'module does not have (the installed layout is the checkout\'s '
      'layout: import the path where the file is, the name it defines):'
      '\n' + '\n'.join(missing))


def module_graph() -> Graph:
  """Import edges between the modules of the packages (dotted names)."""
  graph: Graph = {}
  for package in PACKAGES:
    for path in _python_files(package):
      relative = os.path.relpath(path, REPO_ROOT)[:-len('.py')]
      source = relative.replace(os.sep, '.')
      source = source[:-len('.__init__')] if source.endswith(
          '.__init__') else source
      graph.setdefault(source, set())
      for module, name in _import_statements(path):
        names = module.split('.')
        if names[0] not in PACKAGES:
          continue
        target = (f'{module}.{name}' if name and _module_file(names + [name])
                  else module)
        if target != source:
          graph[source].add(target)
  return graph


def _folder(module: str) -> str:
  """The folder of a module (a package is in its own folder)."""
  names = module.split('.')
  if os.path.isdir(os.path.join(REPO_ROOT, *names)):
    return '/'.join(names)
  return '/'.join(names[:-1])


def cycles_within_folders(graph: Graph) -> List[tuple]:  # pylint: disable=g-bare-generic
  """(folder, modules) of each circle of imports among one folder's modules.

  The strongly connected components (Tarjan) of the graph restricted to
  edges between modules of one folder, of two or more modules.
  """
  inside = {m: {t for t in targets if t in graph and _folder(t) == _folder(m)}
            for m, targets in graph.items()}
  index: Dict[str, int] = {}
  low: Dict[str, int] = {}
  stack: List[str] = []
  found = []

  def visit(module: str) -> None:
    index[module] = low[module] = len(index)
    stack.append(module)
    for target in sorted(inside[module]):
      if target not in index:
        visit(target)
        low[module] = min(low[module], low[target])
      elif target in stack:
        low[module] = min(low[module], index[target])
    if low[module] == index[module]:
      component = []
      while True:
        member = stack.pop()
        component.append(member)
        if member == module:
          break
      if len(component) > 1:
        found.append((_folder(module), tuple(sorted(component))))

  for module in sorted(inside):
    if module not in index:
      visit(module)
  return sorted(found)


def test_no_circle_between_the_modules_of_a_folder():
  found = cycles_within_folders(module_graph())
  new = [c for c in found if c not in KNOWN_CYCLES]
  assert not new, (
      'These modules of one folder import each other in a circle (an import '
      'inside a function counts): ' + '; '.join(
          f'{folder}: {" <-> ".join(modules)}' for folder, modules in new) +
      '. Move what both need into one module, or the caller above.')
  gone = [c for c in KNOWN_CYCLES if c not in found]
  assert not gone, (
      f'These known circles are gone: {gone}. Delete them from KNOWN_CYCLES '
      'in tests/test_architecture.py.')


def _purpose(package_dir: str) -> str:
  with open(os.path.join(REPO_ROOT, package_dir, '__init__.py')) as f:
    return ast.get_docstring(ast.parse(f.read())) or ''


def folders() -> List[str]:
  """The repository's package folders (`tfx_tpu_trainer/data`, ...)."""
  found = []
  for package in PACKAGES:
    for path in _python_files(package):
      if os.path.basename(path) == '__init__.py':
        found.append(os.path.relpath(os.path.dirname(path), REPO_ROOT))
  return sorted(found)


def test_each_folder_says_its_purpose_in_one_line_the_doc_repeats():
  with open(DOC) as f:
    doc = ' '.join(f.read().split())
  problems = []
  for folder in folders():
    purpose = _purpose(folder)
    if not purpose or len(purpose.splitlines()) != 1:
      problems.append(f'{folder}/__init__.py: its docstring is not one line '
                      f'saying what the folder is for ({purpose!r})')
    elif not any(f'`{name}/`: {purpose}' in doc for name in (
        folder, os.path.relpath(folder, LIBRARY))):
      problems.append(f'docs/architecture.md does not list "`{folder}/`: '
                      f'{purpose}"')
  assert not problems, (
      'Each folder says in one line of its __init__.py docstring what it is '
      'for, and docs/architecture.md\'s folder list repeats it:\n' +
      '\n'.join(problems))


def test_the_paths_the_doc_names_exist():
  """`folder/module.py` in the doc: from the repository or the library."""
  with open(DOC) as f:
    named = set(re.findall(r'`([\w.-]+/[\w./-]*(?:\.py|\.yaml|/))`',
                           f.read()))
  missing = sorted(
      p for p in named
      if not any(os.path.exists(os.path.join(REPO_ROOT, top, p))
                 for top in ('', LIBRARY, 'tfx_tpu_trainer_cli')))
  assert not missing, (
      f'docs/architecture.md names paths that do not exist: {missing}')


def test_all_lists_only_names_the_module_has():
  problems = []
  for package in PACKAGES:
    for path in _python_files(package):
      declared, defined, _ = _module_names(path)
      unknown = sorted(set(declared or ()) - defined)
      # A package's __all__ may name its submodules.
      unknown = [n for n in unknown if not (
          os.path.basename(path) == '__init__.py' and
          _module_file([os.path.dirname(os.path.relpath(path, REPO_ROOT)), n]))]
      if unknown and not _module_names(path)[2]:
        problems.append(f'{os.path.relpath(path, REPO_ROOT)}: {unknown}')
  assert not problems, (
      '__all__ names names the module neither defines nor imports:\n' +
      '\n'.join(problems))


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


def test_cycles_within_folders_finds_a_circle_of_one_folder_only():
  graph = {
      'tfx_tpu_trainer.data.a': {'tfx_tpu_trainer.data.b'},
      'tfx_tpu_trainer.data.b': {'tfx_tpu_trainer.data.c'},
      'tfx_tpu_trainer.data.c': {'tfx_tpu_trainer.data.a',
                                 'tfx_tpu_trainer.config'},
      'tfx_tpu_trainer.config': {'tfx_tpu_trainer.data.a'},
      'tfx_tpu_trainer.errors': set(),
  }
  assert cycles_within_folders(graph) == [(
      'tfx_tpu_trainer/data', ('tfx_tpu_trainer.data.a',
                               'tfx_tpu_trainer.data.b',
                               'tfx_tpu_trainer.data.c'))]


def test_imports_inside_functions_count(tmp_path):
  path = tmp_path / 'module.py'
  path.write_text('import a.b\n\n\ndef f():\n  from c.d import e\n')
  assert list(_import_statements(str(path))) == [('a.b', None), ('c.d', 'e')]


if __name__ == '__main__':
  for table_name, table_graph in ((LIBRARY_TABLE, library_graph()),
                                  (REPOSITORY_TABLE, repository_graph())):
    print(f'{table_name}:\n{render_table(table_graph)}\n')
