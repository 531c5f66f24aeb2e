"""TPU embedding tables checked before training: features, ids, model_fn, hosts."""

import dataclasses
import os
import tempfile
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow.python.tpu import feature_column as tpu_fc  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tpu import tpu_function  # pylint: disable=g-direct-tensorflow-import
from tensorflow_estimator.python.estimator.tpu import _tpu_estimator_embedding as estimator_embedding  # pylint: disable=g-direct-tensorflow-import

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.data import embedding_feed
from tfx_tpu_trainer.model_fn import embedding_spec
from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.preflight import graph as preflight_graph
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import sample as preflight_sample
from tfx_tpu_trainer.training import estimator_builder
from tfx_tpu_trainer.training import tpu_slice

__all__ = ['PHASE', 'available_memory_bytes', 'hosts_of', 'memory_findings',
           'feature_findings', 'enqueue_findings', 'sample_on_tpu',
           'tables_used', 'column_use_findings', 'add_table_variables',
           'tables_read', 'column_findings', 'findings_before_steps',
           'check_before_training']

PHASE = 'embedding'
ERROR, WARNING, INFO = (preflight_report.ERROR, preflight_report.WARNING,
                        preflight_report.INFO)
_GB = 1e9
_NAMES_SHOWN = 8
# The rows each finding about the tables names, largest first.
_TABLES_SHOWN = 3


def available_memory_bytes() -> int:
  """This machine's available memory (Linux `MemAvailable`, else its RAM)."""
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def hosts_of(config: config_lib.TrainerConfig) -> int:
  """The hosts the tables are split over: the slice's workers, else one.

  The workers of `tpu_workers` or `TPU_WORKER_HOSTNAMES`
  (`tpu_slice.worker_addresses`); off the TPU, this process.
  """
  if not config.use_tpu:
    return 1
  return len(tpu_slice.worker_addresses(config)) or 1


def _size(size: float) -> str:
  """Bytes as people read them: '320 MB', '1.28 GB'."""
  for unit, scale in (('GB', 1e9), ('MB', 1e6), ('kB', 1e3)):
    if size >= scale:
      return f'{size / scale:.3g} {unit}'
  return f'{int(size)} bytes'


def _tables_text(embedding: embedding_spec.EmbeddingSpec, hosts: int) -> str:
  largest = sorted(embedding.tables,
                   key=lambda t: -t.bytes_per_host(hosts, embedding.slots))
  shown = '; '.join(
      f'{t.name!r}: {t.vocabulary_size:,} rows x {t.dimension}, '
      f'{_size(t.bytes_per_host(hosts, embedding.slots))} per host'
      for t in largest[:_TABLES_SHOWN])
  more = len(largest) - _TABLES_SHOWN
  return shown + (f'; and {more} smaller' if more > 0 else '')


def memory_findings(embedding: embedding_spec.EmbeddingSpec,
                    config: config_lib.TrainerConfig,
                    available_bytes: Optional[int] = None
                    ) -> List[preflight_report.Finding]:
  """The busiest host's share of the tables against its memory budget.

  A TPU splits each table by rows over the hosts ("div"); each host keeps
  its rows and their optimizer slots as float32 variables, loaded into its
  TPU's memory before training and read back for checkpoints. Off the TPU
  the whole table and its slots live in this process.
  """
  hosts = hosts_of(config)
  if config.embedding_host_memory_gb is not None:
    budget = config.embedding_host_memory_gb * _GB
    source = (f"custom_config['embedding_host_memory_gb']="
              f'{config.embedding_host_memory_gb:g}')
  else:
    budget = (available_memory_bytes() if available_bytes is None else
              available_bytes)
    source = "this machine's available memory"
  need = embedding.bytes_per_host(hosts)
  where = (f'on each of {hosts} host{"s" if hosts > 1 else ""}'
           if config.use_tpu else 'in this process (use_tpu=False)')
  summary = (f'{len(embedding.tables)} table(s) with {embedding.optimizer} '
             f'({embedding.slots} slot(s) per row) need {_size(need)} '
             f'{where} ({_tables_text(embedding, hosts)})')
  if need <= budget:
    return [preflight_report.Finding(
        'embedding-host-memory', INFO,
        f'{summary}, within the {_size(budget)} budget ({source}).', PHASE)]
  return [preflight_report.Finding(
      'embedding-host-memory', ERROR,
      f'{summary}: more than the {_size(budget)} budget ({source}), '
      'so the host would run out of memory loading them.', PHASE,
      fix='Split the tables over more hosts (a multi-host slice, '
      "custom_config['tpu_workers']), hash the ids into fewer rows or "
      'lower the dimension, or use an optimizer with fewer slots '
      '(StochasticGradientDescentParameters has none, Adagrad one, Adam and '
      "FTRL two); set custom_config['embedding_host_memory_gb'] to the "
      "TPU hosts' memory when it differs from this machine's.",
      where=embedding.where)]


