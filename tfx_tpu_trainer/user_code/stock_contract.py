"""What a module written for the stock TFX Trainer names: read, never run."""

import ast
import dataclasses
import inspect
import os
import sys
import textwrap
import types
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set, Tuple

__all__ = ['PREPROCESSING_FN', 'preprocessing_outputs', 'keras_model_builders',
           'builder_calls']

# The keyword with which TFX modules name the label to their input
# (`tfxio.TensorFlowDatasetOptions(batch_size=..., label_key=...)`).
LABEL_KEY_KEYWORD = 'label_key'
# What the stock Trainer's estimator contract returns the Estimator under.
ESTIMATOR_KEY = 'estimator'
# The Keras method whose one call in run_fn TPUTrainer takes the model at.
FIT = 'fit'
# Names whose use in run_fn says that it trains an Estimator itself.
_ESTIMATOR_TRAINING_NAMES = ('train_and_evaluate', 'export_eval_savedmodel')
# The Keras layer that reads feature columns, and the tf.feature_column
# functions that make sparse (categorical) columns.
DENSE_FEATURES = 'DenseFeatures'
_SPARSE_COLUMN_FUNCTIONS = ('indicator_column', 'embedding_column',
                            'shared_embeddings', 'bucketized_column',
                            'crossed_column', 'weighted_categorical_column')
_SPARSE_COLUMN_PREFIX = 'categorical_column_with_'
# The AST nodes of a label_key= expression this module evaluates: names,
# attributes, constants, calls of them and string concatenation.
_SAFE_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Constant,
               ast.Call, ast.BinOp, ast.Add, ast.Load)


@dataclasses.dataclass(frozen=True)
class LabelKeys:
  """The label keys a stock module names, best first.

  Attributes:
    keys: the candidates.
    from_input: true when the first one is what the module's input function
      reads (`label_key=`); false when it is guessed from `LABEL_KEY` or
      `_LABEL_KEY` (and `_transformed_name`).
  """
  keys: Tuple[str, ...]
  from_input: bool


def _source_tree(module: Any) -> Optional[ast.AST]:
  try:
    return ast.parse(inspect.getsource(module))
  except (OSError, TypeError, SyntaxError, ValueError):
    return None


def evaluate_key(node: ast.AST, module: Any) -> Optional[str]:
  """The string a key expression of the module gives in its namespace.

  Only names, attributes, constants, calls of them without keywords and
  string concatenation are evaluated (`_transformed_name(_LABEL_KEY)`,
  `features.LABEL_KEY`); None for anything else, or when it fails (a loop
  variable).
  """
  expression = ast.Expression(body=node)
  if not all(isinstance(child, _SAFE_NODES) or isinstance(child, ast.expr_context)
             for child in ast.walk(expression)):
    return None
  if any(isinstance(child, ast.Call) and child.keywords
         for child in ast.walk(expression)):
    return None
  try:
    value = eval(compile(expression, '<label_key>', 'eval'),  # pylint: disable=eval-used
                 dict(vars(module)))
  except Exception:  # pylint: disable=broad-except
    return None
  return value if isinstance(value, str) and value else None


def _module_file(module: Any) -> Optional[str]:
  path = getattr(module, '__file__', None)
  return os.path.abspath(path) if isinstance(path, str) else None


def _imported_modules(module: Any) -> Iterator[types.ModuleType]:
  """The modules `module` binds: `import x as y`, and `from x import f`'s x."""
  for value in vars(module).values():
    if isinstance(value, types.ModuleType):
      yield value
    elif isinstance(value, types.FunctionType):
      owner = sys.modules.get(getattr(value, '__module__', None) or '')
      if owner is not None and owner is not module:
        yield owner


def followed_modules(module: Any) -> List[types.ModuleType]:
  """The module and the modules of its own folder it imports, transitively.

  A module of its folder: its file is in the folder of `module`'s file, or
  a file of the same name is (the folder holds a copy of it: TFX's
  penguin_utils_keras.py imports `tfx.examples.penguin.penguin_utils_base`,
  whose copy sits beside a copy of it). Packages (`__init__.py`) are not
  followed.
  """
  path = _module_file(module)
  if path is None:
    return [module]
  folder = os.path.dirname(path)
  found, queue = [], [module]
  while queue:
    current = queue.pop(0)
    if any(current is seen for seen in found):
      continue
    found.append(current)
    for imported in _imported_modules(current):
      file = _module_file(imported)
      if (file is None or not file.endswith('.py') or
          os.path.basename(file) == '__init__.py'):
        continue
      if (os.path.dirname(file) == folder or
          os.path.exists(os.path.join(folder, os.path.basename(file)))):
        queue.append(imported)
  return found


