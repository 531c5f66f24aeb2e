"""One TPU step of a model_fn: built as on a TPU, checked, run on CPU."""

import contextlib
import dataclasses
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.python.distribute import summary_op_util  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.tpu import tpu_function  # pylint: disable=g-direct-tensorflow-import

from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.model_fn import sparse_columns
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import xla_errors
from tfx_tpu_trainer.tpu import facts as tpu_facts

__all__ = ['ERROR', 'StepGraph', 'numpy_value_dtype', 'WithheldFeatures',
           'build_step', 'forward_ops', 'statically_rejected_ops',
           'reachable_ops', 'check_ops', 'check_cross_shard',
           'xla_error_findings', 'HostFn', 'StepRun', 'run_step',
           'fold_knock_on']

ERROR = preflight_report.ERROR

_XLA_COMPILE_ATTR = '_xla_compile_id'
_OUTSIDE_COMPILATION_ATTR = '_xla_outside_compilation'
_GRADIENTS_SCOPE = 'gradients'
# Ops whose unknown output sizes are shape bookkeeping, not data.
_SHAPE_OPS = frozenset(
    ['Shape', 'ShapeN', 'Size', 'Rank', 'BroadcastGradientArgs'])
_MAX_PER_CODE = 3
# xla.experimental.compile turns v1 summaries into empty constants while it
# builds; a TPU rewrite keeps them (and rejects them). This restores them.
_SKIP_SUMMARY = summary_op_util.skip_summary
_UNSUPPORTED_OP = re.compile(
    r"No registered '(\w+)' OpKernel for (XLA_\w+) devices compatible with "
    r'node \{\{node ([^}]+)\}\}')
_NODE = re.compile(r'\{\{node ([^}]+)\}\}')
# The ops of a tf.compat.v1.train.Saver.
_CHECKPOINT_OPS = frozenset(['SaveV2', 'RestoreV2', 'MergeV2Checkpoints',
                             'ShardedFilename'])
_SAVER_FIX = (
    'A tf.compat.v1.train.Saver built in the model_fn is inside the TPU '
    'computation (e.g. for a Scaffold of an EstimatorSpec): build it in the '
    "TPUEstimatorSpec's scaffold_fn, which TPUEstimator calls outside it "
    "(as tensorflow/tpu's MnasNet does for its moving-average export).")


@dataclasses.dataclass
class StepGraph:
  """The graph of one step and what it is made of.

  Attributes:
    graph: the graph.
    inputs: the placeholders the sample is fed into (flat).
    input_values: the sample values (flat, same order).
    outputs: the outputs of the XLA computation.
    spec: what the model_fn returned.
    ops: the ops inside the computation, in creation order.
  """
  graph: tf.Graph
  inputs: List[tf.Tensor]
  input_values: List[np.ndarray]
  outputs: List[tf.Tensor]
  spec: Any
  ops: List[tf.Operation]


def numpy_value_dtype(value: Any) -> tf.DType:
  """The TensorFlow dtype of a numpy value (tf.string for text/objects)."""
  dtype = np.asarray(value).dtype
  return tf.string if dtype.kind in 'OSU' else tf.as_dtype(dtype)


def _placeholder(value: Any, index: int) -> tf.Tensor:
  value = np.asarray(value)
  return tf.compat.v1.placeholder(numpy_value_dtype(value), shape=value.shape,
                                  name=f'sample_input_{index}')


@contextlib.contextmanager
def _v1_summaries_as_on_tpu():
  """Lets v1 summary ops be built inside the XLA computation, as on TPU."""
  disabled = summary_op_util.skip_summary
  summary_op_util.skip_summary = _SKIP_SUMMARY
  try:
    yield
  finally:
    summary_op_util.skip_summary = disabled


class WithheldFeatures(dict):
  """Features, minus those the TPU infeed cannot carry (named on access)."""

  def __init__(self, features: Dict[str, Any], withheld: Dict[str, str]):
    super().__init__(features)
    self.withheld = withheld

  def __missing__(self, key):
    if key in self.withheld:
      raise KeyError(
          f'feature {key!r} is {self.withheld[key]}, which the TPU infeed '
          'cannot carry, so a TPU model_fn never receives it (see the input '
          'findings)')
    raise KeyError(key)