def _as_tensor(value: Any) -> Any:
  """A sample value as a tensor of the current graph (or eager)."""
  value = _as_value(value)
  if isinstance(value, tf.compat.v1.SparseTensorValue):
    return tf.SparseTensor(value.indices, value.values, value.dense_shape)
  return tf.constant(value)


def _as_value(value: Any) -> Any:
  """A sample value as numpy (a SparseTensorValue for a sparse one)."""
  if isinstance(value, tf.compat.v1.SparseTensorValue):
    return value
  if isinstance(value, tf.SparseTensor):
    return tf.compat.v1.SparseTensorValue(
        value.indices.numpy(), value.values.numpy(), value.dense_shape.numpy())
  return value.numpy() if hasattr(value, 'numpy') else np.asarray(value)


def _fed(embedding: embedding_spec.EmbeddingSpec,
         features: Mapping[str, Any]) -> Dict[str, Any]:
  """The sample's features as a TPU receives them (eager tensors)."""
  return embedding_feed.feed_features(
      {name: _as_tensor(value) for name, value in features.items()},
      embedding.columns)


def _missing_features(embedding: embedding_spec.EmbeddingSpec,
                      features: Mapping[str, Any]
                      ) -> List[preflight_report.Finding]:
  have = sorted(features)
  shown = ', '.join(repr(n) for n in have[:_NAMES_SHOWN]) + (
      ', ...' if len(have) > _NAMES_SHOWN else '')
  return [
      preflight_report.Finding(
          'embedding-feature-missing', ERROR,
          f'reads the feature {key!r}, which the examples do not have (they '
          f'have {shown}).', PHASE,
          fix='Output the feature from the preprocessing_fn (or the '
          "module's input_fn), or give the column the key of a feature the "
          'examples have.',
          where=f'the TPU embedding column {column!r} of {embedding.where}')
      for key, column in sorted(embedding.raw_features.items())
      if key not in features
  ]


def _id_range_findings(embedding: embedding_spec.EmbeddingSpec,
                       fed: Mapping[str, Any],
                       origin: str) -> List[preflight_report.Finding]:
  findings = []
  for column in embedding.columns:
    ids = fed[column.get_feature_key_name()]
    rows = column.get_embedding_table_size()[0]
    values = np.asarray(ids.values)
    if not ids.dtype.is_integer:
      findings.append(preflight_report.Finding(
          'embedding-ids', ERROR,
          f'gives {ids.dtype.name} values, not integer ids: TPU embedding '
          'looks rows up by integer id.', PHASE,
          where=f'the TPU embedding column {column.name!r}'))
      continue
    bad = values[(values < 0) | (values >= rows)]
    if bad.size:
      findings.append(preflight_report.Finding(
          'embedding-id-range', ERROR,
          f'gives ids {sorted(set(bad.tolist()))[:5]} in {origin}, outside '
          f'its table of {rows:,} rows [0, {rows}): on CPU the lookup fails '
          'when such an id comes; on a TPU nothing checks it.', PHASE,
          fix='Size the column for every id (num_buckets above the largest '
          'id), map stray ids to a row (categorical_column_with_identity\'s '
          'default_value), or hash the ids '
          '(categorical_column_with_hash_bucket).',
          where=f'the TPU embedding column {column.name!r} of '
          f'{embedding.where}'))
  return findings


