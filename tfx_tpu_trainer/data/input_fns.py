"""Input functions for TPUEstimator over a split's TFRecord examples: the
module's, or the default chain (`cache_policy`, then `dataset_builders`)."""

from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer.user_code import user_module as user_module_lib
from tfx_tpu_trainer.data import cache_policy
from tfx_tpu_trainer.data import data_checks
from tfx_tpu_trainer.data import dataset_builders
from tfx_tpu_trainer.data import schemas as schemas_lib

__all__ = ['InputFn', 'default_dataset', 'make_input_fn']

InputFn = Callable[[Dict[str, Any]], tf.data.Dataset]


def _input_invocation(params: Dict[str, Any]):
  """(index, count) of this input_fn call among all calls (TPU per-host)."""
  context = params.get('context')
  if context is None:
    return 0, 1
  _, index, count, _ = context.current_input_fn_deployment()
  return index, count


@tf.autograph.experimental.do_not_convert
def default_dataset(file_pattern: List[str],
                    schema: schema_pb2.Schema,
                    label_key: str,
                    batch_size: int,
                    training: bool,
                    repeat: bool,
                    invocation_index: int = 0,
                    invocation_count: int = 1,
                    cache: str = 'auto',
                    shuffle: str = 'window',
                    cache_dir: Optional[str] = None,
                    table_first: bool = False) -> tf.data.Dataset:
  """The default dataset of `(features, label)` batches of one split.

  Its dataset functions are traced without autograph: none has
  tensor-dependent Python control flow, and converting them costs start-up
  time (CHANGELOG.md, "Performance, round two (issue 16)").

  Args:
    file_pattern: the split's file patterns.
    schema: the schema the examples are parsed with.
    label_key: the label feature, returned apart from the features.
    batch_size: the batch size of this input invocation.
    training: shuffle, and read files in any order, when true.
    repeat: repeat the split forever.
    invocation_index: which input invocation this is (a TPU host).
    invocation_count: how many invocations share the split.
    cache: one of `cache_policy.CACHE_MODES`, decided once per call
      (`cache_policy.choose_cache`).
    shuffle: how training input that is not the parsed table is mixed, one
      of `dataset_builders.SHUFFLE_MODES` (`dataset_builders.batches`).
    cache_dir: where input_cache="disk" writes its blocks (None: it
      streams instead).
    table_first: build the parsed table of training input whole before the
      first batch instead of while its first epoch streams (an input_fn
      that stops before an epoch ends, as eval_strategy="alternate" does).

  Returns:
    The dataset.
  """
  if shuffle not in dataset_builders.SHUFFLE_MODES:
    raise cache_policy.InputCacheError(
        f'input_shuffle {shuffle!r} is not one of '
        f"{list(dataset_builders.SHUFFLE_MODES)}; set "
        "custom_config['input_shuffle'] to one of them.")
  files = data_checks.split_files(file_pattern)
  feature_spec = schemas_lib.feature_spec(schema)
  choice = cache_policy.choose_cache(cache, files, feature_spec, training,
                                     invocation_index, invocation_count,
                                     cache_dir)
  dataset = dataset_builders.batches(
      choice, files, feature_spec, label_key, batch_size, training, repeat,
      invocation_index, invocation_count, shuffle, table_first)
  return _without_autotune_thread(dataset.prefetch(tf.data.AUTOTUNE))


def _without_autotune_thread(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """The dataset with tf.data's autotuning model (and its thread) off.

  With autotuning on, an iterator runs a model thread that re-tunes the
  pipeline at periods growing to a minute, and destroying the iterator
  (closing the training session) waits for that thread, which is not
  always woken: `estimator.train` then stalls after the final evaluation
  (CHANGELOG.md, "Performance, round two (issue 16)"). Off, every
  AUTOTUNE parallelism is the host's core count and the prefetch buffer
  tunes itself without that thread.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def make_input_fn(file_pattern: List[str],
                  data_accessor: fn_args_utils.DataAccessor,
                  schema: schema_pb2.Schema,
                  label_key: Optional[str],
                  training: bool,
                  repeat: bool,
                  module_input_fn: Optional[
                      user_module_lib.ModuleFunction] = None,
                  cache: str = 'auto',
                  shuffle: str = 'window',
                  cache_dir: Optional[str] = None,
                  table_first: bool = False) -> InputFn:
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
    cache: the default chain's cache, one of `cache_policy.CACHE_MODES`.
    shuffle: the default chain's shuffle, one of
      `dataset_builders.SHUFFLE_MODES`.
    cache_dir: where input_cache="disk" keeps the parsed split.
    table_first: build the parsed table before the first batch
      (`default_dataset`).

  Returns:
    The input function.
  """

  def input_fn(params: Dict[str, Any]) -> tf.data.Dataset:
    if module_input_fn is None:
      index, count = _input_invocation(params)
      return default_dataset(file_pattern, schema, label_key,
                             params['batch_size'], training, repeat, index,
                             count, cache, shuffle, cache_dir, table_first)
    # params['mode']: which step the input feeds (ModeKeys.TRAIN or EVAL).
    dataset = module_input_fn(
        file_pattern=file_pattern,
        data_accessor=data_accessor,
        schema=schema,
        params=dict(params, mode=(tf_estimator.ModeKeys.TRAIN if training
                                  else tf_estimator.ModeKeys.EVAL)))
    if not isinstance(dataset, tf.data.Dataset):
      raise module_input_fn.error(
          'must return a tf.data.Dataset of (features, label), got '
          f'{type(dataset).__name__}.')
    return dataset

  return input_fn