def _own_input_label_keys(module: Any) -> List[str]:
  tree = _source_tree(module)
  if tree is None:
    return []
  keys = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    for keyword in node.keywords:
      if keyword.arg == LABEL_KEY_KEYWORD:
        key = evaluate_key(keyword.value, module)
        if key is not None and key not in keys:
          keys.append(key)
  return keys


def input_label_keys(module: Any) -> Tuple[str, ...]:
  """The labels the module's code passes as `label_key=`, in source order.

  Also those of the modules of its own folder that it imports
  (`followed_modules`: penguin_utils_base's input_fn), after its own.
  """
  keys = []
  for followed in followed_modules(module):
    keys += [key for key in _own_input_label_keys(followed)
             if key not in keys]
  return tuple(keys)


# The function TFX Transform calls, and how its source names the label.
PREPROCESSING_FN = 'preprocessing_fn'
_LABEL_WORD = 'label'


@dataclasses.dataclass(frozen=True)
class TransformOutput:
  """A feature a preprocessing_fn outputs: `outputs[expression] = ...`."""
  key: str
  expression: str

  @property
  def is_label(self) -> bool:
    """True when the expression names a label (`outputs[_LABEL_KEY]`)."""
    return _LABEL_WORD in self.expression.lower()


def preprocessing_outputs(module: Any) -> Tuple[TransformOutput, ...]:
  """The outputs of the module's preprocessing_fn whose keys its source fixes.

  Read from the subscript assignments of preprocessing_fn
  (`outputs[features.LABEL_KEY] = ...`); keys made in a loop
  (`outputs[_transformed_name(key)]` for each key) are not known here.
  """
  fn = getattr(module, PREPROCESSING_FN, None)
  try:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
  except (OSError, TypeError, SyntaxError, ValueError):
    return ()
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Assign):
      continue
    for target in node.targets:
      if not isinstance(target, ast.Subscript):
        continue
      key = evaluate_key(target.slice, module)
      if key is not None and key not in [output.key for output in found]:
        found.append(TransformOutput(key, ast.unparse(target.slice)))
  return tuple(found)


def _constant_label_keys(module: Any) -> List[str]:
  """LABEL_KEY, else _LABEL_KEY, each transformed first (`tips` -> `tips_xf`).

  The TFX examples keep the raw label in `_LABEL_KEY` and name transformed
  features with `_transformed_name` (`transformed_name` in the penguin and
  mnist bases); the module's own constants first, then those of the modules
  of its folder it imports.
  """
  candidates = []
  for followed in followed_modules(module):
    candidates += [key for key in _own_constant_label_keys(followed)
                   if key not in candidates]
  return candidates


def _own_constant_label_keys(module: Any) -> List[str]:
  candidates = []
  for attribute in ('LABEL_KEY', '_LABEL_KEY'):
    key = getattr(module, attribute, None)
    if not isinstance(key, str) or not key:
      continue
    transformed_name = (getattr(module, '_transformed_name', None) or
                        getattr(module, 'transformed_name', None))
    if callable(transformed_name):
      try:
        transformed = transformed_name(key)
      except Exception:  # pylint: disable=broad-except
        transformed = None
      if isinstance(transformed, str) and transformed not in candidates:
        candidates.append(transformed)
    if key not in candidates:
      candidates.append(key)
  return candidates


def label_keys(module: Any) -> LabelKeys:
  """The label keys a stock module names, and where the first one comes from."""
  from_input = input_label_keys(module)
  candidates = list(from_input)
  candidates += [key for key in _constant_label_keys(module)
                 if key not in candidates]
  return LabelKeys(keys=tuple(candidates), from_input=bool(from_input))


def label_key_candidates(module: Any) -> Tuple[str, ...]:
  """Label keys a stock module names, best first (see `label_keys`)."""
  return label_keys(module).keys


def _own_functions(module: Any) -> Iterator[Tuple[str, Callable[..., Any]]]:
  for name, value in sorted(vars(module).items()):
    if (isinstance(value, types.FunctionType) and
        getattr(value, '__module__', None) == module.__name__):
      yield name, value


def keras_model_builders(module: Any) -> List[str]:
  """Functions whose names say they build a Keras model, as the module names
  them: its own (`_make_keras_model`), then those of the modules of its
  folder it imports (`base.build_keras_model`)."""
  builders = [name for name, _ in _own_functions(module)
              if 'keras_model' in name]
  for alias, value in sorted(vars(module).items()):
    if (isinstance(value, types.ModuleType) and
        any(value is followed for followed in followed_modules(module)[1:])):
      builders += [f'{alias}.{name}' for name, _ in _own_functions(value)
                   if 'keras_model' in name]
  return builders


