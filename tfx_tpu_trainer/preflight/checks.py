"""TPU preflight: on CPU, finds what would fail once a TPU is provisioned."""

import dataclasses
import os
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.model_fn import embedding_spec
from tfx_tpu_trainer.preflight import embedding_checks
from tfx_tpu_trainer.preflight import graph as preflight_graph
from tfx_tpu_trainer.preflight import precision
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import sample as preflight_sample
from tfx_tpu_trainer.preflight import spec_checks
from tfx_tpu_trainer.preflight import xla_flags
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.tpu import facts as tpu_facts
from tfx_tpu_trainer.training import estimator_builder

__all__ = ['DEFAULT_NUM_SHARDS', 'ERROR', 'WARNING', 'INFO', 'ModeKeys',
           'Progress', 'resolve_num_shards', 'per_shard_batch_size',
           'run_preflight', 'check_before_training']

DEFAULT_NUM_SHARDS = 8

ERROR, WARNING, INFO = (preflight_report.ERROR, preflight_report.WARNING,
                        preflight_report.INFO)
# The phases that build, compile and run a step (the slow ones), and how
# their progress lines name the step.
_STEPS = {'train': 'the train step', 'eval': 'the eval step',
          'export': "the export's PREDICT step"}
ModeKeys = tf_estimator.ModeKeys
_INFEED_DTYPES_REJECTED = tpu_facts.INFEED_REJECTED_DTYPES


def resolve_num_shards(config: config_lib.TrainerConfig,
                       num_shards: Optional[int] = None) -> Tuple[int, bool]:
  """The shard count to check for, and whether it was assumed."""
  if num_shards:
    return num_shards, False
  if config.num_shards:
    return config.num_shards, False
  return DEFAULT_NUM_SHARDS, True


