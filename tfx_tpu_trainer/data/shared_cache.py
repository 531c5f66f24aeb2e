"""A dataset's elements kept in memory for every reader of it to share."""

import tensorflow as tf
# pylint: disable=g-direct-tensorflow-import
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import gen_dataset_ops
# pylint: enable=g-direct-tensorflow-import


class _SharedMemoryCacheDataset(dataset_ops.UnaryUnchangedStructureDataset):
  """`Dataset.cache()` in memory, the cache an explicit resource."""

  def __init__(self, input_dataset: tf.data.Dataset):
    self._input_dataset = input_dataset
    self._name = None
    self._cache, self._deleter = gen_dataset_ops.anonymous_memory_cache()
    variant_tensor = gen_dataset_ops.cache_dataset_v2(
        input_dataset._variant_tensor,  # pylint: disable=protected-access
        filename='',
        cache=self._cache,
        **self._common_args)
    super().__init__(input_dataset, variant_tensor)


def kept_in_memory(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """`dataset`, its elements kept in memory by the first full pass over it.

  `Dataset.cache()` in a graph (the estimator's input_fn) is shared by the
  readers of one dataset only while tf.data rewrites nothing: its default
  optimizations copy the cache into each branch that reads it, and the
  source is read again. Here the memory cache is a resource the dataset
  holds, so every reader of it (a later epoch, another branch of the same
  pipeline) reads the elements once written. Needs an initializable
  iterator in a graph (the estimator's), or eager iteration.

  Args:
    dataset: the elements to keep.

  Returns:
    The dataset whose first full pass fills the cache the others read.
  """
  return _SharedMemoryCacheDataset(dataset)