def feature_findings(embedding: embedding_spec.EmbeddingSpec,
                     sample: preflight_sample.SampleBatch
                     ) -> List[preflight_report.Finding]:
  """The spec's columns against a sample: features present, ids in range."""
  features = sample.features
  if not isinstance(features, Mapping):
    return [preflight_report.Finding(
        'embedding-feature-missing', ERROR,
        'the input gives the features as one tensor, not a dict by name, so '
        'no TPU embedding column can read its feature.', PHASE,
        where=embedding.where)]
  missing = _missing_features(embedding, features)
  if missing:
    return missing
  try:
    fed = _fed(embedding, features)
  except Exception as e:  # pylint: disable=broad-except
    return [preflight_report.Finding(
        'embedding-ids', ERROR,
        f'the columns could not turn the sample\'s features into ids: '
        f'{type(e).__name__}: {e}', PHASE, where=embedding.where,
        error=f'{type(e).__name__}: {e}')]
  return _id_range_findings(embedding, fed, sample.origin)


def enqueue_findings(embedding: embedding_spec.EmbeddingSpec,
                     sample: preflight_sample.SampleBatch
                     ) -> List[preflight_report.Finding]:
  """The fed sample split and enqueued as TPUEstimator does, in a graph.

  `split_inputs` pops each column's ids and weights from the batch and TF's
  TPUEmbedding builds its enqueue ops from them; both run their checks
  (integer ids, sparse weights, the tables' configs, the optimizer) as on a
  TPU host, for one host with one core. The ops are built, not run.
  """
  if not isinstance(sample.features, Mapping):
    return []
  try:
    with tf.Graph().as_default():
      features = _fed(embedding, sample.features)
      tpu_embedding = embedding_spec.tpu_embedding_for(
          embedding, sample.batch_size, num_hosts=1, num_cores=1)
      context = types.SimpleNamespace(
          embedding_config=types.SimpleNamespace(tpu_embedding=tpu_embedding),
          tensor_core_embedding_columns=(
              embedding.spec.tensor_core_feature_columns),
          batch_size_for_input_fn=sample.batch_size)
      _, _, enqueue_datas = estimator_embedding.split_inputs(
          context, dict(features), None)
      tpu_embedding.generate_enqueue_ops(enqueue_datas)
  except Exception as e:  # pylint: disable=broad-except
    return [preflight_report.Finding(
        'embedding-enqueue', ERROR,
        f'TPUEstimator could not enqueue the ids of the sample: '
        f'{type(e).__name__}: {e}', PHASE, where=embedding.where)]
  weights = (f' with the weights of {", ".join(map(repr, embedding.weight_keys))}'
             if embedding.weight_keys else '')
  return [preflight_report.Finding(
      'embedding-enqueue', INFO,
      f'the ids of {", ".join(repr(k) for k in embedding.feature_keys)}'
      f'{weights} enqueue as TPUEstimator enqueues them on a TPU host.',
      PHASE)]


def _activations(embedding: embedding_spec.EmbeddingSpec,
                 batch_size: int) -> Dict[str, np.ndarray]:
  """What TPU embedding hands the model_fn: [batch, dimension] per feature.

  Values as the tables' default initializer draws them; a sequence column
  gets [batch, max_sequence_length, dimension] and its lengths.
  """
  rng = np.random.RandomState(0)
  activations = {}
  for column in embedding.columns:
    key = column.get_feature_key_name()
    dimension = column.get_embedding_table_size()[1]
    length = column.get_max_sequence_length()
    shape = ([batch_size, length, dimension] if length else
             [batch_size, dimension])
    activations[key] = rng.normal(0, dimension**-0.5, shape).astype(np.float32)
    if length:
      activations[tpu_fc.get_sequence_length_feature_key_name_from_feature_key_name(  # pylint: disable=line-too-long
          key)] = np.full([batch_size], length, np.int64)
  return activations


def sample_on_tpu(sample: preflight_sample.SampleBatch,
                  embedding: embedding_spec.EmbeddingSpec
                  ) -> preflight_sample.SampleBatch:
  """The sample as the model_fn sees it on a TPU: activations for the ids.

  The features are fed (`embedding_feed`); the columns' ids and weights,
  which TPUEstimator hands to TPU embedding, are replaced by the
  activations it returns; what remains is infed as it is (and checked as
  the input).
  """
  if not isinstance(sample.features, Mapping):
    return sample
  try:
    features = _fed(embedding, sample.features)
  except Exception:  # pylint: disable=broad-except
    features = dict(sample.features)  # feature_findings reports why.
  specs = dict(sample.element_spec[0])
  for key in embedding.feature_keys + embedding.weight_keys:
    features.pop(key, None)
    specs.pop(key, None)
  values = {name: _as_value(value) for name, value in features.items()}
  for name, value in values.items():
    if isinstance(value, np.ndarray):
      specs[name] = tf.TensorSpec(value.shape, tf.as_dtype(
          preflight_graph.numpy_value_dtype(value)), name=name)
    else:
      specs[name] = tf.SparseTensorSpec(value.dense_shape, value.values.dtype)
  for name, value in _activations(embedding, sample.batch_size).items():
    values[name] = value
    specs[name] = tf.TensorSpec(value.shape, tf.as_dtype(value.dtype),
                                name=name)
  return dataclasses.replace(
      sample, features=values, element_spec=(specs, sample.element_spec[1]))