def per_shard_batch_size(config: config_lib.TrainerConfig,
                         num_shards: int) -> int:
  """The batch one shard trains on (the sample's size)."""
  return max(1, config.train_batch_size // num_shards)


def _config_findings(config: config_lib.TrainerConfig, num_shards: int,
                     assumed: bool) -> List[preflight_report.Finding]:
  note = (f' (num_shards is not set: {num_shards}, one TPU host, was '
          'assumed; set custom_config num_shards to check exactly)'
          if assumed else '')
  return [
      preflight_report.Finding(
          'batch-size-not-divisible', WARNING if assumed else ERROR,
          f'does not divide by num_shards={num_shards}: TPU splits each '
          'global batch evenly across shards.', 'config',
          fix=f'Use a multiple of {num_shards}{note}.',
          where=f'custom_config[{key!r}]={value}')
      for key, value in config.indivisible_batch_sizes(num_shards)
  ]


def _named_specs(structure: Any, what: str) -> Dict[str, Any]:
  if structure is None:
    return {}
  if isinstance(structure, Mapping):
    named = {}
    for key, value in structure.items():
      named.update(_named_specs(value, f'{what} {key!r}'))
    return named
  if isinstance(structure, (list, tuple)):
    named = {}
    for index, value in enumerate(structure):
      named.update(_named_specs(value, f'{what} [{index}]'))
    return named
  return {what: structure}


def _holds_batch(shape: tf.TensorShape, batch_size: int,
                 sample_batch_size: int) -> bool:
  """Whether a static shape holds a batch of `batch_size` examples.

  Not on its first axis alone: with `transpose_input`, tensorflow/tpu's
  image models infeed [height, width, channels, batch] (MnasNet) or that
  flattened (ResNet), and their model_fns undo it; the labels keep the
  batch first (SampleBatch.batch_size).
  """
  dims = shape.as_list()
  return batch_size in dims or (sample_batch_size == batch_size and
                                shape.num_elements() % batch_size == 0)


def _input_findings(sample: preflight_sample.SampleBatch,
                    batch_size: int) -> List[preflight_report.Finding]:
  """The input's element_spec against what TPU infeed takes."""
  features_spec, labels_spec = sample.element_spec
  specs = _named_specs(features_spec, 'feature')
  specs.update(_named_specs(labels_spec, 'label'))
  findings = []
  for name, spec in specs.items():
    if not isinstance(spec, tf.TensorSpec):
      findings.append(preflight_report.Finding(
          'sparse-input', ERROR,
          f'is a {type(spec).__name__[:-4]}: TPUEstimator infeeds dense '
          'tensors only.', 'input',
          fix='Densify it in the preprocessing_fn or the input_fn (e.g. '
          'tf.sparse.to_dense, padded to a fixed length).', where=name))
      continue
    if spec.dtype in _INFEED_DTYPES_REJECTED:
      findings.append(preflight_report.Finding(
          'input-dtype', ERROR,
          f'is {_INFEED_DTYPES_REJECTED[spec.dtype]} tensor: the TPU infeed '
          'cannot carry it, even when the model does not read it.', 'input',
          fix=('Turn strings into ids in the preprocessing_fn, or drop the '
               'feature in an input_fn.' if spec.dtype == tf.string else
               'Cast it to float32 in the preprocessing_fn or the input_fn.'),
          where=name))
    shape = spec.shape
    if shape.rank == 0:
      findings.append(preflight_report.Finding(
          'dynamic-input-shape', ERROR,
          f'has no batch axis (shape {shape}): TPUEstimator infeeds batches.',
          'input', fix="Batch the input by params['batch_size'] with "
          'drop_remainder=True.', where=name))
    elif not shape.is_fully_defined():
      findings.append(preflight_report.Finding(
          'dynamic-input-shape', ERROR,
          f'has shape {shape} in the input: the TPU needs static shapes.',
          'input', fix='Batch with drop_remainder=True (the default input '
          'does) and pad variable-length features to a fixed length.',
          where=name))
    elif not _holds_batch(shape, batch_size, sample.batch_size):
      findings.append(preflight_report.Finding(
          'input-batch-size', WARNING,
          f'has {shape[0]} examples per batch, but each shard asks for '
          f"params['batch_size']={batch_size}: batch the input by "
          "params['batch_size'].", 'input', where=name))
  return findings


def _infeedable(features: Any) -> Tuple[Any, Dict[str, str]]:
  """The features the TPU infeed can carry, and the others (name -> what)."""
  if not isinstance(features, Mapping):
    return features, {}
  kept, withheld = {}, {}
  for name, value in features.items():
    dtype = preflight_graph.numpy_value_dtype(value)
    if dtype in _INFEED_DTYPES_REJECTED:
      withheld[name] = f'{_INFEED_DTYPES_REJECTED[dtype]} tensor'
    else:
      kept[name] = value
  return kept, withheld


def _loss_findings(loss: tf.Tensor,
                   phase: str) -> List[preflight_report.Finding]:
  if loss.shape.rank == 0 and loss.dtype == tf.float32:
    return []
  return [preflight_report.Finding(
      'loss', ERROR,
      f'has shape {loss.shape} and dtype {loss.dtype.name}; TPUEstimator '
      'accumulates a float32 scalar loss on the TPU.', phase,
      fix='Reduce it to a scalar (tf.reduce_mean) in float32.',
      where=f'the loss {loss.name!r}')]


def _host_call_tensors(host_call: Any) -> List[tf.Tensor]:
  """The flat tensors of eval_metrics/host_call (sorted by key for a dict)."""
  if host_call is None:
    return []
  _, tensors = host_call
  if isinstance(tensors, Mapping):
    return [tensors[key] for key in sorted(tensors)]
  return list(tensors)


def _host_call_findings(host_call: Any, what: str,
                        phase: str) -> List[preflight_report.Finding]:
  """Shape findings of the eval_metrics/host_call tensors (outfeed rules)."""
  if host_call is None:
    return []
  _, tensors = host_call
  named = (dict(sorted(tensors.items())) if isinstance(tensors, Mapping) else
           {str(i): t for i, t in enumerate(tensors)})
  code = ('eval-metric-tensor-shape' if what == 'eval_metrics' else
          'host-call-tensor-shape')
  findings = []
  for key, tensor in named.items():
    where = f'{what} tensor {key!r} ({tensor.name})'
    if tensor.shape.rank == 0:
      findings.append(preflight_report.Finding(
          code, ERROR,
          'is a scalar: the TPU outfeed concatenates these tensors across '
          'shards on the first axis, so each needs a batch axis.', phase,
          fix='Pass per-example tensors, or tf.reshape(x, [1]).',
          op=tensor.op.name, where=where))
    elif not tensor.shape.is_fully_defined():
      findings.append(preflight_report.Finding(
          code, ERROR,
          f'has shape {tensor.shape}: the TPU outfeed needs static shapes.',
          phase, op=tensor.op.name, where=where))
  return findings


def _pack_host_args(host_call: Any, flat: List[tf.Tensor]):
  fn, tensors = host_call
  if isinstance(tensors, Mapping):
    return fn, (), dict(zip(sorted(tensors), flat))
  return fn, tuple(flat), {}


class _HostCalls:
  """What the host functions of one step run made: findings, metric names.

  `run_step` calls its host_fn while it builds the run graph; the host_call
  and metric_fn of the spec run there, and what they make is kept here.
  """

  def __init__(self, phase: str):
    self.phase = phase
    self.findings: List[preflight_report.Finding] = []
    self.metric_names: List[str] = []

  def call(self, host_call: Any, flat_tensors: List[tf.Tensor],
           where: str) -> Any:
    """Calls a host_call/metric_fn on its tensors; notes summaries it adds."""
    graph = tf.compat.v1.get_default_graph()
    before = set(graph.get_operations())
    fn, args, kwargs = _pack_host_args(host_call, flat_tensors)
    result = fn(*args, **kwargs)
    self.findings.extend(_summary_findings(graph, before, where, self.phase))
    return result

  def train_host_fn(self, host_call: Any):
    """run_step's host_fn for a train step: runs the host_call, if any."""

    def host_fn(outputs):
      if host_call is not None:
        self.call(host_call, outputs[1:], 'host_call')
      return [], []

    return host_fn

  def eval_host_fn(self, eval_metrics: Any):
    """run_step's host_fn for an eval step: metric_fn's updates and values."""

    def host_fn(outputs):
      if eval_metrics is None:
        return [], []
      metrics = self.call(eval_metrics, outputs[1:], 'metric_fn')
      updates, values = [], []
      if not isinstance(metrics, Mapping):
        self.findings.append(preflight_report.Finding(
            'eval-metric-fn', ERROR,
            f'metric_fn returned {type(metrics).__name__}; it must return a '
            'dict of metric name -> (value, update_op) from '
            'tf.compat.v1.metrics.', self.phase))
        return updates, values
      for name, metric in sorted(metrics.items()):
        if not (isinstance(metric, (tuple, list)) and len(metric) == 2):
          self.findings.append(preflight_report.Finding(
              'eval-metric-fn', ERROR,
              f'metric_fn returned {type(metric).__name__} for {name!r}; '
              'TPUEstimator takes (value, update_op) pairs, e.g. from '
              'tf.compat.v1.metrics (not Keras Metric objects).', self.phase))
          continue
        self.metric_names.append(name)
        values.append(metric[0])
        updates.append(metric[1])
      return updates, values

    return host_fn


Progress = Callable[[str], None]


def _log_progress(message: str) -> None:
  logging.info('TPU preflight: %s', message)


class _Phases:
  """Runs the phases of one preflight and collects their findings."""

  def __init__(self, report: preflight_report.PreflightReport,
               progress: Progress):
    self.report = report
    self.progress = progress

  def run(self, phase: str,
          fn: Callable[[], List[preflight_report.Finding]]) -> None:
    start = time.time()
    try:
      findings = fn()
    except spec_checks.SpecProblem as e:
      findings = [e.finding]
    except Exception as e:  # pylint: disable=broad-except
      logging.exception('Preflight phase %s failed.', phase)
      findings = [preflight_report.Finding(
          'phase-error', ERROR,
          f'the {phase} check failed: {type(e).__name__}: {e}', phase)]
    self.report.findings.extend(findings)
    self.report.seconds[phase] = round(time.time() - start, 2)
    if phase in _STEPS:
      self.progress(f'{phase}: done in {self.report.seconds[phase]:.1f}s.')


class _Preflight:
  """The state shared by the phases of one preflight run."""

  def __init__(self, model_fn, config, params, sample, num_shards,
               serving_input_receiver_fn, workdir, embedding=None,
               export_blocked=False, progress: Progress = _log_progress):
    self.progress = progress
    self.model_fn = model_fn
    self.embedding = embedding
    # The TPU embedding checks failed: the export would fail the same way.
    self.export_blocked = export_blocked
    self.config = config
    # A module reads params['model_dir'] where ResNet reads FLAGS.model_dir.
    self.params = dict(params)
    self.params.setdefault('model_dir', os.path.join(workdir, 'model'))
    self.sample = sample
    self.num_shards = num_shards
    self.serving_input_receiver_fn = serving_input_receiver_fn
    self.workdir = workdir
    self.checkpoint = None
    self.features, self.withheld = _infeedable(sample.features)
    cpu_config = dataclasses.replace(config, use_tpu=False, tpu=None)
    self.run_config = estimator_builder.build_run_config(
        cpu_config, os.path.join(workdir, 'model'))

  def _step_params(self, with_batch_size: bool = True) -> Dict[str, Any]:
    params = dict(self.params, use_tpu=True)
    if with_batch_size:
      params['batch_size'] = self.sample.batch_size
    return params

  def _build(self, mode, params, labels, outputs_fn, phase, features=None):
    """Builds the step; a failing model_fn becomes a finding."""
    self.progress(f'{phase}: building {_STEPS[phase]} (the model_fn, as on a '
                  'TPU) ...')
    try:
      return preflight_graph.build_step(
          self.model_fn, mode, params, self.run_config,
          self.features if features is None else features,
          labels, self.num_shards, outputs_fn, self.withheld)
    except spec_checks.SpecProblem:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise spec_checks.SpecProblem(preflight_report.Finding(
          'model-fn-error', ERROR,
          f'the model_fn failed in mode {mode!r} (built as on TPU: '
          f"params['use_tpu']=True): {type(e).__name__}: {e}", phase,
          error=f'{type(e).__name__}: {e}')) from e

  def _run(self, step, phase, **kwargs):
    """Runs the step; XLA errors as findings (minus ops already reported)."""
    self.progress(
        f'{phase}: XLA-compiling {_STEPS[phase]} for CPU and running it once '
        f'({len(step.ops)} ops; the more ops, the longer the compile) ...')
    try:
      return preflight_graph.run_step(step, **kwargs), []
    except tf.errors.OpError as e:
      return None, preflight_graph.xla_error_findings(
          e, phase, preflight_graph.statically_rejected_ops(step))

  def train(self) -> List[preflight_report.Finding]:
    """One train step: checks, XLA compile and run, checkpoint."""
    phase = 'train'

    def outputs(spec):
      spec_checks.require(spec, ModeKeys.TRAIN, ('loss', 'train_op'), phase)
      with tf.control_dependencies([spec.train_op]):
        return [tf.identity(spec.loss)] + _host_call_tensors(spec.host_call)

    step = self._build(ModeKeys.TRAIN, self._step_params(), self.sample.labels,
                       outputs, phase)
    if self.embedding is not None:
      # As TPUEstimator adds them on a TPU: the step's checkpoint exports.
      embedding_checks.add_table_variables(step.graph, self.embedding)
    findings = (_loss_findings(step.spec.loss, phase) +
                _host_call_findings(step.spec.host_call, 'host_call', phase) +
                precision.bfloat16_findings(step.ops, self.params, phase) +
                preflight_graph.check_ops(step, phase) +
                preflight_graph.check_cross_shard(step, self.num_shards,
                                                  phase))
    host = _HostCalls(phase)
    run, run_findings = self._run(
        step, phase, host_fn=host.train_host_fn(step.spec.host_call),
        # In config.model_dir: an export that reads the latest checkpoint
        # there (MnasNet's moving averages) finds this one.
        checkpoint_prefix=os.path.join(self.run_config.model_dir,
                                       'model.ckpt'))
    findings = preflight_graph.fold_knock_on(
        step, findings + host.findings + run_findings)
    if run is not None:
      self.checkpoint = run.checkpoint
      findings.append(preflight_report.Finding(
          'train-step', INFO,
          f'one train step compiled with XLA and ran on the sample: '
          f'loss={float(run.outputs[0]):.4g}.', phase))
    return findings

  def evaluate(self) -> List[preflight_report.Finding]:
    """One eval step: checks, XLA compile and run, metric_fn on the host."""
    phase = 'eval'

    def outputs(spec):
      spec_checks.require(spec, ModeKeys.EVAL, ('loss',), phase)
      return [spec.loss] + _host_call_tensors(spec.eval_metrics)

    step = self._build(ModeKeys.EVAL, self._step_params(), self.sample.labels,
                       outputs, phase)
    findings = (_loss_findings(step.spec.loss, phase) +
                _host_call_findings(step.spec.eval_metrics, 'eval_metrics',
                                    phase) +
                preflight_graph.check_ops(step, phase))
    host = _HostCalls(phase)
    run, run_findings = self._run(
        step, phase, host_fn=host.eval_host_fn(step.spec.eval_metrics))
    findings = preflight_graph.fold_knock_on(
        step, findings + host.findings + run_findings)
    if run is not None:
      computed = ', '.join(f'{name}={float(value):.4g}' for name, value in
                           zip(host.metric_names, run.host_values or []))
      findings.append(preflight_report.Finding(
          'eval-step', INFO,
          'one eval step compiled with XLA and ran on the sample; metric_fn '
          f'ran on the host: loss={float(run.outputs[0]):.4g}'
          + (f', {computed}' if computed else '') + '.', phase))
    return findings

  def export(self) -> List[preflight_report.Finding]:
    """The PREDICT computation of the TPU export, then the real export.

    Under export API v2 the model_fn rewrites its PREDICT computation for
    the TPU itself (a TPU computation inside the preflight's would nest):
    the real export builds it, and its `{serve, tpu}` graph must hold TPU ops.
    """
    phase = 'export'
    if self.config.export_saved_model_api_version == 2:
      return [preflight_report.Finding(
          'predict-step-own-rewrite', INFO,
          'export_saved_model_api_version=2: the model_fn rewrites its '
          'PREDICT computation for the TPU itself, so the preflight does not '
          'compile it; the export below builds it.', phase)
             ] + self._export_findings(phase)

    def outputs(spec):
      spec_checks.require(spec, ModeKeys.PREDICT, ('predictions',), phase)
      return [t for t in tf.nest.flatten(spec.predictions)]

    features = None
    if self.serving_input_receiver_fn is not None:
      try:
        features, _ = _infeedable(preflight_sample.serving_features(
            self.serving_input_receiver_fn, self.features,
            self.sample.batch_size))
      except Exception:  # pylint: disable=broad-except
        # The export below reports the serving input's failure.
        logging.exception('The serving input failed; the PREDICT step is '
                          'checked on the training sample.')
    step = self._build(ModeKeys.PREDICT, self._step_params(False), None,
                       outputs, phase, features)
    findings = preflight_graph.check_ops(step, phase)
    run, run_findings = self._run(step, phase)
    findings = preflight_graph.fold_knock_on(step, findings + run_findings)
    if run is not None:
      findings.append(preflight_report.Finding(
          'predict-step', INFO,
          'the PREDICT computation of the {serve, tpu} export compiled with '
          'XLA and ran on the sample.', phase))
    findings.extend(self._export_findings(phase))
    return findings

  def _export_findings(self, phase: str) -> List[preflight_report.Finding]:
    """Exports the saved step as the executor would; checks both tag sets."""
    if (self.serving_input_receiver_fn is None or self.checkpoint is None or
        self.export_blocked):
      reason = ('no serving input was given (a transform graph, a schema or '
                "the module's serving_input_receiver_fn)"
                if self.serving_input_receiver_fn is None else
                'the TPU embedding findings come first' if self.export_blocked
                else 'the train step did not run')
      return [preflight_report.Finding('export-skipped', INFO,
                      f'the dual-tag export was not tried: {reason}.', phase)]
    self.progress(f'{phase}: exporting the {{serve}} and {{serve, tpu}} '
                  'SavedModel ...')
    try:
      path = self._export(export_to_tpu=True)
    except Exception as e:  # pylint: disable=broad-except
      if self.embedding is None:
        return [preflight_report.Finding(
            'export', ERROR,
            f'exporting the {{serve}} and {{serve, tpu}} SavedModel failed: '
            f'{type(e).__name__}: {e}', phase)]
      return self._cpu_export_findings(e, phase)
    path = path.decode() if isinstance(path, bytes) else path
    try:
      export.check_tpu_graph(path)
    except export.ExportError as e:
      return [preflight_report.Finding('no-tpu-inference', ERROR, str(e),
                                       phase)]
    tag_sets = export.saved_model_tag_sets(path)
    if tag_sets != [export.SERVE_TAGS, tuple(sorted(export.SERVE_TPU_TAGS))]:
      return [preflight_report.Finding(
          'export', ERROR,
          f'the export holds tag sets {tag_sets}, not [serve] and '
          '[serve, tpu].', phase)]
    return [preflight_report.Finding('export', INFO,
                    'the {serve} and {serve, tpu} SavedModel exported.',
                    phase)]

  def _export(self, export_to_tpu: bool) -> str:
    """The SavedModel of the train step's checkpoint, as the executor's."""
    export_config = dataclasses.replace(self.config, use_tpu=False, tpu=None,
                                        export_to_tpu=export_to_tpu)
    estimator = estimator_builder.build_estimator(
        self.model_fn, export_config, self.run_config, self.params,
        embedding_config_spec=(self.embedding.spec if self.embedding else
                               None))
    path = estimator.export_saved_model(
        os.path.join(self.workdir, 'export'), self.serving_input_receiver_fn,
        checkpoint_path=self.checkpoint)
    return path.decode() if isinstance(path, bytes) else path

  def _cpu_export_findings(self, error: Exception,
                           phase: str) -> List[preflight_report.Finding]:
    """A model with TPU embeddings whose {serve, tpu} graph fails: {serve}."""
    refused = preflight_report.Finding(
        'export-tpu-graph', WARNING,
        'the {serve, tpu} graph of this model with TPU embeddings cannot be '
        f'exported ({type(error).__name__}: {errors.first_line(error)}): '
        'TPUTrainer exports '
        '{serve} alone (the embeddings looked up on CPU); the TPUBulkInferrer '
        'then scores it with use_tpu=false.', phase)
    try:
      self._export(export_to_tpu=False)
    except Exception as e:  # pylint: disable=broad-except
      return [refused, preflight_report.Finding(
          'export', ERROR, f'exporting the {{serve}} SavedModel failed too: '
          f'{type(e).__name__}: {e}', phase)]
    return [refused, preflight_report.Finding(
        'export', INFO, 'the {serve} SavedModel exported.', phase)]


def _summary_findings(graph: tf.Graph, before, where: str,
                      phase: str) -> List[preflight_report.Finding]:
  """v1 summaries a host function made (TPU host calls reject them)."""
  return [
      preflight_report.Finding(
          'host-call-v1-summary', ERROR,
          f'creates the v1 summary {op.name!r} ({op.type}); TPUEstimator '
          'rejects tf.compat.v1.summary ops in host calls.', phase,
          fix='Use tf.summary (v2) with a writer in a host_call.',
          where=where)
      for op in graph.get_operations()
      if op not in before and op.type in tpu_facts.V1_SUMMARY_OPS
  ]


def run_preflight(
    model_fn: Callable[..., Any],
    config: config_lib.TrainerConfig,
    params: Mapping[str, Any],
    sample: preflight_sample.SampleBatch,
    subject: str,
    num_shards: Optional[int] = None,
    serving_input_receiver_fn: Optional[Callable[[], Any]] = None,
    embedding: Optional[embedding_spec.EmbeddingSpec] = None,
    progress: Optional[Progress] = None,
) -> preflight_report.PreflightReport:
  """Checks on CPU that `model_fn` trains, evaluates and exports on TPU.

  Most of its time is XLA's CPU compile of the train step, which grows with
  the step's ops (the model's layers and their gradients), then the eval
  and export steps; the batch and data sizes matter little. It compiles
  with xla_flags.FAST_COMPILE_FLAGS.

  Args:
    model_fn: the TPU model_fn (e.g. `PreparedRun.model_fn`).
    config: the validated trainer config (batch sizes, num_shards,
      export_saved_model_api_version).
    params: the params the model_fn gets (without batch_size/use_tpu).
    sample: one shard's batch (see preflight_sample).
    subject: what the report is about (the module file).
    num_shards: the TPU shard count (default: config.num_shards, else 8).
    serving_input_receiver_fn: when given, the export phase also runs the
      real dual-tag export.
    embedding: the module's TPU embedding tables: checked against the
      sample, the hosts and the columns the model_fn reads; the steps get
      the activations TPU embedding would hand them.
    progress: called with a line as each step starts and ends (default:
      absl logging).

  Returns:
    The report; `report.ok` when no error was found.
  """
  shards, assumed = resolve_num_shards(config, num_shards)
  report = preflight_report.PreflightReport(source=subject, num_shards=shards,
                           sample_origin=sample.origin)
  progress = progress or _log_progress
  phases = _Phases(report, progress)
  phases.run('config', lambda: _config_findings(config, shards, assumed))
  if embedding is not None:
    phases.run(embedding_checks.PHASE, lambda: (
        embedding_checks.findings_before_steps(embedding, model_fn, params,
                                               config, sample, on_tpu=True)))
    sample = embedding_checks.sample_on_tpu(sample, embedding)
  phases.run('input', lambda: _input_findings(
      sample, per_shard_batch_size(config, shards)))
  if not all(isinstance(spec, tf.TensorSpec)
             for spec in tf.nest.flatten(sample.element_spec)):
    report.findings.append(preflight_report.Finding(
        'skipped', INFO, 'the model checks need a dense sample; fix the '
        'input findings first.', 'input'))
    return report
  with tempfile.TemporaryDirectory(
      prefix='tpu-preflight-') as workdir, xla_flags.fast_cpu_compiles():
    state = _Preflight(
        model_fn, config, params, sample, shards, serving_input_receiver_fn,
        workdir, embedding, export_blocked=any(
            f.phase == embedding_checks.PHASE for f in report.errors),
        progress=progress)
    phases.run('train', state.train)
    phases.run('eval', state.evaluate)
    phases.run('export', state.export)
  report.findings = preflight_report.merge_repeated(report.findings)
  return report


def check_before_training(
    run: prepare.PreparedRun,
    config: config_lib.TrainerConfig,
    train_input_fn: Callable[[Dict[str, Any]], tf.data.Dataset],
) -> preflight_report.PreflightReport:
  """The executor's preflight: on the first training batch; raises on errors.

  Args:
    run: the prepared run (model_fn, params, serving input).
    config: the validated trainer config.
    train_input_fn: the training `input_fn(params)`.

  Returns:
    The report (logged).

  Raises:
    preflight_report.PreflightError: listing the errors, when the model is
      not TPU-ready.
  """
  shards, _ = resolve_num_shards(config)
  sample = preflight_sample.from_input_fn(
      train_input_fn, run.params, per_shard_batch_size(config, shards),
      'the first batch of the training input')
  report = run_preflight(
      run.model_fn, config, run.params, sample, run.module.module_file,
      serving_input_receiver_fn=run.serving_input_receiver_fn,
      embedding=run.embedding)
  logging.info('%s', report.format())
  report.raise_if_not_ready()
  return report
