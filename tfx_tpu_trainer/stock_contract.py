"""What a module written for the stock TFX Trainer names: read, never run."""

import ast
import dataclasses
import inspect
import textwrap
import types
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set, Tuple

__all__ = ['LABEL_KEY_KEYWORD', 'ESTIMATOR_KEY', 'DENSE_FEATURES', 'LabelKeys',
           'evaluate_key', 'input_label_keys', 'PREPROCESSING_FN',
           'TransformOutput', 'preprocessing_outputs', 'label_keys',
           'label_key_candidates', 'keras_model_builders',
           'trains_an_estimator', 'estimator_builders',
           'sparse_columns_in_dense_features', 'dense_features_warning',
           'estimator_run_fn_message', 'run_fn_message']

# The keyword with which TFX modules name the label to their input
# (`tfxio.TensorFlowDatasetOptions(batch_size=..., label_key=...)`).
LABEL_KEY_KEYWORD = 'label_key'
# What the stock Trainer's estimator contract returns the Estimator under.
ESTIMATOR_KEY = 'estimator'
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


def input_label_keys(module: Any) -> Tuple[str, ...]:
  """The labels the module's code passes as `label_key=`, in source order."""
  tree = _source_tree(module)
  if tree is None:
    return ()
  keys = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    for keyword in node.keywords:
      if keyword.arg == LABEL_KEY_KEYWORD:
        key = evaluate_key(keyword.value, module)
        if key is not None and key not in keys:
          keys.append(key)
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
  features with `_transformed_name`.
  """
  candidates = []
  for attribute in ('LABEL_KEY', '_LABEL_KEY'):
    key = getattr(module, attribute, None)
    if not isinstance(key, str) or not key:
      continue
    transformed_name = getattr(module, '_transformed_name', None)
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
  """Functions of a module whose names say they build a Keras model."""
  return [name for name, _ in _own_functions(module) if 'keras_model' in name]


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
                   sparse_columns: Sequence[str] = ()) -> str:
  """What a module with the stock Trainer's Keras `run_fn` must change."""
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
  model = (f'the model that run_fn builds with {", ".join(builders)}'
           if builders else 'the model that run_fn builds')
  warning = (f' Before that model can train on TPU: its '
             f'{dense_features_warning(sparse_columns)}'
             if sparse_columns else '')
  return (
      f'Module {module_file} defines run_fn(fn_args), the stock TFX '
      "Trainer's contract for Keras: run_fn trains and saves the model "
      'itself, so TPUTrainer cannot run it on TPU. Define '
      f'build_keras_model(params) instead, returning {model}, compiled '
      '(params holds custom_config[\'params\'] and the tuned '
      f'hyperparameters); TPUTrainer feeds it from its own input '
      f'functions{label}, trains it and exports it. The input_fn, fit and '
      'save code of run_fn are not needed; keep run_fn for the stock Trainer.'
      f'{warning}')
