"""The label values of the first batches against what the model's loss takes."""

import dataclasses
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.data import data_checks
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.training import estimator_builder

__all__ = ['SplitSample', 'check_first_labels']

# How many batches of each split have their labels checked.
CHECKED_BATCHES = 4
# How many bad values an error lists.
LISTED_BAD_VALUES = 5
# Ops that hand the label on unchanged but for shape or dtype.
_PASS_THROUGH_OPS = frozenset({
    'Identity', 'IdentityN', 'Snapshot', 'StopGradient', 'Cast', 'Reshape',
    'ExpandDims', 'Squeeze'})
_SPARSE_SOFTMAX_OP = 'SparseSoftmaxCrossEntropyWithLogits'
# tf.nn.sigmoid_cross_entropy_with_logits computes
# `add(where(...) - logits * labels, log1p(exp(...)))`, under any name.
_SELECT_OPS = frozenset({'Select', 'SelectV2'})
_ADD_OPS = frozenset({'Add', 'AddV2'})


class LabelValueError(data_checks.DataError):
  """Label values the model's loss does not accept."""


@dataclasses.dataclass(frozen=True)
class AcceptedLabels:
  """The label values a model's loss accepts: [0, upper) or [0, upper]."""
  upper: float
  integers: bool
  # The loss that decides it, for messages.
  loss: str

  def describe(self) -> str:
    if self.integers:
      return f'integers in [0, {self.upper:g}) (0 to {self.upper - 1:g})'
    return f'values in [0, {self.upper:g}]'

  def bad_mask(self, values: np.ndarray) -> np.ndarray:
    """True where a value is outside the accepted ones (NaN included)."""
    values = np.asarray(values, dtype=np.float64)
    inside = (values >= 0) & (values < self.upper if self.integers else
                              values <= self.upper)
    if self.integers:
      inside &= values == np.floor(values)
    return ~inside


@dataclasses.dataclass(frozen=True)
class SplitSample:
  """One split whose first labels are checked."""
  name: str
  file_patterns: Sequence[str]
  input_fn: Callable[[Dict[str, Any]], tf.data.Dataset]
  batch_size: int


def accepted_labels_of_graph(labels: tf.Tensor) -> Optional[AcceptedLabels]:
  """What the loss that consumes `labels` (in its graph) accepts, if known."""
  found = []
  seen = set()
  pending = [labels]
  while pending:
    tensor = pending.pop()
    for op in tensor.consumers():
      if op.name in seen:
        continue
      seen.add(op.name)
      if op.type in _PASS_THROUGH_OPS:
        pending.append(op.outputs[0])
      elif (op.type == _SPARSE_SOFTMAX_OP and op.inputs[1] is tensor and
            op.inputs[0].shape.rank and op.inputs[0].shape[-1] is not None):
        classes = int(op.inputs[0].shape[-1])
        found.append(AcceptedLabels(
            classes, True,
            f'sparse softmax cross-entropy over {classes} classes'))
      elif _is_logistic_loss_product(op, tensor):
        found.append(AcceptedLabels(1, False, 'sigmoid cross-entropy'))
  if not found or any(other != found[0] for other in found[1:]):
    return None
  return found[0]


def _is_logistic_loss_product(op: tf.Operation, labels: tf.Tensor) -> bool:
  """True for the `logits * labels` of sigmoid_cross_entropy_with_logits."""
  if op.type != 'Mul' or op.inputs[1] is not labels:
    return False
  for sub in op.outputs[0].consumers():
    if (sub.type == 'Sub' and sub.inputs[1] is op.outputs[0] and
        sub.inputs[0].op.type in _SELECT_OPS):
      for add in sub.outputs[0].consumers():
        if add.type in _ADD_OPS and any(
            tensor.op.type == 'Log1p' for tensor in add.inputs):
          return True
  return False


def accepted_labels(run: prepare.PreparedRun,
                    config: config_lib.TrainerConfig,
                    eval_input_fn: Callable[[Dict[str, Any]], tf.data.Dataset]
                    ) -> Optional[AcceptedLabels]:
  """What the model_fn's loss accepts as labels, or None when not known.

  Builds (does not run) the EVAL step on CPU on the eval input's graph. A
  model_fn that fails here fails the other checks, which name it: here it
  only means "not known".

  Args:
    run: the prepared run.
    config: the trainer config.
    eval_input_fn: the eval split's input_fn.

  Returns:
    The accepted labels, or None.
  """
  params = dict(run.params, use_tpu=False, batch_size=config.eval_batch_size)
  cpu_config = dataclasses.replace(config, use_tpu=False, tpu=None)
  try:
    with tempfile.TemporaryDirectory(prefix='tpu-trainer-labels-') as tmp:
      run_config = estimator_builder.build_run_config(cpu_config, tmp)
      with tf.Graph().as_default():
        tf.compat.v1.train.create_global_step()
        element = tf.compat.v1.data.make_one_shot_iterator(
            eval_input_fn(dict(params))).get_next()
        if not (isinstance(element, tuple) and len(element) == 2 and
                isinstance(element[1], tf.Tensor)):
          return None
        features, labels = element
        estimator_spec_adapter.call_model_fn(
            run.model_fn, features, labels, tf_estimator.ModeKeys.EVAL,
            params, run_config)
        return accepted_labels_of_graph(labels)
  except Exception as e:  # pylint: disable=broad-except
    logging.info('The labels the model accepts are not known (%s: %s); '
                 'their values are not checked.', type(e).__name__, e)
    return None


