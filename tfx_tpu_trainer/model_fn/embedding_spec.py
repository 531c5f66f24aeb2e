"""A module's TPU embedding tables: `embedding_config_spec(params)`, checked."""

import dataclasses
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.tpu import feature_column as tpu_fc  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tpu import feature_column_v2 as tpu_fc_v2  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tpu import tpu_embedding  # pylint: disable=g-direct-tensorflow-import
from tensorflow_estimator.python.estimator.tpu import _tpu_estimator_embedding as estimator_embedding  # pylint: disable=g-direct-tensorflow-import

from tfx_tpu_trainer import user_module as user_module_lib

__all__ = ['EmbeddingSpecError', 'OPTIMIZER_SLOTS', 'TPU_INPUT_MODES',
           'Table', 'EmbeddingSpec', 'load_embedding_spec', 'table_name',
           'tpu_embedding_for']

# `tf.compat.v1.tpu.experimental.*Parameters` EmbeddingConfigSpec takes, and
# the slot variables each keeps per table row (`_get_slot_variable_names`
# in tensorflow_estimator's tpu/_tpu_estimator_embedding.py).
OPTIMIZER_SLOTS = {
    'StochasticGradientDescentParameters': 0,
    'AdagradParameters': 1,
    'ProximalAdagradParameters': 1,
    'MomentumParameters': 1,
    'AdamParameters': 2,
    'FtrlParameters': 2,
    'RMSPropParameters': 2,
}
# TPUEstimator's per_host_input_for_training with TPU embeddings.
TPU_INPUT_MODES = ('PER_HOST_V1', 'PER_HOST_V2')
_BYTES_PER_VALUE = 4  # float32 rows, on the hosts and in the TPU's memory.
_COLUMN_FUNCTIONS = ('tf.compat.v1.tpu.experimental.embedding_column or '
                     'shared_embedding_columns')
_TPU_COLUMNS = (tpu_fc_v2._TPUEmbeddingColumnV2,  # pylint: disable=protected-access
                tpu_fc_v2._TPUSharedEmbeddingColumnV2)  # pylint: disable=protected-access
_TPU_V1_COLUMNS = (tpu_fc._TPUEmbeddingColumn, tpu_fc._TPUSharedEmbeddingColumn)  # pylint: disable=protected-access


class EmbeddingSpecError(user_module_lib.UserModuleError):
  """The module's embedding_config_spec cannot train on TPU as written."""


def table_name(column: Any) -> str:
  """The TPU embedding table a column looks its ids up in (TPUEstimator's)."""
  return column.get_embedding_var_name()


@dataclasses.dataclass(frozen=True)
class Table:
  """One TPU embedding table.

  Attributes:
    name: the table (the column's embedding variable name).
    vocabulary_size: rows: the ids the table holds, [0, vocabulary_size).
    dimension: the width of a row.
    features: the feature keys looked up in it (a shared table: several).
  """
  name: str
  vocabulary_size: int
  dimension: int
  features: Tuple[str, ...]

  def rows_per_host(self, num_hosts: int) -> int:
    """Rows on the busiest host: tables are split by rows ("div")."""
    return math.ceil(self.vocabulary_size / max(1, num_hosts))

  def bytes_per_host(self, num_hosts: int, slots: int) -> int:
    """The host's share of the table and its optimizer slots, float32."""
    return (self.rows_per_host(num_hosts) * self.dimension * _BYTES_PER_VALUE
            * (1 + slots))