def tables_used(graph: tf.Graph) -> Set[str]:
  """The tables whose TPU embedding columns a model_fn read (as on a TPU).

  On a TPU each column records its table in the graph when the model_fn
  reads it; TPUEstimator names the table variables from this record.
  """
  records = graph.get_collection(tpu_fc._TPU_FC_TO_SCOPE)  # pylint: disable=protected-access
  return set(records[0]) if records else set()


def column_use_findings(embedding: embedding_spec.EmbeddingSpec,
                        used: Set[str],
                        phase: str) -> List[preflight_report.Finding]:
  """The spec's tables against those the model_fn reads."""
  listed = {t.name for t in embedding.tables}
  findings = []
  unused = sorted(listed - used)
  if unused:
    findings.append(preflight_report.Finding(
        'embedding-column-unused', ERROR,
        f'lists TPU embedding column(s) of table(s) {unused} that the '
        'model_fn never reads'
        + (f' (it reads {sorted(used)})' if used else
           ' (it reads no TPU embedding column at all)') +
        ': on a TPU, TPUEstimator cannot name their variables and fails '
        'after the first step is built.', phase,
        fix='Read every column of the spec with '
        'tf.compat.v1.feature_column.input_layer (or DenseFeatures) in the '
        'model_fn, or leave the unread ones out of the spec: build both '
        'from one function, as components/taxi_embedding_module.py does.',
        where=embedding.where))
  extra = sorted(used - listed)
  if extra:
    findings.append(preflight_report.Finding(
        'embedding-column-not-in-spec', ERROR,
        f'reads TPU embedding column(s) of table(s) {extra} that '
        f'{embedding.where} does not list: on a TPU nothing looks their '
        'ids up, and the model_fn would read the raw ids as if they were '
        'embeddings.', phase,
        fix='Add the columns to the EmbeddingConfigSpec\'s feature_columns '
        '(build both from one function).', where='the model_fn'))
  return findings


def add_table_variables(graph: tf.Graph,
                        embedding: embedding_spec.EmbeddingSpec) -> None:
  """The tables a step read, as CPU variables in its graph (its checkpoint).

  On a TPU, TPUEstimator creates them beside the computation under the
  names the columns recorded while the model_fn read them: the names of the
  CPU lookup's variables, which the `{serve}` export restores from the
  checkpoint. The optimizer's slots are left out: the export does not read
  them.
  """
  records = graph.get_collection(tpu_fc._TPU_FC_TO_SCOPE)  # pylint: disable=protected-access
  if not records:
    return
  with graph.as_default():
    for table in embedding.tables:
      if table.name not in records[0]:
        continue
      scope, variable = records[0][table.name]
      column = embedding.column_of(table.features[0])
      tf.compat.v1.get_variable(
          f'{scope}/{variable}' if scope else variable,
          [table.vocabulary_size, table.dimension],
          initializer=column.get_initializer(), trainable=False)


def _placeholders(values: Any) -> Any:
  return tf.nest.map_structure(
      lambda v: tf.compat.v1.placeholder(
          preflight_graph.numpy_value_dtype(v), np.shape(v)), values)