# Errors about the features (`unsupported operand type(s) ...: 'dict'`)
# read as they would for the dict the model_fn gets on TPU.
WithheldFeatures.__name__ = WithheldFeatures.__qualname__ = 'dict'


def build_step(model_fn: Callable[..., Any], mode: str,
               params: Dict[str, Any], run_config: Any, features: Any,
               labels: Any, num_shards: int,
               outputs_fn: Callable[[Any], Sequence[tf.Tensor]],
               withheld: Optional[Dict[str, str]] = None) -> StepGraph:
  """Builds one step of `model_fn` in `mode` inside an XLA computation.

  Args:
    model_fn: the TPU model_fn.
    mode: a tf.estimator.ModeKeys value.
    params: the params of the model_fn (use_tpu, batch_size included).
    run_config: passed as `config` when the model_fn names it.
    features: numpy features of one shard (a dict or one array).
    labels: numpy labels (or None).
    num_shards: the TPU shard count the step is built for.
    outputs_fn: returns the computation's outputs from the spec.
    withheld: features left out of `features` (name -> what it is): reading
      one raises a KeyError that says why.

  Returns:
    The step graph.
  """
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.train.create_global_step()
    flat_features = tf.nest.flatten(features)
    flat_labels = [] if labels is None else tf.nest.flatten(labels)
    values = flat_features + flat_labels
    inputs = [_placeholder(value, index) for index, value in enumerate(values)]
    spec = None

    def computation(*flat):
      nonlocal spec
      flat = list(flat)
      step_features = tf.nest.pack_sequence_as(features,
                                               flat[:len(flat_features)])
      if withheld:
        step_features = WithheldFeatures(step_features, withheld)
      step_labels = (None if labels is None else tf.nest.pack_sequence_as(
          labels, flat[len(flat_features):]))
      with _v1_summaries_as_on_tpu():
        spec = estimator_spec_adapter.call_model_fn(
            model_fn, step_features, step_labels, mode, dict(params),
            run_config)
      return list(outputs_fn(spec))

    with tpu_function.tpu_shard_context(num_shards):
      outputs = tf.compat.v1.xla.experimental.compile(computation, inputs)
    outputs = [t for t in tf.nest.flatten(outputs) if t is not None]
  # The computation's ops, without the identities XLA puts on its inputs.
  ops = [op for op in graph.get_operations()
         if _XLA_COMPILE_ATTR in op.node_def.attr and
         _OUTSIDE_COMPILATION_ATTR not in op.node_def.attr and
         not (op.type == 'Identity' and op.inputs[0] in inputs)]
  return StepGraph(graph, inputs, [np.asarray(v) for v in values], outputs,
                   spec, ops)


def forward_ops(ops: Sequence[tf.Operation]) -> List[tf.Operation]:
  """The ops created before the first gradient op: the model itself."""
  forward = []
  for op in ops:
    if op.name.split('/')[0].startswith(_GRADIENTS_SCOPE):
      break
    forward.append(op)
  return forward


def _op_label(op: tf.Operation, kind: Optional[str] = None) -> str:
  """How a finding names an op: `op 'name' (Type)`."""
  return f'op {op.name!r} ({kind or op.type})'


def _capped(findings: List[preflight_report.Finding], code: str, count: int,
            phase: str) -> List[preflight_report.Finding]:
  if count > _MAX_PER_CODE:
    findings = findings[:_MAX_PER_CODE]
    findings.append(preflight_report.Finding(
        code, ERROR, f'... and {count - _MAX_PER_CODE} more op(s) like these.',
        phase))
  return findings


def _constant_folded(ops: Sequence[tf.Operation]) -> set:
  """The ops XLA evaluates while it compiles: constants, static shapes.

  Their values are known before the step runs (tensorflow/tpu's ResNet
  computes its image size from `tf.shape` in float64 with
  `transpose_input`), so the TPU never computes them. `ops` are in creation
  order, inputs before the ops that read them.
  """
  folded = set()
  for op in ops:
    if op.op_def.is_stateful:
      continue
    if (op.type == 'Const' or
        op.type in _SHAPE_OPS and all(t.shape.is_fully_defined()
                                      for t in op.inputs) or
        op.inputs and all(t.op in folded for t in op.inputs)):
      folded.add(op)
  return folded


