"""input_cache="disk": a split's parsed rows in checksummed blocks on disk,
read only when whole and built from the same inputs."""

import contextlib
import hashlib
import json
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
# pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import gen_experimental_dataset_ops
from tensorflow.python.util import deprecation
# pylint: enable=g-direct-tensorflow-import

from tfx_tpu_trainer import errors

__all__ = ['BLOCK_ROWS', 'COMPLETE_FILE', 'FORMAT', 'Layouts',
           'DamagedCacheError', 'inputs_key', 'open_cache', 'written_blocks',
           'read_blocks', 'explain_damage']

# Per dtype name, `(feature name, shape)` of each column in its block.
Layouts = Mapping[str, List[Tuple[str, tf.TensorShape]]]

BLOCK_ROWS = 65536
COMPLETE_FILE = 'COMPLETE'
# 1: a `serialize_tensor` file per dtype per block, a marker of columns.
# 2: one TFRecord file per block, a marker of the inputs' key and blocks.
FORMAT = 2
_BLOCK_SUFFIX = '.tfrecord'
_BLOCK_NAME = 'block-{:09d}' + _BLOCK_SUFFIX
_HOST_PATTERN = 'host-*-of-*'
# What a cache was verified as in this process (its marker and its blocks'
# names, sizes and times): it is not read whole again while they stay.
_verified: Dict[str, Tuple[str, Tuple[Tuple[str, int, int], ...]]] = {}


class DamagedCacheError(errors.TPUTrainerError, RuntimeError):
  """A block of the disk cache failed its checks while training read it."""


def inputs_key(files: Sequence[str], feature_spec: Mapping[str, Any]) -> str:
  """What a cache is built from: the format, files and parsing spec.

  Each file counts by its path, size and modification time (reading the
  split to fingerprint it would cost what the cache saves); the spec is
  the schema as the examples are parsed (with a transform graph, the
  transformed schema, and the files are the transform's output), default
  values included.

  Args:
    files: the split's files (all invocations' share).
    feature_spec: what `parse_example` reads.

  Returns:
    A hex digest.
  """
  stats = []
  for path in sorted(files):
    stat = tf.io.gfile.stat(path)
    stats.append([path, stat.length, stat.mtime_nsec])
  spec = [[name, repr(feature_spec[name])] for name in sorted(feature_spec)]
  text = json.dumps({'format': FORMAT, 'files': stats, 'spec': spec})
  return hashlib.sha256(text.encode()).hexdigest()


def _marker_head(key: str, records: int) -> str:
  """The marker's lines before the count of blocks."""
  return f'format: {FORMAT}\ninputs: {key}\nrecords: {records}\nblocks: '


def _read_marker(cache_path: str) -> Optional[Dict[str, str]]:
  """The marker's fields, or None when there is no marker."""
  path = os.path.join(cache_path, COMPLETE_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, 'r') as f:
    text = f.read()
  return dict(line.split(': ', 1) for line in text.splitlines()
              if ': ' in line)


def _listing(cache_path: str) -> Tuple[Tuple[str, int, int], ...]:
  """(name, size, mtime) of each block file there."""
  names = sorted(os.path.basename(p) for p in tf.io.gfile.glob(
      os.path.join(cache_path, 'block-*' + _BLOCK_SUFFIX)))
  listed = []
  for name in names:
    stat = tf.io.gfile.stat(os.path.join(cache_path, name))
    listed.append((name, stat.length, stat.mtime_nsec))
  return tuple(listed)


def _tensorflow_reason(error: Exception) -> str:
  """`corrupted record at 12` from TensorFlow's record reader's message."""
  line = errors.first_line(error)
  match = re.search(r'(corrupted|truncated) record at \d+', line)
  return match.group(0) if match else line


def _block_problem(path: str, records: int) -> Optional[str]:
  """Why the block file at `path` does not read back whole, or None."""
  name = os.path.basename(path)
  count = 0
  try:
    with deprecation.silence():
      for _ in tf.compat.v1.io.tf_record_iterator(path):
        count += 1
  except tf.errors.NotFoundError:
    return f'{name} is missing'
  except tf.errors.OpError as e:
    return f'{name} is damaged ({_tensorflow_reason(e)})'
  if count != records:
    return (f'{name} is damaged (it holds {count} of its {records} '
            'records)')
  return None