@dataclasses.dataclass(frozen=True)
class EmbeddingSpec:
  """A module's EmbeddingConfigSpec and what TPUTrainer reads from it.

  Attributes:
    spec: what `embedding_config_spec(params)` returned, for TPUEstimator.
    columns: every TPU embedding column of the spec.
    tables: the tables the columns make, by name.
    where: 'embedding_config_spec in MODULE', the subject of errors.
  """
  spec: Any
  columns: Tuple[Any, ...]
  tables: Tuple[Table, ...]
  where: str

  @property
  def optimizer(self) -> str:
    """The class name of the tables' optimization parameters."""
    return type(self.spec.optimization_parameters).__name__

  @property
  def slots(self) -> int:
    """Optimizer slot variables per table row."""
    return OPTIMIZER_SLOTS.get(self.optimizer, 0)

  def column_of(self, feature_key: str) -> Any:
    return next(c for c in self.columns
                if c.get_feature_key_name() == feature_key)

  @property
  def feature_keys(self) -> Tuple[str, ...]:
    """The features TPUEstimator hands to TPU embedding (and pops)."""
    return tuple(c.get_feature_key_name() for c in self.columns)

  @property
  def weight_keys(self) -> Tuple[str, ...]:
    """The weight features of weighted columns (popped with their ids)."""
    return tuple(c.get_weight_key_name() for c in self.columns
                 if c.get_weight_key_name())

  @property
  def raw_features(self) -> Dict[str, str]:
    """Each input feature the columns read -> the column that reads it."""
    found = {}
    for column in self.columns:
      for key in column.parse_example_spec:
        found.setdefault(key, column.name)
    return found

  def table_configs(self) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """TPUEstimator's (table_to_config, feature_to_config) of the columns."""
    return estimator_embedding.get_configs_from_feature_columns(
        list(self.spec.feature_columns))

  def bytes_per_host(self, num_hosts: int) -> int:
    """All tables' share of one host (rows and optimizer slots)."""
    return sum(t.bytes_per_host(num_hosts, self.slots) for t in self.tables)


def load_embedding_spec(module: user_module_lib.UserModule,
                        params: Mapping[str, Any]) -> Optional[EmbeddingSpec]:
  """Calls the module's `embedding_config_spec(params)` and checks it.

  Args:
    module: the loaded user module.
    params: the run's params (as model_fn receives them, without
      batch_size and use_tpu).

  Returns:
    The spec, or None when the module defines no embedding_config_spec.

  Raises:
    EmbeddingSpecError: what it returned is not a spec TPUTrainer can train
      on TPU and on CPU (what is wrong, which column, what to do).
  """
  function = module.embedding_config_spec
  if function is None:
    return None
  try:
    spec = function.fn(params=dict(params))
  except Exception as e:  # pylint: disable=broad-except
    raise function.error(
        f'raised {type(e).__name__}: {_message(e)}{_hint(e)}',
        EmbeddingSpecError) from e
  if not isinstance(spec, tf.compat.v1.estimator.tpu.experimental
                    .EmbeddingConfigSpec):
    raise function.error(
        'must return a tf.compat.v1.estimator.tpu.experimental.'
        f'EmbeddingConfigSpec, got {type(spec).__name__}.', EmbeddingSpecError)
  columns = _checked_columns(spec, function)
  return EmbeddingSpec(spec=spec, columns=columns,
                       tables=_tables(spec, columns, function),
                       where=function.where)


def _optimizer_names() -> str:
  """The optimization parameters TPUEstimator takes, as users import them."""
  public = dir(tf.compat.v1.tpu.experimental)
  return ', '.join(
      f'tf.compat.v1.tpu.experimental.{name}' if name in public else
      f'tensorflow.python.tpu.tpu_embedding.{name}' for name in OPTIMIZER_SLOTS)


def _message(error: Exception) -> str:
  """TF's message; its refusal of an optimizer, without its class list."""
  text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r'\1', str(error))
  refused = re.search(r'optimization_parameters must be an instance of type '
                      r'.*Got (\w+)\.', text, re.S)
  if refused:
    return (f'optimization_parameters is of type {refused.group(1)}, which TPU '
            'embedding does not take.')
  return text


