"""What the TPUBulkInferrer checks before any work: model, signatures, splits."""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import tensorflow as tf
from tensorflow.python.tools import saved_model_utils  # pylint: disable=g-direct-tensorflow-import
from tfx import types
from tfx.proto import bulk_inferrer_pb2
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.utils import io_utils
from tfx_bsl.beam import run_inference as tfx_bsl_inference
from tfx_bsl.public.proto import model_spec_pb2

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.bulk_inferrer import inference_config
from tfx_tpu_trainer.publishing import export

__all__ = ['BulkInferenceError', 'default_tags', 'check_model',
           'selected_splits', 'first_records', 'cpu_spec', 'check_examples',
           'tensorflow_reason']


class BulkInferenceError(errors.TPUTrainerError, ValueError):
  """The model, its signatures or the examples cannot be scored as asked."""


def default_tags(config: inference_config.InferenceConfig) -> Tuple[str, ...]:
  """`{serve, tpu}` on a TPU, else `{serve}`."""
  return export.SERVE_TPU_TAGS if config.use_tpu else export.SERVE_TAGS


def _tags_text(tags: Sequence[str]) -> str:
  return '{' + ', '.join(sorted(tags)) + '}'


def check_model(spec: model_spec_pb2.InferenceSpecType,
                config: inference_config.InferenceConfig) -> None:
  """The tag set exists and fits the device; the signatures take examples.

  Args:
    spec: the saved model's path, tag set and signature names.
    config: where the model runs.

  Raises:
    BulkInferenceError: naming the model, the tag sets or signatures it has
      and what to do.
  """
  saved_model = spec.saved_model_spec
  path, tags = saved_model.model_path, tuple(sorted(saved_model.tag))
  if export.SERVE_TPU_TAGS[1] in tags and not config.use_tpu:
    raise BulkInferenceError(
        f'model_spec.tag asks for {_tags_text(tags)}, a TPU graph, but '
        'use_tpu is false: it holds TPUPartitionedCall ops that run only on a '
        'TPU. Leave model_spec.tag empty (the {serve} graph off a TPU) or '
        'set custom_config use_tpu=true on a TPU host.')
  tag_sets = export.saved_model_tag_sets(path)
  if tags not in tag_sets:
    having = ', '.join(_tags_text(t) for t in tag_sets) or 'none'
    advice = (' Export it with tfx_tpu_trainer.TPUTrainer (it writes {serve} '
              'and {serve, tpu}), or set custom_config use_tpu=false to score '
              'its {serve} graph on CPU.' if config.use_tpu else
              ' Set model_spec.tag to one of them.')
    raise BulkInferenceError(
        f'The model at {path} has no {_tags_text(tags)} meta graph '
        f'({"use_tpu is true" if config.use_tpu else "asked for"}); its tag '
        f'sets: {having}.{advice}')
  _check_signatures(spec)


