"""Input functions for TPUEstimator over a split's TFRecord examples.

TPUEstimator calls `input_fn(params)` with the per-host (or per-shard) batch
size in `params['batch_size']`, and on TPU a `params['context']` that says
which of the input invocations this is. The default chain, in the shape of
the tensorflow/tpu reference input pipelines:

  list files -> shard by input invocation (per host on TPU) -> parallel
  interleaved gzip reads -> cache the serialized records when the split fits
  in memory -> shuffle + repeat (training) -> batch with drop_remainder
  (static shapes) -> one vectorised `parse_example` per batch with the
  schema's parsing spec -> split off the label -> prefetch.

No per-example Python runs. A module's own `input_fn` replaces the chain.
"""

from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer import schemas as schemas_lib
from tfx_tpu_trainer import user_module as user_module_lib

InputFn = Callable[[Dict[str, Any]], tf.data.Dataset]

# A split whose gzip files add up to at most this is cached in memory
# (serialized records; gzip'd tf.Examples expand about 5-10x).
CACHE_MAX_COMPRESSED_BYTES = 128 * 1024 * 1024
SHUFFLE_BUFFER_SIZE = 10000


def _input_invocation(params: Dict[str, Any]):
  """(index, count) of this input_fn call among all calls (TPU per-host)."""
  context = params.get('context')
  if context is None:
    return 0, 1
  _, index, count, _ = context.current_input_fn_deployment()
  return index, count


def _compressed_size(files: List[str]) -> int:
  return sum(tf.io.gfile.stat(path).length for path in files)


def default_dataset(file_pattern: List[str],
                    schema: schema_pb2.Schema,
                    label_key: str,
                    batch_size: int,
                    training: bool,
                    repeat: bool,
                    invocation_index: int = 0,
                    invocation_count: int = 1) -> tf.data.Dataset:
  """The default dataset of `(features, label)` batches of one split.

  Args:
    file_pattern: the split's file patterns.
    schema: the schema the examples are parsed with.
    label_key: the label feature, returned apart from the features.
    batch_size: the batch size of this input invocation.
    training: shuffle, and read files in any order, when true.
    repeat: repeat the split forever.
    invocation_index: which input invocation this is (a TPU host).
    invocation_count: how many invocations share the split.

  Returns:
    The dataset.
  """
  files = []
  for pattern in file_pattern:
    files.extend(sorted(tf.io.gfile.glob(pattern)))
  dataset = tf.data.Dataset.from_tensor_slices(files)
  if invocation_count > 1:
    if len(files) >= invocation_count:
      dataset = dataset.shard(invocation_count, invocation_index)
  if training:
    dataset = dataset.shuffle(len(files))
  dataset = dataset.interleave(
      lambda path: tf.data.TFRecordDataset(path, compression_type='GZIP'),
      cycle_length=tf.data.AUTOTUNE,
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=not training)
  if invocation_count > 1 and len(files) < invocation_count:
    dataset = dataset.shard(invocation_count, invocation_index)
  if _compressed_size(files) <= CACHE_MAX_COMPRESSED_BYTES:
    dataset = dataset.cache()
  if training:
    dataset = dataset.shuffle(SHUFFLE_BUFFER_SIZE)
  if repeat:
    dataset = dataset.repeat()
  dataset = dataset.batch(batch_size, drop_remainder=True)
  feature_spec = schemas_lib.feature_spec(schema)

  def parse(serialized):
    features = tf.io.parse_example(serialized, feature_spec)
    label = features.pop(label_key)
    return features, label

  dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                        deterministic=not training)
  return dataset.prefetch(tf.data.AUTOTUNE)


def make_input_fn(file_pattern: List[str],
                  data_accessor: fn_args_utils.DataAccessor,
                  schema: schema_pb2.Schema,
                  label_key: Optional[str],
                  training: bool,
                  repeat: bool,
                  module_input_fn: Optional[Callable[..., Any]] = None,
                  module_source: str = '') -> InputFn:
  """Builds the `input_fn(params)` that TPUEstimator calls for one split.

  Args:
    file_pattern: the split's file patterns (fn_args.train_files/eval_files).
    data_accessor: fn_args.data_accessor, handed to a module's input_fn.
    schema: the schema the examples are parsed with.
    label_key: the label feature (needed by the default input).
    training: shuffle (and read in any order) when true.
    repeat: repeat the split forever (training, and evaluation over a fixed
      number of steps, which must never run out of input on TPU).
    module_input_fn: the module's `input_fn`, used instead of the default.
    module_source: where the module came from, for error messages.

  Returns:
    The input function.
  """

  def input_fn(params: Dict[str, Any]) -> tf.data.Dataset:
    if module_input_fn is None:
      index, count = _input_invocation(params)
      return default_dataset(file_pattern, schema, label_key,
                             params['batch_size'], training, repeat, index,
                             count)
    dataset = module_input_fn(
        file_pattern=file_pattern,
        data_accessor=data_accessor,
        schema=schema,
        params=params)
    if not isinstance(dataset, tf.data.Dataset):
      raise user_module_lib.UserModuleError(
          f'input_fn in {module_source} must return a tf.data.Dataset of '
          f'(features, label), got {type(dataset).__name__}.')
    return dataset

  return input_fn