def _function_tree(fn: Callable[..., Any]) -> Optional[ast.AST]:
  try:
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))
  except (OSError, TypeError, SyntaxError, ValueError):
    return None


def fit_calls(module: Any, run_fn: Callable[..., Any]) -> Optional[int]:
  """How many `.fit(...)` calls run_fn and the module functions it calls make.

  None when a source cannot be read.
  """
  count = 0
  for fn in _reachable(module, [getattr(run_fn, '__name__', '')]) or [run_fn]:
    tree = _function_tree(fn)
    if tree is None:
      return None
    count += sum(1 for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and
                 isinstance(node.func, ast.Attribute) and node.func.attr == FIT)
  return count


def builder_calls(run_fn: Callable[..., Any],
                  builders: Sequence[str]) -> List[str]:
  """How run_fn calls each builder, its arguments spelled out.

  An argument that run_fn assigns from a call of a module function
  (`hparams = _get_hyperparameters()`) is replaced by that call:
  `_make_keras_model(_get_hyperparameters())`; others stay as written
  (`_build_keras_model(feature_names)`).
  """
  tree = _function_tree(run_fn)
  if tree is None:
    return list(builders)
  assigned = {}
  for node in ast.walk(tree):
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and
        isinstance(node.targets[0], ast.Name) and
        isinstance(node.value, ast.Call) and
        isinstance(node.value.func, ast.Name)):
      assigned.setdefault(node.targets[0].id, node.value)
  calls = []
  for node in ast.walk(tree):
    if (not isinstance(node, ast.Call) or
        ast.unparse(node.func) not in builders):
      continue
    call = ast.Call(
        func=node.func,
        args=[assigned.get(arg.id, arg) if isinstance(arg, ast.Name) else arg
              for arg in node.args],
        keywords=node.keywords)
    text = ast.unparse(call)
    if text not in calls:
      calls.append(text)
  return calls or list(builders)


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
  """A code object and those nested in it (lambdas, comprehensions)."""
  yield code
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      yield from _code_objects(const)


def _names(fn: Callable[..., Any]) -> Set[str]:
  """The global and attribute names a function's code uses."""
  code = getattr(fn, '__code__', None)
  if code is None:
    return set()
  return {name for c in _code_objects(code) for name in c.co_names}


def _strings(fn: Callable[..., Any]) -> Set[str]:
  """The string constants in a function's code (dict keys included)."""
  code = getattr(fn, '__code__', None)
  found = set()

  def add(value):
    if isinstance(value, str):
      found.add(value)
    elif isinstance(value, tuple):
      for item in value:
        add(item)

  for c in (_code_objects(code) if code is not None else ()):
    for const in c.co_consts:
      add(const)
  return found


def _reachable(module: Any, start: Sequence[str]) -> List[Callable[..., Any]]:
  """The module's functions `start` names, and those they call, transitively."""
  own = dict(_own_functions(module))
  seen, queue = [], [name for name in start if name in own]
  while queue:
    name = queue.pop(0)
    if name in seen:
      continue
    seen.append(name)
    queue.extend(sorted(n for n in _names(own[name]) if n in own))
  return [own[name] for name in seen]