def _dtype_findings(ops: Sequence[tf.Operation],
                    phase: str) -> List[preflight_report.Finding]:
  """float64/complex128 and string tensors computed inside the step.

  float64 and complex128 that XLA folds into constants are not computed
  on the TPU, so they are no findings.
  """
  folded = _constant_folded(ops)
  forward = set(forward_ops(ops))
  # Name the model's own ops first; their gradients follow from them.
  ordered = [op for op in ops if op in forward] + [
      op for op in ops if op not in forward]
  by_code: Dict[str, List[preflight_report.Finding]] = {}
  counts: Dict[str, int] = {}
  for op in ordered:
    dtypes = {output.dtype.base_dtype for output in op.outputs}
    for dtype, dtype_name in tpu_facts.TPU_UNSUPPORTED_DTYPES.items():
      if dtype in dtypes and op not in folded:
        code = 'float64' if dtype == tf.float64 else 'unsupported-dtype'
        counts[code] = counts.get(code, 0) + 1
        by_code.setdefault(code, []).append(preflight_report.Finding(
            code, ERROR,
            f'computes {dtype_name} in the {phase} step; TPUs have no '
            f'{dtype_name} (XLA on CPU accepts it).', phase,
            fix='Use float32 or bfloat16: cast the inputs, and pass '
            'dtype=tf.float32 where a constant or variable is made.',
            op=op.name, where=_op_label(op)))
    if tf.string in dtypes and op.type != 'Placeholder':
      counts['string-op'] = counts.get('string-op', 0) + 1
      by_code.setdefault('string-op', []).append(preflight_report.Finding(
          'string-op', ERROR,
          f'computes strings in the {phase} step; a TPU program cannot hold '
          'strings.', phase,
          fix='Do string work in the input_fn or the preprocessing_fn (e.g. '
          'turn strings into ids).', op=op.name, where=_op_label(op)))
  findings = []
  for code, code_findings in by_code.items():
    findings.extend(_capped(code_findings, code, counts[code], phase))
  return findings


def _is_dynamic(tensor: tf.Tensor) -> bool:
  return (tensor.dtype not in (tf.resource, tf.variant) and
          not tensor.shape.is_fully_defined())


def _read_by_model(tensor: tf.Tensor, model_ops: set,
                   outputs: set) -> bool:
  """Whether the model itself reads `tensor` (or the step outputs it).

  Reads by gradient ops do not count: an op's own gradient may take outputs
  of unknown static shape that are buffers XLA sizes statically, such as
  fused batch norm's reserve space (FusedBatchNormV3:5, read only by
  FusedBatchNormGradV3, and by nothing in eval or predict).
  """
  return tensor in outputs or any(
      consumer in model_ops for consumer in tensor.consumers())


def _dynamic_shape_findings(ops: Sequence[tf.Operation],
                            phase: str,
                            outputs: Sequence[tf.Tensor] = ()
                            ) -> List[preflight_report.Finding]:
  """Ops of the model that make data-dependent shapes from static inputs.

  Only outputs that the model reads count (see _read_by_model).
  """
  findings = []
  model_ops = forward_ops(ops)
  model_op_set, output_set = set(model_ops), set(outputs)
  for op in model_ops:
    if op.type in _SHAPE_OPS or not op.outputs:
      continue
    dynamic = [t for t in op.outputs if _is_dynamic(t) and
               _read_by_model(t, model_op_set, output_set)]
    if not dynamic or any(_is_dynamic(t) for t in op.inputs):
      continue
    column = sparse_columns.column_of_op(op.name)
    if column is not None:
      findings.append(preflight_report.Finding(
          'dynamic-shape', ERROR, sparse_columns.sparse_op_cause(*column),
          phase, fix=sparse_columns.SPARSE_OP_FIX, op=op.name,
          where=_op_label(op)))
    else:
      findings.append(preflight_report.Finding(
          'dynamic-shape', ERROR,
          f'makes tensor {dynamic[0].name!r} of shape {dynamic[0].shape} from '
          'inputs of static shape: its size depends on the data. TPU programs '
          'need static shapes (XLA on CPU bounds such shapes, a TPU may not, '
          'and pads them at best).', phase,
          fix='Keep sizes fixed: e.g. mask with tf.where(cond, x, 0) instead '
          'of tf.boolean_mask, and pad variable-length outputs to a fixed '
          'size.', op=op.name, where=_op_label(op)))
  return _capped(findings, 'dynamic-shape', len(findings), phase)