def tables_read(model_fn: Callable[..., Any], params: Mapping[str, Any],
                run_config: Any, sample: preflight_sample.SampleBatch
                ) -> Tuple[Set[str], Optional[str]]:
  """The tables a model_fn reads when built as on a TPU, and its error.

  The TRAIN step is built (not compiled) in a TPU shard context on the
  sample as `sample_on_tpu` gives it; a model_fn that fails part-way has
  recorded the columns it read until then.
  """
  features = {name: value for name, value in sample.features.items()
              if isinstance(value, np.ndarray) and value.dtype.kind not in 'OSU'}
  graph = tf.Graph()
  error = None
  with graph.as_default(), tpu_function.tpu_shard_context(1):
    tf.compat.v1.train.create_global_step()
    try:
      estimator_spec_adapter.call_model_fn(
          model_fn, _placeholders(features),
          None if sample.labels is None else _placeholders(sample.labels),
          tf_estimator.ModeKeys.TRAIN,
          dict(params, use_tpu=True, batch_size=sample.batch_size),
          run_config)
    except Exception as e:  # pylint: disable=broad-except
      error = f'{type(e).__name__}: {e}'
  return tables_used(graph), error


def column_findings(embedding: embedding_spec.EmbeddingSpec,
                    model_fn: Callable[..., Any], params: Mapping[str, Any],
                    config: config_lib.TrainerConfig,
                    sample: preflight_sample.SampleBatch,
                    report_failure: bool) -> List[preflight_report.Finding]:
  """The spec's tables against those the model_fn reads (built as on a TPU).

  Args:
    embedding: the spec.
    model_fn: the TPU model_fn.
    params: the run's params.
    config: the trainer config.
    sample: the raw sample (`sample_on_tpu` turns it into the TPU's).
    report_failure: a model_fn that fails as built on a TPU is a warning
      (off the TPU, where nothing else builds it so); the TPU preflight's
      train step reports such a failure itself.

  Returns:
    The findings: tables listed and never read (only when the build got
    through), tables read and not listed.
  """
  cpu_config = dataclasses.replace(config, use_tpu=False, tpu=None)
  with tempfile.TemporaryDirectory(prefix='tpu-embedding-check-') as tmp:
    used, error = tables_read(
        model_fn, params, estimator_builder.build_run_config(cpu_config, tmp),
        sample_on_tpu(sample, embedding))
  findings = column_use_findings(embedding, used, PHASE)
  if error is not None:
    # Columns after the failure were never reached: only extra ones count.
    findings = [f for f in findings
                if f.code == 'embedding-column-not-in-spec']
    if report_failure and not findings:
      findings.append(preflight_report.Finding(
          'embedding-columns-not-checked', WARNING,
          'which TPU embedding columns the model_fn reads was not checked: '
          f'built as on a TPU it failed: {error}', PHASE))
  return findings


def findings_before_steps(embedding: embedding_spec.EmbeddingSpec,
                          model_fn: Callable[..., Any],
                          params: Mapping[str, Any],
                          config: config_lib.TrainerConfig,
                          sample: preflight_sample.SampleBatch,
                          on_tpu: bool) -> List[preflight_report.Finding]:
  """Every embedding check: memory, features and ids, enqueue, columns read.

  The enqueue (TPU only) is tried once the features are found and fed.
  """
  findings = memory_findings(embedding, config)
  feature_problems = feature_findings(embedding, sample)
  findings += feature_problems
  if on_tpu and not any(f.severity == ERROR for f in feature_problems):
    findings += enqueue_findings(embedding, sample)
  return findings + column_findings(embedding, model_fn, params, config,
                                    sample, report_failure=not on_tpu)


def check_before_training(
    run: prepare.PreparedRun, config: config_lib.TrainerConfig,
    train_input_fn: Callable[[Dict[str, Any]], tf.data.Dataset]
) -> preflight_report.PreflightReport:
  """Off the TPU (use_tpu=False): the tables against the hosts and data.

  The memory the tables need, the columns' features in the first training
  batch and their ids within the tables, and the columns the model_fn
  reads (built once as on a TPU) against the spec: what would fail later in
  this run, or once the same module trains on a TPU.

  Raises:
    preflight_report.PreflightError: listing the errors.
  """
  report = preflight_report.PreflightReport(
      source=run.module.module_file, num_shards=1,
      sample_origin='the first batch of the training input')
  sample = preflight_sample.from_input_fn(
      train_input_fn, run.params, config.train_batch_size,
      report.sample_origin)
  report.findings.extend(findings_before_steps(
      run.embedding, run.model_fn, run.params, config, sample, on_tpu=False))
  logging.info('TPU embedding checks: %s', [f.line() for f in report.findings])
  report.raise_if_not_ready(
      f'{report.source}: {len(report.errors)} error(s) found before training '
      f'in the TPU embedding tables of {run.embedding.where}:')
  return report