def _damage(cache_path: str, marker: Dict[str, str]) -> Optional[str]:
  """Why a complete cache's blocks do not read back whole, or None.

  Every block the marker counts is read through its checksums (a record
  per dtype each), unless this process verified the same files already.
  """
  try:
    count, records = int(marker['blocks']), int(marker['records'])
  except (KeyError, ValueError):
    return f'its {COMPLETE_FILE} marker does not count its blocks'
  if count < 1:
    return f'its {COMPLETE_FILE} marker counts no block'
  listing = _listing(cache_path)
  names = {name for name, _, _ in listing}
  for index in range(count):
    name = _BLOCK_NAME.format(index)
    if name not in names:
      return f'{name} is missing'
  state = (json.dumps(marker, sort_keys=True), listing)
  if _verified.get(cache_path) == state:
    return None
  logging.info('Checking the %d blocks of the input cache %s (%.1f MB) '
               'against their checksums.', count, cache_path,
               sum(size for _, size, _ in listing) / 2**20)
  for index in range(count):
    problem = _block_problem(
        os.path.join(cache_path, _BLOCK_NAME.format(index)), records)
    if problem:
      return problem
  _verified[cache_path] = state
  return None


_UNFINISHED = (f'it is unfinished (no {COMPLETE_FILE} marker: its writer '
               'stopped before the end of its first epoch)')


def _problem(cache_path: str, key: str) -> Optional[str]:
  """Why the cache at `cache_path` must not be read, or None."""
  marker = _read_marker(cache_path)
  if marker is None:
    return _UNFINISHED
  if marker.get('format') != str(FORMAT):
    return 'it was written in another format (an older TPUTrainer)'
  if marker.get('inputs') != key:
    return ('it was built from other inputs (the split\'s files, their '
            'sizes or modification times, or the schema differ)')
  return _damage(cache_path, marker)


def _block_paths(cache_path: str) -> List[str]:
  count = int(_read_marker(cache_path)['blocks'])
  return [os.path.join(cache_path, _BLOCK_NAME.format(index))
          for index in range(count)]


def open_cache(cache_path: str, key: str) -> Optional[List[str]]:
  """The block files of a whole cache of these inputs, else None.

  A cache that is unfinished, of other inputs, or whose blocks do not all
  read back whole through their checksums is removed (logged with the
  reason) and its folder made again, empty, for `written_blocks`.

  Args:
    cache_path: this invocation's cache folder.
    key: `inputs_key` of what is to be cached.

  Returns:
    The block files to read, or None to write the cache.
  """
  if tf.io.gfile.exists(cache_path):
    problem = _problem(cache_path, key)
    if problem is None:
      return _block_paths(cache_path)
    # An unfinished cache is routine (a retry after a kill, an input_fn
    # stopped before an epoch ended); the others are faults.
    log = logging.info if problem == _UNFINISHED else logging.warning
    log('Removing the input cache %s: %s; building it again from the '
        'examples.', cache_path, problem)
    _verified.pop(cache_path, None)
    tf.io.gfile.rmtree(cache_path)
  tf.io.gfile.makedirs(cache_path)
  return None


def _block_widths(layouts: Layouts) -> Dict[str, int]:
  """The columns of each dtype's block: its features' values side by side."""
  return {dtype: sum(shape.num_elements() for _, shape in layout)
          for dtype, layout in layouts.items()}


def _no_rows(layouts: Layouts) -> Dict[str, tf.Tensor]:
  """Per-dtype blocks of no rows."""
  return {dtype: tf.zeros([0, width], tf.dtypes.as_dtype(dtype))
          for dtype, width in _block_widths(layouts).items()}