def _hint(error: Exception) -> str:
  """What TPU embedding takes, after an error TF raised about it."""
  text = str(error)
  if 'optimization_parameters' in text:
    return (' TPU embedding updates its tables itself, with one of '
            f'{_optimizer_names()} (not a tf.compat.v1.train or Keras '
            'optimizer); the model_fn\'s optimizer trains the rest of the '
            'model.')
  if 'dimension' in text.lower():
    return (' The dimension of a TPU embedding table (the width of its rows) '
            'must be a positive integer.')
  return ''


def _checked_columns(spec: Any,
                     function: user_module_lib.ModuleFunction
                     ) -> Tuple[Any, ...]:
  """The spec's columns, each one TPUTrainer can feed, train and export."""
  if not spec.feature_columns and not spec.tensor_core_feature_columns:
    raise function.error(
        'returned an EmbeddingConfigSpec of table_to_config_dict and '
        'feature_to_config_dict, without feature_columns: TPUTrainer needs '
        f'the columns ({_COLUMN_FUNCTIONS}) that the model_fn reads with '
        'tf.compat.v1.feature_column.input_layer, which look the ids up on '
        'CPU (use_tpu=False, the {serve} export) as on a TPU. Pass '
        'feature_columns=[...] instead.', EmbeddingSpecError)
  if spec.partition_strategy != 'div':
    raise function.error(
        f'sets partition_strategy={spec.partition_strategy!r}: "mod" splits '
        'the tables over the hosts by id modulo, which the CPU lookups of '
        'the {serve} export (and training with use_tpu=False) do not read '
        'back (TPUEstimator refuses it off TPU). Use the default "div".',
        EmbeddingSpecError)
  columns = tuple(spec.feature_columns or ()) + tuple(
      spec.tensor_core_feature_columns or ())
  for column in columns:
    if isinstance(column, _TPU_V1_COLUMNS) or not isinstance(column,
                                                            _TPU_COLUMNS):
      raise function.error(
          f'lists {type(column).__name__} {column.name!r}: the columns of an '
          f'EmbeddingConfigSpec must be made by {_COLUMN_FUNCTIONS} '
          '(a tf.feature_column.embedding_column or numeric_column is not a '
          'TPU embedding table, and TPUEstimator refuses it on a TPU).',
          EmbeddingSpecError)
  return columns


def _tables(spec: Any, columns: Sequence[Any],
            function: user_module_lib.ModuleFunction) -> Tuple[Table, ...]:
  """The tables of the columns, as TPUEstimator configures them."""
  try:
    estimator_embedding.get_configs_from_feature_columns(
        list(spec.feature_columns))
  except (TypeError, ValueError) as e:
    raise function.error(
        f'returned columns TPUEstimator refuses: {e}', EmbeddingSpecError
    ) from e
  tables: Dict[str, List[Any]] = {}
  for column in columns:
    tables.setdefault(table_name(column), []).append(column)
  return tuple(
      Table(name=name,
            vocabulary_size=int(group[0].get_embedding_table_size()[0]),
            dimension=int(group[0].get_embedding_table_size()[1]),
            features=tuple(c.get_feature_key_name() for c in group))
      for name, group in sorted(tables.items()))


def tpu_embedding_for(embedding: EmbeddingSpec, batch_size: int,
                      num_hosts: int, num_cores: int) -> Any:
  """TF's TPUEmbedding of the spec for a slice shape, built without a TPU.

  Its constructor runs every check TPUEstimator's runs on a TPU (tables,
  features, optimizer, batch size per core), from a device config instead
  of the TPU system's metadata.
  """
  table_to_config, feature_to_config = embedding.table_configs()
  return tpu_embedding.TPUEmbedding(
      table_to_config, feature_to_config, batch_size, tpu_embedding.TRAINING,
      master=None, optimization_parameters=(
          embedding.spec.optimization_parameters),
      cluster_def=None,
      pipeline_execution_with_tensor_core=(
          embedding.spec.pipeline_execution_with_tensor_core),
      partition_strategy=embedding.spec.partition_strategy,
      device_config=tpu_embedding.DeviceConfig(
          num_hosts=num_hosts, num_cores=num_cores, job_name='tpu_worker'))