def _rejected_op_findings(ops: Sequence[tf.Operation],
                          phase: str) -> List[preflight_report.Finding]:
  findings = []
  for op in ops:
    if op.type in tpu_facts.V1_SUMMARY_OPS:
      findings.append(preflight_report.Finding(
          'v1-summary', ERROR,
          f'is a v1 summary inside the {phase} step; TPU computations reject '
          'v1 summaries.', phase,
          fix='Remove it. ' + tpu_facts.HOST_CALL_SUMMARY_FIX, op=op.name,
          where=_op_label(op)))
    elif op.type == 'Print':
      findings.append(preflight_report.Finding(
          'print-op', ERROR,
          f'is inside the {phase} step; TPU computations reject it.', phase,
          fix='Remove it, or log from a host_call.', op=op.name,
          where=_op_label(op, 'tf.compat.v1.Print')))
    elif op.type == 'Placeholder':
      findings.append(preflight_report.Finding(
          'placeholder-in-model', ERROR,
          f'is a placeholder inside the {phase} step; a TPU computation takes '
          'its inputs from the infeed only.', phase,
          fix='Read the features the model_fn receives instead.', op=op.name,
          where=f'op {op.name!r}'))
  return findings


def statically_rejected_ops(step: StepGraph) -> List[str]:
  """Names of the ops check_ops reports for their type or dtype."""
  rejected_dtypes = set(tpu_facts.INFEED_REJECTED_DTYPES)
  return [op.name for op in step.ops
          if op.type in tpu_facts.TPU_REJECTED_OPS or
          op.type == 'Placeholder'] + [
              op.name for op in reachable_ops(step) if any(
                  t.dtype.base_dtype in rejected_dtypes for t in op.outputs)
          ]


def reachable_ops(step: StepGraph) -> List[tf.Operation]:
  """The computation's ops its outputs depend on: what XLA compiles.

  Ops nothing depends on (e.g. metrics an Estimator model_fn builds in every
  mode) are pruned before compilation.
  """
  seen = _upstream([t.op for t in step.outputs], control_inputs=True)
  return [op for op in step.ops if op in seen]


def check_ops(step: StepGraph, phase: str) -> List[preflight_report.Finding]:
  """Static TPU checks of the ops of a step.

  Summaries, Print and placeholders are checked among all ops of the
  computation (the estimator fetches summaries wherever they are); dtypes
  and shapes among the ops XLA compiles.
  """
  compiled = reachable_ops(step)
  return (_rejected_op_findings(step.ops, phase) +
          _dtype_findings(compiled, phase) +
          _dynamic_shape_findings(compiled, phase, step.outputs))


def check_cross_shard(step: StepGraph, num_shards: int,
                      phase: str) -> List[preflight_report.Finding]:
  """A multi-shard train step must sum gradients across shards."""
  if num_shards <= 1 or any(
      op.type == tpu_facts.CROSS_REPLICA_SUM_OP for op in step.ops):
    return []
  return [preflight_report.Finding(
      'missing-cross-shard-optimizer', ERROR,
      f'the train step has no cross-shard gradient sum for {num_shards} '
      'shards: each TPU core would train its own copy of the model.', phase,
      fix='Wrap the optimizer: `if params["use_tpu"]: optimizer = '
      'tf.compat.v1.tpu.CrossShardOptimizer(optimizer)` (an Estimator '
      'model_fn adapted by estimator_adapter.to_tpu_model_fn gets this for '
      'tf.compat.v1.train optimizers).')]


def _as_identity(node) -> None:
  data_inputs = [i for i in node.input if not i.startswith('^')]
  control_inputs = [i for i in node.input if i.startswith('^')]
  node.op = 'Identity'
  del node.input[:]
  node.input.extend(data_inputs[:1] + control_inputs)
  for key in list(node.attr):
    if key != 'T' and not key.startswith('_'):
      del node.attr[key]