def written_blocks(parsed: tf.data.Dataset, cache_path: str,
                   layouts: Layouts, key: str) -> tf.data.Dataset:
  """`parsed` in blocks of `BLOCK_ROWS` rows, each written as it passes.

  Each block is one TFRecord file (a record per dtype, in sorted dtype
  order); after the last one, the marker is written by a final element of
  no rows: tf.data reaches it only when every block's write has returned,
  and it counts the blocks then there.
  """
  dtypes = sorted(layouts)
  prefix = os.path.join(cache_path, 'block-')

  def write(index, blocks):
    path = tf.strings.join([prefix, tf.strings.as_string(
        index, width=9, fill='0'), _BLOCK_SUFFIX])
    records = tf.data.Dataset.from_tensor_slices(tf.stack(
        [tf.io.serialize_tensor(blocks[dtype]) for dtype in dtypes]))
    written = gen_experimental_dataset_ops.dataset_to_tf_record(
        records._variant_tensor, path, compression_type='')  # pylint: disable=protected-access
    with tf.control_dependencies([written]):
      return {dtype: tf.identity(block) for dtype, block in blocks.items()}

  def mark_complete(_):
    count = tf.size(tf.io.matching_files(prefix + '*' + _BLOCK_SUFFIX))
    marker = tf.strings.join([_marker_head(key, len(dtypes)),
                              tf.strings.as_string(count), '\n'])
    with tf.control_dependencies([tf.io.write_file(
        os.path.join(cache_path, COMPLETE_FILE), marker)]):
      return _no_rows(layouts)

  blocks = parsed.rebatch(BLOCK_ROWS).enumerate().map(
      write, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  return blocks.concatenate(tf.data.Dataset.range(1).map(mark_complete))


def read_blocks(cache_path: str, layouts: Layouts, repeat: bool,
                files: Optional[Sequence[str]] = None) -> tf.data.Dataset:
  """The cached blocks: each epoch, read in parallel in a fresh order.

  Every record's checksum is checked as it is read (TensorFlow's TFRecord
  reader: a `DataLossError` for a damaged block). `files` are the blocks
  `open_cache` verified; without them (the epochs after the one that
  writes them) the block files are listed when each epoch starts, and an
  empty listing is an error, not an endless run of empty epochs.
  """
  dtypes = sorted(layouts)
  widths = _block_widths(layouts)
  pattern = os.path.join(cache_path, 'block-*' + _BLOCK_SUFFIX)

  def epoch(_):
    if files is not None:
      paths = tf.constant(list(files))
    else:
      paths = tf.io.matching_files(pattern)
      with tf.control_dependencies([tf.debugging.assert_positive(
          tf.size(paths), message=f'The input cache {cache_path} has no '
          'block files left')]):
        paths = tf.identity(paths)
    return tf.data.Dataset.from_tensor_slices(tf.random.shuffle(paths)).map(
        read, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)

  def read(path):
    records = tf.data.TFRecordDataset(path).batch(
        len(dtypes) + 1).get_single_element()
    with tf.control_dependencies([tf.debugging.Assert(
        tf.equal(tf.size(records), len(dtypes)),
        ['A block of the input cache does not hold one record per dtype:',
         path])]):
      records = tf.identity(records)
    blocks = {}
    for index, dtype in enumerate(dtypes):
      block = tf.io.parse_tensor(records[index], tf.dtypes.as_dtype(dtype))
      block.set_shape([None, widths[dtype]])
      blocks[dtype] = block
    return blocks

  epochs = tf.data.Dataset.range(1).repeat(None if repeat else 1)
  return epochs.flat_map(epoch)


def _damaged_caches(cache_dir: str) -> List[Tuple[str, str]]:
  """(cache folder, what is wrong) of each finished cache under `cache_dir`
  whose blocks do not read back whole."""
  damaged = []
  for cache_path in sorted(tf.io.gfile.glob(os.path.join(cache_dir,
                                                         _HOST_PATTERN))):
    marker = _read_marker(cache_path)
    if marker is None or marker.get('format') != str(FORMAT):
      continue  # Unfinished or of another format: never read as it is.
    _verified.pop(cache_path, None)
    problem = _damage(cache_path, marker)
    if problem:
      damaged.append((cache_path, problem))
  return damaged


@contextlib.contextmanager
def explain_damage(cache_dir: Optional[str]) -> Iterator[None]:
  """A read error of a damaged cache under `cache_dir` as DamagedCacheError.

  The damaged cache is removed, so the next input_fn call (a retry of the
  execution) writes it again from the examples. Other errors, and errors
  while every cache reads back whole, pass unchanged.

  Args:
    cache_dir: where input_cache="disk" writes (None: nothing to check).

  Yields:
    Nothing; wraps the training.
  """
  try:
    yield
  except tf.errors.OpError as e:
    if cache_dir is None or not tf.io.gfile.exists(cache_dir):
      raise
    damaged = _damaged_caches(cache_dir)
    if not damaged:
      raise
    for cache_path, _ in damaged:
      tf.io.gfile.rmtree(cache_path)
    cache_path, problem = damaged[0]
    raise DamagedCacheError(
        f'The parsed input cache {cache_path} is damaged: {problem}. It was '
        'removed; a retry of this pipeline run builds it again from the '
        'examples and resumes from the last checkpoint. (TensorFlow said: '
        f'{_tensorflow_reason(e)}.)') from e