def check_first_labels(run: prepare.PreparedRun,
                       config: config_lib.TrainerConfig,
                       splits: Sequence[SplitSample]) -> float:
  """Raises LabelValueError when a first batch holds a label the loss rejects.

  Args:
    run: the prepared run.
    config: the trainer config.
    splits: the splits to read; the last one's input builds the graph (eval).

  Returns:
    The seconds the check took.

  Raises:
    LabelValueError: naming the label key, the bad values and where they
      are, and what the model accepts.
  """
  start = time.time()
  accepted = accepted_labels(run, config, splits[-1].input_fn)
  if accepted is not None:
    for split in splits:
      problems = _bad_labels(run, split, accepted)
      if problems:
        raise LabelValueError(_message(run, split, accepted, problems))
  seconds = time.time() - start
  logging.info('Label values checked in %.2f s (the model accepts %s).',
               seconds, accepted.describe() if accepted else 'any: not known')
  return seconds


def _bad_labels(run: prepare.PreparedRun, split: SplitSample,
                accepted: AcceptedLabels) -> List[str]:
  """Up to LISTED_BAD_VALUES descriptions of bad values and where they are."""
  limit = CHECKED_BATCHES * split.batch_size
  if run.module.input_fn is None and run.schemas is not None:
    return _bad_labels_in_files(split, run.label_key,
                                schemas_lib.feature_spec(run.schemas.examples),
                                accepted, limit)
  try:
    return _bad_labels_in_batches(run, split, accepted)
  except Exception as e:  # pylint: disable=broad-except
    # The module's input_fn: training runs it again and names it on error.
    logging.info('The labels of the %r split were not checked: its input_fn '
                 'failed eagerly (%s: %s).', split.name, type(e).__name__, e)
    return []


def _bad_labels_in_batches(run: prepare.PreparedRun, split: SplitSample,
                           accepted: AcceptedLabels) -> List[str]:
  """Reads the first batches of a module input_fn; names bad values."""
  problems = []
  params = dict(run.params, use_tpu=False, batch_size=split.batch_size)
  for index, element in enumerate(
      split.input_fn(params).take(CHECKED_BATCHES)):
    labels = element[1].numpy() if isinstance(element, tuple) else None
    if labels is None or not np.issubdtype(labels.dtype, np.number):
      return []
    labels = labels.reshape(-1)
    for value in labels[accepted.bad_mask(labels)]:
      problems.append(f'{value:g} (batch {index})')
      if len(problems) >= LISTED_BAD_VALUES:
        return problems
  return problems


def _bad_labels_in_files(split: SplitSample, label_key: str,
                         feature_spec: Dict[str, Any],
                         accepted: AcceptedLabels, limit: int) -> List[str]:
  """Parses only the label of the split's first `limit` records, per file."""
  # A record without a label, or not parseable: named as training would.
  with data_checks.explain_data_errors({split.name: split.file_patterns},
                                       feature_spec, label_key,
                                       reader='The label check'):
    return _bad_labels_in_records(split, label_key, feature_spec, accepted,
                                  limit)


def _bad_labels_in_records(split: SplitSample, label_key: str,
                           feature_spec: Dict[str, Any],
                           accepted: AcceptedLabels, limit: int) -> List[str]:
  """The label-only parse of `_bad_labels_in_files`."""
  spec = {label_key: feature_spec[label_key]}
  problems = []
  read = 0
  for path in data_checks.split_files(split.file_patterns):
    records = tf.data.TFRecordDataset(path, compression_type='GZIP').take(
        limit - read)
    for batch in records.batch(max(split.batch_size, 1)):
      label = tf.io.parse_example(batch, spec)[label_key]
      if isinstance(label, tf.SparseTensor):
        values = label.values.numpy()
        rows = label.indices.numpy()[:, 0]
      else:
        values = label.numpy().reshape(len(batch), -1)
        rows = np.repeat(np.arange(len(batch)), values.shape[1])
        values = values.reshape(-1)
      if not np.issubdtype(values.dtype, np.number):
        return []
      bad = accepted.bad_mask(values)
      for value, row in zip(values[bad], rows[bad]):
        problems.append(f'{value:g} (record {read + row} of {path})')
        if len(problems) >= LISTED_BAD_VALUES:
          return problems
      read += len(batch)
    if read >= limit:
      break
  return problems


def _message(run: prepare.PreparedRun, split: SplitSample,
             accepted: AcceptedLabels, problems: List[str]) -> str:
  label = (f'label {run.label_key!r}' if run.label_key else
           f'label (from input_fn in {run.module.module_file})')
  return (
      f'The {label} of the {split.name!r} split has values '
      f'the model cannot take: {", ".join(problems)}. The loss of the model '
      f'in {run.module.module_file} ({accepted.loss}) accepts '
      f'{accepted.describe()}; checked the first {CHECKED_BATCHES} batches '
      f'of each split. Fix the label values (in the examples or the '
      f'preprocessing_fn), or give the model an output that fits them (N '
      f'classes: N units with sparse_categorical_crossentropy, or a head '
      f'with n_classes=N). Nothing was trained.')
