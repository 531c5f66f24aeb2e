"""Input functions for TPUEstimator over a split's TFRecord examples.

TPUEstimator calls `input_fn(params)` with the per-host (or per-shard) batch
size in `params['batch_size']`. The functions built here read the split
through the pipeline's `DataAccessor` (TFXIO, gzip TFRecords, the schema's
parsing config) in one chain: parallel interleaved reads, shuffle when
training, batched parsing, fixed batch shapes (`drop_final_batch`), repeat,
prefetch. A module's own `input_fn` replaces the default chain.
"""

from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils
from tfx_bsl.tfxio import dataset_options

from tfx_tpu_trainer import user_module as user_module_lib

InputFn = Callable[[Dict[str, Any]], tf.data.Dataset]


def default_dataset(file_pattern: List[str],
                    data_accessor: fn_args_utils.DataAccessor,
                    schema: schema_pb2.Schema,
                    label_key: str,
                    batch_size: int,
                    training: bool,
                    repeat: bool) -> tf.data.Dataset:
  """The default dataset of `(features, label)` batches of one split."""
  options = dataset_options.TensorFlowDatasetOptions(
      batch_size=batch_size,
      drop_final_batch=True,
      num_epochs=None if repeat else 1,
      shuffle=training,
      sloppy_ordering=training,
      label_key=label_key)
  return data_accessor.tf_dataset_factory(file_pattern, options, schema)


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
    data_accessor: fn_args.data_accessor.
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
    batch_size = params['batch_size']
    if module_input_fn is None:
      return default_dataset(file_pattern, data_accessor, schema, label_key,
                             batch_size, training, repeat)
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