def _check_signatures(spec: model_spec_pb2.InferenceSpecType) -> None:
  saved_model = spec.saved_model_spec
  meta_graph = saved_model_utils.get_meta_graph_def(
      saved_model.model_path, ','.join(saved_model.tag))
  names = list(saved_model.signature_name) or [
      tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
  where = (f'the {_tags_text(saved_model.tag)} graph of '
           f'{saved_model.model_path}')
  for name in names:
    if name not in meta_graph.signature_def:
      raise BulkInferenceError(
          f'model_spec.model_signature_name {name!r} is not a signature of '
          f'{where}; its signatures: '
          f'{sorted(k for k in meta_graph.signature_def if k[:2] != "__")}.')
    signature = meta_graph.signature_def[name]
    inputs = {k: tf.dtypes.as_dtype(v.dtype).name
              for k, v in signature.inputs.items()}
    if (len(inputs) != 1 or
        list(signature.inputs.values())[0].dtype != tf.string.as_datatype_enum):
      raise BulkInferenceError(
          f'Signature {name!r} of {where} takes inputs {inputs}: the examples '
          'cannot feed it. BulkInferrer feeds one string tensor of '
          'serialized examples; name a signature that takes one (classify, '
          'regress, or predict over serialized tf.Examples) in '
          'model_spec.model_signature_name.')
    try:
      tfx_bsl_inference._signature_pre_process(signature)  # pylint: disable=protected-access
    except ValueError as e:
      raise BulkInferenceError(
          f'Signature {name!r} of {where} cannot be used for bulk inference: '
          f'{errors.first_line(e)}') from e
  if len(names) > 1:
    try:
      tfx_bsl_inference._get_operation_type(spec)  # pylint: disable=protected-access
    except ValueError as e:
      raise BulkInferenceError(
          f'Signatures {names} of {where} cannot be scored together: '
          f'{errors.first_line(e)} (several signatures must all be classify '
          'or regress).') from e


def selected_splits(examples: List[types.Artifact],
                    data_spec: bulk_inferrer_pb2.DataSpec) -> Dict[str, str]:
  """Split name -> URI, as the stock executor selects them.

  Raises:
    BulkInferenceError: when data_spec.example_splits names a split the
      examples do not have (the stock executor would skip it silently).
  """
  uris = {}
  for artifact in examples:
    for split in artifact_utils.decode_split_names(artifact.split_names):
      if not data_spec.example_splits or split in data_spec.example_splits:
        uris[split] = artifact_utils.get_split_uri([artifact], split)
  missing = sorted(set(data_spec.example_splits) - set(uris))
  if missing:
    having = sorted({s for a in examples
                     for s in artifact_utils.decode_split_names(a.split_names)})
    raise BulkInferenceError(
        f'data_spec.example_splits names {missing}, which the examples do not '
        f'have; their splits: {having}.')
  return uris


def first_records(split_uri: str, count: int = 1) -> List[bytes]:
  """The first `count` records of a split (ExampleGen's TFRecord files)."""
  files = sorted(tf.io.gfile.glob(io_utils.all_files_pattern(split_uri)))
  records = []
  for path in files:
    compression = 'GZIP' if path.endswith('.gz') else ''
    dataset = tf.data.TFRecordDataset(path, compression_type=compression)
    records.extend(r.numpy() for r in dataset.take(count - len(records)))
    if len(records) >= count:
      break
  return records


def check_examples(example_uris: Dict[str, str], payload_format: int,
                   spec: model_spec_pb2.InferenceSpecType,
                   config: inference_config.InferenceConfig) -> None:
  """Every split has examples, and the model scores each split's first.

  The scoring runs on CPU in this process: the tag set asked for, or for
  `{serve, tpu}` the model's `{serve}` graph (it parses examples with the
  same serving input); a TPU-only model gets its splits checked only.

  Raises:
    BulkInferenceError: naming the empty split, or the split and signature
      that its examples cannot feed, with TensorFlow's reason.
  """
  firsts = {}
  for split, uri in sorted(example_uris.items()):
    records = first_records(uri)
    if not records:
      raise BulkInferenceError(
          f'Split {split!r} of the examples ({uri}) has no examples: nothing '
          'to score. Leave it out with data_spec.example_splits, or check '
          'the ExampleGen that wrote it.')
    firsts[split] = records[0]
  if not firsts:
    raise BulkInferenceError('The examples have no split to score.')
  scored_on_cpu = cpu_spec(spec)
  if scored_on_cpu is not None:
    _score_first_examples(firsts, payload_format, scored_on_cpu)


def cpu_spec(spec: model_spec_pb2.InferenceSpecType
            ) -> Optional[model_spec_pb2.InferenceSpecType]:
  """`spec` as scored on CPU in this process, or None if it cannot be.

  The tag set asked for; for `{serve, tpu}`, the model's `{serve}` graph
  (it parses examples with the same serving input); None for a TPU-only
  model.
  """
  result = model_spec_pb2.InferenceSpecType()
  result.CopyFrom(spec)
  if export.SERVE_TPU_TAGS[1] in spec.saved_model_spec.tag:
    if export.SERVE_TAGS not in export.saved_model_tag_sets(
        spec.saved_model_spec.model_path):
      return None
    del result.saved_model_spec.tag[:]
    result.saved_model_spec.tag.extend(export.SERVE_TAGS)
  return result


def tensorflow_reason(error: Exception) -> str:
  """The line of a TF error that says why: not the graph-execution frame."""
  text = getattr(error, 'message', None) or str(error)
  for line in text.splitlines():
    if (line.strip() and not line[0].isspace() and not line.startswith(
        ('Graph execution error', 'Detected at node', 'Node: ', 'File '))):
      return errors.first_line(Exception(line.strip()))
  return errors.first_line(error)


def _score_first_examples(firsts: Dict[str, bytes], payload_format: int,
                          spec: model_spec_pb2.InferenceSpecType) -> None:
  # pylint: disable=g-import-not-at-top
  from tfx.components.bulk_inferrer import executor as stock_executor
  from tfx_tpu_trainer.bulk_inferrer import model_handler
  # pylint: enable=g-import-not-at-top
  parse = stock_executor._MakeParseFn(payload_format)  # pylint: disable=protected-access
  handler = model_handler.create_model_handler(
      spec, inference_config.InferenceConfig(use_tpu=False, batch_size=1))
  model = handler.load_model()
  names = list(spec.saved_model_spec.signature_name) or [
      tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
  try:
    for split, record in firsts.items():
      try:
        handler.run_inference([parse(record)], model)
      except (tf.errors.OpError, ValueError) as e:
        kind = example_gen_pb2.PayloadFormat.Name(payload_format)
        raise BulkInferenceError(
            f'The first example of split {split!r} ({kind}) cannot feed '
            f'signature(s) {names} of {spec.saved_model_spec.model_path}: '
            f'{tensorflow_reason(e)}. Score examples with the features the '
            'model was exported to parse (its serving input), or name '
            'another signature in model_spec.model_signature_name.') from e
  finally:
    model.close()