def _make_runnable(graph_def) -> None:
  """Lets the step run on one CPU device despite (already reported) ops.

  CrossReplicaSum (one replica here) and Print pass their input through; a
  v1 summary becomes an empty string constant outside the XLA cluster.
  """
  for node in graph_def.node:
    if node.op in (tpu_facts.CROSS_REPLICA_SUM_OP, 'Print'):
      _as_identity(node)
    elif node.op in tpu_facts.V1_SUMMARY_OPS:
      node.op = 'Const'
      del node.input[:]
      node.attr.clear()
      node.attr['dtype'].type = tf.string.as_datatype_enum
      node.attr['value'].tensor.CopyFrom(tf.make_tensor_proto(b''))


def _error_lines(message: str) -> str:
  lines = [
      line.strip() for line in message.splitlines()
      if line.strip() and not line.startswith((' ', '\t')) and
      not line.startswith(('Detected at node', 'Node:', 'Graph execution',
                           'The op is created at', 'dummy_file_name',
                           'Stack trace for op definition', 'File "',
                           'Run with TF_DUMP_GRAPH', '\ttf2xla'))
  ]
  text = ' '.join(lines[:2]) if lines else message.strip()
  return text[:600]


def xla_error_findings(
    error: Exception, phase: str,
    reported_ops: Sequence[str]) -> List[preflight_report.Finding]:
  """Findings naming the ops in an XLA compile or run error."""
  message = str(getattr(error, 'message', None) or error)
  unsupported = _UNSUPPORTED_OP.findall(message)
  findings = []
  seen = set()
  for op_type, device, node in unsupported:
    if node in seen or node in reported_ops:
      continue
    seen.add(node)
    if op_type in tpu_facts.V2_SUMMARY_OPS:
      findings.append(_v2_summary_finding(op_type, node, phase))
      continue
    findings.append(preflight_report.Finding(
        'xla-unsupported-op', ERROR,
        f'in the {phase} step cannot be compiled by XLA ({device} has no '
        'kernel for it), so the TPU cannot run it.', phase,
        fix=(_SAVER_FIX if op_type in _CHECKPOINT_OPS else
             'Replace it, or move it to the input_fn/preprocessing_fn.'),
        op=node, where=f'op {node!r} ({op_type})'))
  if unsupported:
    return findings
  node = _NODE.search(message)
  at_op = f' at op {node.group(1)!r}' if node else ''
  frame = xla_errors.user_frame(message)
  made_by = (f', made by {frame.describe()}' if frame else
             ' (an op the model_fn made; the op name says where)')
  return [preflight_report.Finding(
      'xla-compile', ERROR,
      f'the {phase} step failed to compile or run with XLA{at_op}{made_by}. '
      f'XLA said: {type(error).__name__}: {_error_lines(message)}', phase,
      fix=xla_errors.explanation(message),
      op=node.group(1) if node else None)]


def _v2_summary_finding(op_type: str, node: str,
                        phase: str) -> preflight_report.Finding:
  """A tf2 summary (a writer's op) inside the step: to the host_call."""
  return preflight_report.Finding(
      'tf2-summary', ERROR,
      f'writes a tf2 summary inside the {phase} step; XLA cannot compile '
      'summary ops, so this step cannot be checked (on a TPU, TensorFlow '
      'may run them on the host by automatic outside compilation, a host '
      'round trip in every step).', phase,
      fix=tpu_facts.HOST_CALL_SUMMARY_FIX, op=node,
      where=f'op {node!r} ({op_type})')


HostFn = Callable[[List[tf.Tensor]], Tuple[List[Any], List[Any]]]


@dataclasses.dataclass
class StepRun:
  """What running a step produced."""
  outputs: Optional[List[Any]] = None
  host_values: Optional[List[Any]] = None
  checkpoint: Optional[str] = None