def _takes_fn_args_and_schema(fn: Callable[..., Any]) -> bool:
  """True when fn(a, b) binds and fn() does not: (fn_args, schema)."""
  try:
    signature = inspect.signature(fn)
    signature.bind(None, None)
  except (TypeError, ValueError):
    return False
  required = [p for p in signature.parameters.values()
              if p.default is p.empty and
              p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  return len(required) == 2


def trains_an_estimator(run_fn: Callable[..., Any]) -> bool:
  """True when run_fn trains a tf.estimator Estimator itself."""
  names = _names(run_fn)
  return (any(name in names for name in _ESTIMATOR_TRAINING_NAMES) or
          any(name.endswith('Estimator') for name in names) or
          ESTIMATOR_KEY in _strings(run_fn))


def estimator_builders(module: Any, run_fn: Callable[..., Any]) -> List[str]:
  """Functions run_fn calls that build its Estimator as trainer_fn would.

  A function of the module that run_fn names, that takes two arguments
  (fn_args, schema) and returns a dict holding ESTIMATOR_KEY (as the TFX
  template's `_create_train_and_eval_spec` does), when run_fn trains an
  Estimator.
  """
  if not trains_an_estimator(run_fn):
    return []
  own = dict(_own_functions(module))
  return [name for name in sorted(_names(run_fn))
          if name in own and own[name] is not run_fn and
          _takes_fn_args_and_schema(own[name]) and
          ESTIMATOR_KEY in _strings(own[name])]


def sparse_columns_in_dense_features(module: Any,
                                     builders: Sequence[str]) -> List[str]:
  """The sparse feature-column functions the builders feed to DenseFeatures.

  Empty unless the code reachable from the builders uses `DenseFeatures`.
  """
  names = set()
  for fn in _reachable(module, builders):
    names |= _names(fn)
  if DENSE_FEATURES not in names:
    return []
  return sorted(name for name in names
                if name in _SPARSE_COLUMN_FUNCTIONS or
                name.startswith(_SPARSE_COLUMN_PREFIX))


def dense_features_warning(columns: Sequence[str]) -> str:
  """What to replace when a Keras model reads sparse columns with DenseFeatures."""
  return (
      f'tf.keras.layers.DenseFeatures over {", ".join(columns)} columns '
      'makes sparse tensors, whose data-dependent shapes a TPU computation '
      'cannot hold: give the model a tf.keras.Input per id feature and '
      'one-hot it (tf.one_hot, or tf.keras.layers.CategoryEncoding) or embed '
      'it (tf.keras.layers.Embedding), as components/taxi_keras_module.py '
      'does; keep DenseFeatures for numeric_column only.')


def estimator_run_fn_message(module_file: str, builders: Sequence[str]) -> str:
  """What a run_fn that trains an Estimator TPUTrainer cannot reach must change."""
  if builders:
    how = (f'add one line naming the function that returns it: '
           f'`trainer_fn = {builders[0]}` (run_fn calls '
           f'{", ".join(builders)}; TPUTrainer could not tell which one '
           'builds the Estimator)')
  else:
    how = ('move the code that builds the Estimator into a function '
           "build(fn_args, schema) returning {'estimator': estimator} and "
           'add the line `trainer_fn = build`')
  return (
      f'Module {module_file} defines run_fn(fn_args), which trains a '
      'tf.estimator Estimator itself, so TPUTrainer cannot run it on TPU. '
      "TPUTrainer takes the Estimator of the stock Trainer's "
      'trainer_fn(fn_args, schema) contract (a dict whose '
      f"{ESTIMATOR_KEY!r} is the Estimator) and trains it itself: {how}. "
      'The train_and_evaluate and export code of run_fn are not needed; '
      'keep run_fn for the stock Trainer.')


def run_fn_message(module_file: str, labels: LabelKeys,
                   builders: Sequence[str] = (),
                   sparse_columns: Sequence[str] = (),
                   fits: Optional[int] = 0,
                   calls: Sequence[str] = ()) -> str:
  """What a Keras `run_fn` module whose model TPUTrainer cannot take must do.

  Args:
    module_file: how the message names the module.
    labels: the label keys it names.
    builders: its Keras model builders.
    sparse_columns: sparse columns its builders feed to DenseFeatures.
    fits: how many model.fit calls run_fn makes (None: unknown).
    calls: how run_fn calls the builders (`builder_calls`).
  """
  if labels.keys and labels.from_input:
    label = (f' (its label: LABEL_KEY = {labels.keys[0]!r}, as its input '
             "function reads it, or custom_config['label_key'])")
  elif labels.keys:
    label = (f' (its label: LABEL_KEY = {labels.keys[0]!r} is a guess from '
             'the label constant of the module: use the label feature its '
             "preprocessing_fn outputs, in LABEL_KEY or custom_config"
             "['label_key'])")
  else:
    label = (" (name the label with LABEL_KEY or custom_config['label_key']:"
             ' the label feature the preprocessing_fn outputs)')
  if fits is None:
    reason = 'the source of run_fn cannot be read'
  elif fits == 0:
    reason = ('run_fn calls no model.fit (it trains in a loop of its own, '
              'or not at all)')
  else:
    reason = f'run_fn calls model.fit {fits} times, not once'
  if calls:
    model = (f'the model that run_fn builds, compiled, e.g. '
             f'`def build_keras_model(params): return {calls[0]}` (as run_fn '
             'calls it; take the arguments from params if they are tuned)')
  elif builders:
    model = (f'the model that run_fn builds with {", ".join(builders)}, '
             'compiled')
  else:
    model = 'the model that run_fn builds, compiled'
  warning = (f' Before that model can train on TPU: its '
             f'{dense_features_warning(sparse_columns)}'
             if sparse_columns else '')
  return (
      f'Module {module_file} defines run_fn(fn_args), the stock TFX '
      "Trainer's contract for Keras. TPUTrainer takes the model of such a "
      'run_fn at its one model.fit call and trains it itself, but here '
      f'{reason}, so TPUTrainer cannot run it on TPU. Define '
      f'build_keras_model(params) instead, returning {model} (params holds '
      "custom_config['params'] and the tuned hyperparameters); TPUTrainer "
      f'feeds it from its own input functions{label}, trains it and exports '
      'it. The input_fn, fit and save code of run_fn are not needed; keep '
      f'run_fn for the stock Trainer.{warning}')