def run_step(step: StepGraph,
             host_fn: Optional[HostFn] = None,
             checkpoint_prefix: Optional[str] = None) -> StepRun:
  """Compiles and runs the step once with XLA on CPU, on the sample.

  Args:
    step: from build_step.
    host_fn: builds host ops on the step's outputs in the run graph; returns
      (ops to run with the step, tensors to read after it).
    checkpoint_prefix: where to save the variables after the step.

  Returns:
    The outputs, the host values and the checkpoint path.

  Raises:
    tf.errors.OpError: when XLA cannot compile or run the step.
  """
  with step.graph.as_default():
    meta_graph = tf.compat.v1.train.export_meta_graph(graph=step.graph)
  _make_runnable(meta_graph.graph_def)
  run_graph = tf.Graph()
  with run_graph.as_default():
    tf.compat.v1.train.import_meta_graph(meta_graph)
    inputs = [run_graph.get_tensor_by_name(t.name) for t in step.inputs]
    outputs = [run_graph.get_tensor_by_name(t.name) for t in step.outputs]
    with_step, after_step = host_fn(outputs) if host_fn else ([], [])
    initializer = tf.group(tf.compat.v1.global_variables_initializer(),
                           tf.compat.v1.local_variables_initializer(),
                           tf.compat.v1.tables_initializer())
    saver = (tf.compat.v1.train.Saver(tf.compat.v1.global_variables())
             if checkpoint_prefix else None)
    result = StepRun()
    # On CPU even where accelerators are attached (a TPU VM runs this too).
    cpu_only = tf.compat.v1.ConfigProto(device_count={'GPU': 0, 'TPU': 0})
    with tf.compat.v1.Session(graph=run_graph, config=cpu_only) as session:
      session.run(initializer)
      feed = dict(zip(inputs, step.input_values))
      result.outputs, _ = session.run([outputs, with_step], feed_dict=feed)
      if after_step:
        result.host_values = session.run(after_step)
      if saver is not None:
        result.checkpoint = saver.save(session, checkpoint_prefix)
  return result


# Findings that name a cause (an op a TPU cannot run), most certain first.
_ROOT_CODES = ('xla-unsupported-op', 'string-op', 'float64',
               'unsupported-dtype', 'dynamic-shape')


def _subject_op(step: StepGraph,
                finding: preflight_report.Finding) -> Optional[tf.Operation]:
  """The op of the step a finding is about (`finding.op`), if any."""
  if finding.op is None:
    return None
  try:
    return step.graph.get_operation_by_name(finding.op)
  except (KeyError, ValueError):
    return None


def _upstream(ops: Sequence[tf.Operation], control_inputs: bool = False) -> set:
  """The ops `ops` depend on through their data inputs (themselves included).

  With `control_inputs`, through their control inputs too.
  """
  seen, stack = set(), list(ops)
  while stack:
    current = stack.pop()
    if current in seen:
      continue
    seen.add(current)
    stack.extend(t.op for t in current.inputs)
    if control_inputs:
      stack.extend(current.control_inputs)
  return seen


def fold_knock_on(
    step: Optional[StepGraph],
    findings: List[preflight_report.Finding]) -> List[preflight_report.Finding]:
  """One finding per root cause: knock-on findings folded under their cause.

  A finding about an op (or tensor) downstream of an op that another finding
  names as a cause (XLA has no kernel for it, a dtype a TPU lacks, a
  data-dependent size) is a consequence of it: e.g. a tf.py_function's
  output of unknown shape makes later shapes unknown too. Such findings
  are dropped and named in the cause's message. A cause found both as an
  op XLA cannot compile and as a dynamic shape is reported as the former.
  """
  if step is None:
    return findings
  subjects = [_subject_op(step, finding) for finding in findings]
  order = {code: index for index, code in enumerate(_ROOT_CODES)}
  causes = sorted(
      (index for index, finding in enumerate(findings)
       if finding.code in order and subjects[index] is not None and
       finding.severity == ERROR),
      key=lambda index: order[findings[index].code])
  folded_into: Dict[int, int] = {}
  for index, finding in enumerate(findings):
    op = subjects[index]
    if op is None or finding.severity != ERROR:
      continue
    upstream = _upstream([op])
    for cause in causes:
      if cause == index or cause in folded_into:
        continue
      cause_op = subjects[cause]
      same_op_lesser = (cause_op is op and order.get(finding.code, len(order))
                        > order[findings[cause].code])
      if same_op_lesser or (cause_op is not op and cause_op in upstream):
        folded_into[index] = cause
        break
  notes: Dict[int, List[str]] = {}
  for index, cause in folded_into.items():
    while cause in folded_into:
      cause = folded_into[cause]
    notes.setdefault(cause, []).append(
        f"{findings[index].code} at '{subjects[index].name}'")
  result = []
  for index, finding in enumerate(findings):
    if index in folded_into:
      continue
    if index in notes:
      finding = dataclasses.replace(
          finding, knock_on=finding.knock_on + tuple(notes[index]))
    result.append(finding)
  return result
