"""Input functions for TPUEstimator over a split's TFRecord examples."""

import os
import shutil
import struct
import zlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import user_module as user_module_lib
from tfx_tpu_trainer.data import data_checks
from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.data import shared_cache

__all__ = ['InputFn', 'CACHE_MODES', 'CACHE_MAX_COMPRESSED_BYTES',
           'PARSED_CACHE_MAX_BYTES', 'SHUFFLE_BUFFER_SIZE', 'PARSE_CHUNK_SIZE',
           'ROWS_PER_GATHER', 'SIZE_SAMPLE_BYTES', 'SHUFFLE_MODES',
           'STREAM_CHUNK_ROWS', 'STREAM_CHUNK_BUFFER', 'STREAM_WINDOW_ROWS',
           'STREAM_PARSE_ROWS', 'READ_BUFFER_BYTES', 'DISK_CACHE_MAX_BYTES',
           'DISK_CACHE_HEADROOM_BYTES', 'DISK_CHUNK_ROWS', 'DISK_CHUNK_BUFFER',
           'InputCacheError', 'estimated_record_count', 'check_cache_mode',
           'choose_cache', 'default_dataset', 'make_input_fn']

InputFn = Callable[[Dict[str, Any]], tf.data.Dataset]

CACHE_MODES = config_lib.INPUT_CACHE_MODES
# "auto" caches serialized records when a split's gzip files add up to at
# most this (gzip'd tf.Examples expand about 5-10x).
CACHE_MAX_COMPRESSED_BYTES = 128 * 1024 * 1024
# "auto" caches the parsed table of a training split when the estimated peak
# memory of building it (per input invocation: the table twice while its
# chunks are joined, plus two row-index vectors) is at most this.
PARSED_CACHE_MAX_BYTES = 512 * 1024 * 1024
# input_shuffle="record": the records shuffled one by one in this buffer.
SHUFFLE_BUFFER_SIZE = 10000
SHUFFLE_MODES = config_lib.INPUT_SHUFFLE_MODES
# input_shuffle="window" (streamed and serialized training input): records
# move in chunks of this many, chunks shuffled in a buffer of this many, then
# rows permuted within windows of at least `STREAM_WINDOW_ROWS` rows (whole
# batches), each window parsed in one call (docs/guide/performance.md,
# "Streaming").
STREAM_CHUNK_ROWS = 256
STREAM_CHUNK_BUFFER = 64
STREAM_WINDOW_ROWS = 16384
# Records parsed per `parse_example` call of a streamed window.
STREAM_PARSE_ROWS = 2048
# input_cache="disk" (its blocks: disk_cache.py): the most parsed bytes one
# input invocation writes (a larger share streams); and, in the first epoch,
# chunks of `DISK_CHUNK_ROWS` rows shuffled in a buffer of
# `DISK_CHUNK_BUFFER` before they are cut into blocks.
DISK_CACHE_MAX_BYTES = 64 * 1024**3
# Free space a local disk keeps beyond the cache, else the split streams.
DISK_CACHE_HEADROOM_BYTES = 2 * 1024**3
DISK_CHUNK_ROWS = STREAM_CHUNK_ROWS
DISK_CHUNK_BUFFER = STREAM_CHUNK_BUFFER
# Records parsed per `parse_example` call while the parsed table is built.
PARSE_CHUNK_SIZE = 4096
# Rows a repeating parsed-table input gathers per call (whole batches).
ROWS_PER_GATHER = 4096
# Compressed bytes read from the start of a file to count records per byte.
SIZE_SAMPLE_BYTES = 1024 * 1024
# The read buffer of each open TFRecord file (TensorFlow's default, 256 KB,
# halves the rate of reading gzip'd records).
READ_BUFFER_BYTES = 8 * 1024 * 1024
_RECORD_FRAMING_BYTES = 16  # Length (8), its CRC (4), the data's CRC (4).
_WHOLE_SPLIT = 2**62


class InputCacheError(errors.TPUTrainerError, ValueError):
  """The requested input cache cannot hold this split's features."""


def _input_invocation(params: Dict[str, Any]):
  """(index, count) of this input_fn call among all calls (TPU per-host)."""
  context = params.get('context')
  if context is None:
    return 0, 1
  _, index, count, _ = context.current_input_fn_deployment()
  return index, count


def _compressed_size(files: List[str]) -> int:
  return sum(tf.io.gfile.stat(path).length for path in files)


def _not_tabular(feature_spec: Mapping[str, Any],
                 numeric_only: bool) -> List[str]:
  """Features that cannot be a column of the dense parsed table."""
  return sorted(
      name for name, spec in feature_spec.items()
      if not isinstance(spec, tf.io.FixedLenFeature) or
      None in tf.TensorShape(spec.shape).as_list() or
      (numeric_only and spec.dtype == tf.string))


def _parsed_bytes_per_example(feature_spec: Mapping[str, Any]) -> int:
  return sum(
      max(1, tf.TensorShape(spec.shape).num_elements()) * spec.dtype.size
      for spec in feature_spec.values())


def _complete_records(framed: bytes) -> int:
  """Complete TFRecords at the start of decompressed TFRecord bytes."""
  count, position = 0, 0
  while position + 12 <= len(framed):
    (length,) = struct.unpack('<Q', framed[position:position + 8])
    position += length + _RECORD_FRAMING_BYTES
    if position > len(framed):
      break
    count += 1
  return count


def estimated_record_count(files: List[str], compressed_bytes: int) -> float:
  """Records in gzip'd TFRecord `files`, estimated from a file's start.

  Decompresses up to `SIZE_SAMPLE_BYTES` from the start of the first file
  that has records, counts the complete records in it (framing included),
  and scales records per compressed byte to `compressed_bytes`. A file
  smaller than the sample is counted exactly.

  Args:
    files: the split's files (gzip'd TFRecords).
    compressed_bytes: their total size on disk.

  Returns:
    The estimated number of records (0 when no file has a record).
  """
  for path in files:
    with tf.io.gfile.GFile(path, 'rb') as f:
      head = f.read(SIZE_SAMPLE_BYTES)
    try:
      framed = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(head)
    except zlib.error:
      continue  # Not gzip: the reader names the file when it fails.
    records = _complete_records(framed)
    if records:
      return compressed_bytes * records / len(head)
  return 0.0


def check_cache_mode(mode: str, feature_spec: Mapping[str, Any]) -> None:
  """Raises unless the default chain can cache these features as `mode`.

  Args:
    mode: the requested mode, one of `CACHE_MODES`.
    feature_spec: what `parse_example` reads.

  Raises:
    InputCacheError: "parsed" was asked for features it cannot hold.
  """
  if mode not in CACHE_MODES:
    raise InputCacheError(
        f'input cache {mode!r} is not one of {list(CACHE_MODES)}.')
  if mode in ('parsed', 'disk'):
    not_tabular = _not_tabular(feature_spec, numeric_only=False)
    if not_tabular:
      raise InputCacheError(
          f'input_cache="{mode}" needs fixed-length features of a known '
          f'shape; {not_tabular} are not. Set input_cache to "auto" or '
          '"serialized" in custom_config.')


def _file_share(files: List[str], invocation_index: int,
                invocation_count: int) -> Optional[List[str]]:
  """The files this invocation reads whole, or None if it shards records."""
  if invocation_count == 1:
    return files
  if len(files) >= invocation_count:
    return files[invocation_index::invocation_count]
  return None


def _share_rows(files: List[str], compressed: int, invocation_index: int,
                invocation_count: int) -> float:
  """Estimated records of one invocation's share of the split."""
  share = _file_share(files, invocation_index, invocation_count)
  if share is None:
    return estimated_record_count(files, compressed) / invocation_count
  return estimated_record_count(
      share, compressed if share is files else _compressed_size(share))


def _free_bytes(path: str) -> Optional[int]:
  """Free bytes of the local file system that holds (or will hold) `path`.

  None for a path of a remote file system (`gs://...`).
  """
  if '://' in path:
    return None
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  return shutil.disk_usage(existing).free


def _disk_cache_refusal(cache_dir: str, cache_bytes: float,
                        remote_ok: bool) -> Optional[str]:
  """Why `cache_bytes` of parsed rows cannot go under `cache_dir`, or None.

  Over `DISK_CACHE_MAX_BYTES`, or with less free space than the cache plus
  `DISK_CACHE_HEADROOM_BYTES` (checkpoints and the export need room too).
  The free space of a remote file system is not known: `remote_ok` says
  whether to cache there anyway.
  """
  if cache_bytes > DISK_CACHE_MAX_BYTES:
    return (f'about {cache_bytes / 1024**3:.1f} GB parsed is over the '
            f'{DISK_CACHE_MAX_BYTES / 1024**3:.0f} GB cap')
  free = _free_bytes(cache_dir)
  if free is None:
    return None if remote_ok else (
        f'the free space of {cache_dir} (not a local disk) is unknown')
  if cache_bytes + DISK_CACHE_HEADROOM_BYTES > free:
    return (f'about {cache_bytes / 1024**3:.1f} GB parsed (plus '
            f'{DISK_CACHE_HEADROOM_BYTES / 1024**3:.0f} GB of headroom) is '
            f'more than the {free / 1024**3:.1f} GB free where it goes '
            f'({cache_dir})')
  return None


def _disk_cache_path(files: List[str], feature_spec: Mapping[str, Any],
                     training: bool, cache_dir: Optional[str],
                     invocation_index: int,
                     invocation_count: int) -> Optional[str]:
  """Where this invocation's cache goes, or None to stream instead.

  Evaluation input (read for a few steps) and a run without a cache
  directory (a direct `Do()` call) stream; so does a share whose parsed
  size is estimated over `DISK_CACHE_MAX_BYTES` or over the free space of
  a local disk (`_disk_cache_refusal`).
  """
  if not training or cache_dir is None:
    logging.info('input_cache="disk" streams this split (%s).',
                 'evaluation input' if not training else
                 'no resumable directory to hold the cache')
    return None
  rows = _share_rows(files, _compressed_size(files), invocation_index,
                     invocation_count)
  cache_bytes = rows * _parsed_bytes_per_example(feature_spec)
  refusal = _disk_cache_refusal(cache_dir, cache_bytes, remote_ok=True)
  if refusal is not None:
    logging.warning('input_cache="disk": %s; streaming the split instead.',
                    refusal)
    return None
  path = os.path.join(cache_dir,
                      f'host-{invocation_index}-of-{invocation_count}')
  logging.info('Caching the parsed training split on disk in %s (about '
               '%.1f MB for %d examples).', path, cache_bytes / 2**20,
               int(rows))
  return path


def choose_cache(mode: str, files: List[str],
                 feature_spec: Mapping[str, Any], training: bool = True,
                 invocation_index: int = 0,
                 invocation_count: int = 1,
                 cache_dir: Optional[str] = None) -> str:
  """The cache of one split: "parsed", "disk", "serialized" or "none".

  "auto" builds the parsed table for training input only: the table is
  built whole every time an input_fn is called, which pays off when the
  split is read for many epochs, not for an evaluation of a few steps.
  Training input of fixed-length features whose table is over the memory
  cap goes to the disk cache when `cache_dir` is on a local disk with room
  for it (`_disk_cache_refusal`); the choice and its reason are logged.

  Args:
    mode: the requested mode, one of `CACHE_MODES`.
    files: the split's files.
    feature_spec: what `parse_example` reads.
    training: whether this is training input.
    invocation_index: which input invocation this is (a TPU host).
    invocation_count: how many input invocations share the split.
    cache_dir: where input_cache="disk" would write (None: nowhere).

  Returns:
    The cache to build: `mode` itself unless it is "auto".

  Raises:
    InputCacheError: "parsed" was asked for features it cannot hold.
  """
  check_cache_mode(mode, feature_spec)
  if mode != 'auto':
    return mode
  compressed = _compressed_size(files)
  if training and not _not_tabular(feature_spec, numeric_only=False):
    rows = _share_rows(files, compressed, invocation_index, invocation_count)
    table_bytes = rows * _parsed_bytes_per_example(feature_spec)
    peak_bytes = 2 * table_bytes + 2 * 8 * rows
    if (peak_bytes <= PARSED_CACHE_MAX_BYTES and
        not _not_tabular(feature_spec, numeric_only=True)):
      logging.info(
          'Caching the parsed training split in memory (about %.1f MB for '
          '%d examples).', table_bytes / 2**20, int(rows))
      return 'parsed'
    refusal = ('no resumable directory to hold it' if cache_dir is None else
               _disk_cache_refusal(cache_dir, table_bytes, remote_ok=False))
    if refusal is None:
      logging.info(
          'input_cache="auto": the parsed training split (about %.1f MB) '
          'is over the in-memory cap (%.0f MB at peak); caching it on disk.',
          table_bytes / 2**20, PARSED_CACHE_MAX_BYTES / 2**20)
      return 'disk'
    logging.info('input_cache="auto": not caching the training split on '
                 'disk: %s.', refusal)
  if compressed <= CACHE_MAX_COMPRESSED_BYTES:
    return 'serialized'
  logging.info('Not caching the split (%.1f MB of gzip files).',
               compressed / 2**20)
  return 'none'


def _records(files: List[str], training: bool, invocation_index: int,
             invocation_count: int,
             chunk_rows: Optional[int] = None) -> tf.data.Dataset:
  """This invocation's share of the serialized records, read in parallel.

  With fewer files than invocations, each invocation keeps every
  `invocation_count`-th record of each file: the shares partition the split
  whatever order each invocation reads the files in (a shard of the
  interleaved stream would not: the order differs between invocations).
  With `chunk_rows`, each file's records are batched before the files are
  interleaved: the elements are `[<= chunk_rows]` vectors of records, and the
  parallel interleave, which costs more per element than reading a record,
  hands over one element per chunk.
  """
  share = _file_share(files, invocation_index, invocation_count)
  read = files if share is None else share
  dataset = tf.data.Dataset.from_tensor_slices(read)
  if training:
    dataset = dataset.shuffle(len(read))

  def records_of(path):
    records = tf.data.TFRecordDataset(path, compression_type='GZIP',
                                      buffer_size=READ_BUFFER_BYTES)
    if share is None:
      records = records.shard(invocation_count, invocation_index)
    return records if chunk_rows is None else records.batch(chunk_rows)

  return dataset.interleave(
      records_of,
      cycle_length=tf.data.AUTOTUNE,
      num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=not training)


def _column_layouts(feature_spec: Mapping[str, Any]
                   ) -> Dict[str, List[Tuple[str, tf.TensorShape]]]:
  """Per dtype name, `(name, shape)` of each column in its block's order.

  A column's width in its block is its shape's element count: a batch is
  one gather per dtype instead of one per feature, and the gathered block is
  split back into the features.
  """
  layouts = {}
  for name in sorted(feature_spec):
    spec = feature_spec[name]
    layouts.setdefault(spec.dtype.name, []).append(
        (name, tf.TensorShape(spec.shape)))
  return layouts


def _blocks_by_dtype(columns: Mapping[str, tf.Tensor],
                     layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]]
                    ) -> Dict[str, tf.Tensor]:
  """The columns joined into one `[rows, width]` block per dtype name."""
  return {
      dtype: tf.concat([
          tf.reshape(columns[name], [tf.shape(columns[name])[0], -1])
          for name, _ in layout
      ], axis=1) for dtype, layout in layouts.items()
  }


def _gathered_batches(blocks: Mapping[str, tf.Tensor], rows: tf.Tensor,
                      layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                      batches: int, batch_size: int, label_key: str
                     ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
  """`rows` of the per-dtype blocks as `[batches, batch_size, ...]` features.

  `batches` may be -1 (as many as `rows` holds); the label is apart.
  """
  return _as_batches({dtype: tf.gather(block, rows)
                      for dtype, block in blocks.items()},
                     layouts, batches, batch_size, label_key)


def _as_batches(blocks: Mapping[str, tf.Tensor],
                layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                batches: int, batch_size: int, label_key: str
               ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
  """Per-dtype blocks of whole batches as `[batches, batch_size, ...]`."""
  features = {}
  for dtype, block in blocks.items():
    layout = layouts[dtype]
    parts = tf.split(block,
                     [shape.num_elements() for _, shape in layout], axis=1)
    for (name, shape), part in zip(layout, parts):
      features[name] = tf.reshape(part,
                                  [batches, batch_size] + shape.as_list())
  label = features.pop(label_key)
  return features, label


def _parsed_table_batches(chunks: tf.data.Dataset,
                          feature_spec: Mapping[str, Any], label_key: str,
                          batch_size: int, training: bool,
                          repeat: bool) -> tf.data.Dataset:
  """Batches gathered from the split parsed whole into dense blocks first.

  Each chunk of records (each file's records batched by `PARSE_CHUNK_SIZE`
  as they are read) is parsed and joined into its per-dtype blocks
  before the chunks are joined into the table, so building the table holds
  the table about twice (the chunks and the joined blocks), and training
  holds it once (CHANGELOG.md, "Performance, round three (issue 22)";
  joining the parsed columns first, then the columns into blocks, held it
  about three times).
  Training input starts on the stream instead (`_table_after_first_epoch`).
  """
  layouts = _column_layouts(feature_spec)
  table = chunks.map(
      lambda serialized: _blocks_by_dtype(
          tf.io.parse_example(serialized, feature_spec), layouts),
      num_parallel_calls=tf.data.AUTOTUNE).rebatch(_WHOLE_SPLIT)
  return _table_batches(table, layouts, label_key, batch_size, training,
                        repeat)


def _table_after_first_epoch(chunks: tf.data.Dataset,
                             feature_spec: Mapping[str, Any], label_key: str,
                             batch_size: int,
                             repeat: bool) -> tf.data.Dataset:
  """Training batches: the first epoch streamed, later ones from the table.

  The first epoch is streamed as `_window_shuffled_batches` streams it
  (chunks of `STREAM_CHUNK_ROWS` records shuffled, parsed by
  `STREAM_PARSE_ROWS`, rows permuted per window), and its parsed blocks are
  kept in memory as they pass; when it ends they are joined into the table,
  which every later epoch permutes whole. Training starts as soon as a
  window is parsed instead of after the whole split, and the records are
  read and parsed once either way. Memory: the kept blocks and the joined
  table, about twice the table (what building the table alone peaks at).
  """
  logging.info(
      'Training starts on the streamed first epoch while the parsed table '
      'fills; later epochs read the table. Should training stop before the '
      'first epoch ends, TensorFlow warns that "the calling iterator did not '
      'fully read the dataset being cached": nothing is lost, the rows kept '
      'so far are dropped.')
  layouts = _column_layouts(feature_spec)
  kept = shared_cache.kept_in_memory(_parsed_chunks(
      chunks.shuffle(STREAM_CHUNK_BUFFER), feature_spec, layouts,
      deterministic=False))
  first_epoch = _permuted_windows(kept, layouts, label_key, batch_size,
                                  _window_rows(batch_size), repeat=False)
  if not repeat:
    return first_epoch
  return first_epoch.concatenate(_table_batches(
      kept.rebatch(_WHOLE_SPLIT), layouts, label_key, batch_size,
      training=True, repeat=True))


def _table_batches(table: tf.data.Dataset,
                   layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                   label_key: str, batch_size: int, training: bool,
                   repeat: bool) -> tf.data.Dataset:
  """Batches gathered from `table`, the split's rows as one block per dtype.

  A training table is permuted whole every epoch. A repeating input gathers
  the rows of several batches per call (about `ROWS_PER_GATHER`) and cuts
  them into batches: the same batches, in the same order, for fewer
  function calls per batch.
  """
  # Without repeat a multiple-batch gather would drop more than the last
  # partial batch at the end of the split.
  batches_per_gather = max(1, ROWS_PER_GATHER // batch_size) if repeat else 1

  def batches(blocks):
    row_count = tf.shape(next(iter(blocks.values())), out_type=tf.int64)[0]

    def epoch_order(_):
      rows = tf.range(row_count)
      return tf.random.shuffle(rows) if training else rows

    epochs = tf.data.Dataset.from_tensors(0).repeat(None if repeat else 1)
    row_groups = epochs.map(epoch_order).rebatch(
        batch_size * batches_per_gather, drop_remainder=True)

    def gather(rows):
      return _gathered_batches(blocks, rows, layouts, batches_per_gather,
                               batch_size, label_key)

    return row_groups.map(gather,
                          num_parallel_calls=tf.data.AUTOTUNE).unbatch()

  return table.flat_map(batches)


def _batch_parser(feature_spec: Mapping[str, Any], label_key: str
                 ) -> Callable[[tf.Tensor], Tuple[Dict[str, Any], Any]]:
  """`parse(serialized)`: a batch of records as `(features, label)`."""

  def parse(serialized):
    features = tf.io.parse_example(serialized, feature_spec)
    label = features.pop(label_key)
    return features, label

  return parse


def _parsed_per_batch(records: tf.data.Dataset,
                      feature_spec: Mapping[str, Any], label_key: str,
                      batch_size: int, training: bool, repeat: bool,
                      cache: bool) -> tf.data.Dataset:
  """Batches of (cached) serialized records, each parsed in one call.

  Training input shuffles the records one by one in a buffer of
  `SHUFFLE_BUFFER_SIZE` (input_shuffle="record").
  """
  if cache:
    records = records.cache()
  if training:
    records = records.shuffle(SHUFFLE_BUFFER_SIZE)
  if repeat:
    records = records.repeat()
  return records.batch(batch_size, drop_remainder=True).map(
      _batch_parser(feature_spec, label_key),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)


def _window_shuffled_batches(chunks: tf.data.Dataset,
                             feature_spec: Mapping[str, Any], label_key: str,
                             batch_size: int, repeat: bool,
                             cache: bool) -> tf.data.Dataset:
  """Training batches of serialized records mixed in chunks and windows.

  No step of the chain handles one record at a time but the read: `chunks`
  are each file's records batched raw (at most `STREAM_CHUNK_ROWS`; cached
  in memory when `cache`), the chunks shuffled in a buffer of
  `STREAM_CHUNK_BUFFER`, joined into windows of whole batches (at least
  `STREAM_WINDOW_ROWS` rows), each window's rows permuted with one
  `tf.random.shuffle` and cut into batches. Dense features are parsed by
  `STREAM_PARSE_ROWS` before their window is permuted (`_parsed_chunks`),
  others once per batch. Batches have the static shape `[batch_size, ...]`;
  without `repeat`, less than a batch of the split's last window is
  dropped, as `drop_remainder` does.
  """
  if cache:
    chunks = chunks.cache()
  chunks = chunks.shuffle(STREAM_CHUNK_BUFFER)
  if repeat:
    chunks = chunks.repeat()
  window_rows = _window_rows(batch_size)
  if not _not_tabular(feature_spec, numeric_only=False):
    layouts = _column_layouts(feature_spec)
    return _permuted_windows(
        _parsed_chunks(chunks, feature_spec, layouts, deterministic=False),
        layouts, label_key, batch_size, window_rows, repeat)

  def shuffled_batches(serialized):
    """The window's rows permuted, as `[batches, batch_size]` records."""
    serialized = tf.random.shuffle(serialized)
    whole = tf.shape(serialized)[0] // batch_size * batch_size
    return tf.reshape(serialized[:whole], [-1, batch_size])

  windows = chunks.rebatch(window_rows, drop_remainder=repeat)
  return windows.map(shuffled_batches).unbatch().map(
      _batch_parser(feature_spec, label_key),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)


def _parsed_chunks(chunks: tf.data.Dataset, feature_spec: Mapping[str, Any],
                   layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                   deterministic: bool) -> tf.data.Dataset:
  """Record chunks parsed by `STREAM_PARSE_ROWS` into per-dtype blocks.

  Parsing records in groups of about 2,000 is fastest here (the records of a
  whole window no longer fit the processor's caches;
  docs/guide/performance.md, "Streaming").
  """
  return chunks.rebatch(STREAM_PARSE_ROWS).map(
      lambda serialized: _blocks_by_dtype(
          tf.io.parse_example(serialized, feature_spec), layouts),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def _permuted_windows(parsed: tf.data.Dataset,
                      layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                      label_key: str, batch_size: int, window_rows: int,
                      repeat: bool) -> tf.data.Dataset:
  """Batches of parsed blocks, rows permuted per window of `window_rows`.

  Each window's rows are permuted as the parsed table permutes its rows
  (one gather per dtype); permuting parsed numbers is cheaper than
  permuting the records' strings.
  """

  def batches(blocks):
    row_count = tf.shape(next(iter(blocks.values())))[0]
    rows = tf.random.shuffle(tf.range(row_count))
    rows = rows[:row_count // batch_size * batch_size]
    return _gathered_batches(blocks, rows, layouts, -1, batch_size,
                             label_key)

  return parsed.rebatch(window_rows, drop_remainder=repeat).map(
      batches, num_parallel_calls=tf.data.AUTOTUNE,
      deterministic=False).unbatch()


def _window_rows(batch_size: int) -> int:
  """Whole batches of at least `STREAM_WINDOW_ROWS` rows."""
  return batch_size * max(1, -(-STREAM_WINDOW_ROWS // batch_size))


def _block_batches(blocks: tf.data.Dataset,
                   layouts: Mapping[str, List[Tuple[str, tf.TensorShape]]],
                   label_key: str, batch_size: int,
                   repeat: bool) -> tf.data.Dataset:
  """Batches of blocks, each block's rows permuted (one gather per dtype).

  Batches are cut across blocks (and epochs) by about `ROWS_PER_GATHER`
  rows at a time, as the parsed table cuts them.
  """
  batches_per_cut = max(1, ROWS_PER_GATHER // batch_size) if repeat else 1

  def permuted(block_by_dtype):
    rows = tf.random.shuffle(
        tf.range(tf.shape(next(iter(block_by_dtype.values())))[0]))
    return {dtype: tf.gather(block, rows)
            for dtype, block in block_by_dtype.items()}

  def features(block_by_dtype):
    return _as_batches(block_by_dtype, layouts, batches_per_cut, batch_size,
                       label_key)

  cuts = blocks.map(permuted, num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=False).rebatch(
                        batches_per_cut * batch_size, drop_remainder=True)
  return cuts.map(features, num_parallel_calls=tf.data.AUTOTUNE,
                  deterministic=False).unbatch()


def _disk_cached_batches(chunks: tf.data.Dataset, files: List[str],
                         feature_spec: Mapping[str, Any], label_key: str,
                         batch_size: int, repeat: bool,
                         cache_path: str) -> tf.data.Dataset:
  """Training batches of the split parsed once into blocks on disk.

  The first epoch of the first input_fn call streams (`chunks`, files in a
  random order) and writes the parsed rows in blocks of
  `disk_cache.BLOCK_ROWS` (`disk_cache.written_blocks`); the marker written
  after the last block makes the cache complete. Every later epoch, and a
  later input_fn call (a retry of the execution), reads the blocks back in
  a fresh random order instead. A cache that is unfinished (the process
  died, or training stopped mid-epoch), built from other `files` or
  schema, or whose blocks do not all read back whole is never read: it is
  removed and written again (`disk_cache.open_cache`). The first epoch's
  parsed rows are mixed as streaming mixes them (chunks of
  `DISK_CHUNK_ROWS` shuffled in a buffer of `DISK_CHUNK_BUFFER`) before
  they are cut into blocks; every epoch permutes the rows of each block
  (`_block_batches`: windows of a block's rows, 4x streaming's).
  """
  layouts = _column_layouts(feature_spec)
  key = disk_cache.inputs_key(files, feature_spec)
  block_files = disk_cache.open_cache(cache_path, key)
  if block_files is not None:
    logging.info('Reading the parsed training split cached in %s (%d '
                 'blocks, checked).', cache_path, len(block_files))
    blocks = disk_cache.read_blocks(cache_path, layouts, repeat, block_files)
  else:
    parsed = _parsed_chunks(chunks, feature_spec, layouts,
                            deterministic=False)
    blocks = disk_cache.written_blocks(
        parsed.rebatch(DISK_CHUNK_ROWS).shuffle(DISK_CHUNK_BUFFER),
        cache_path, layouts, key)
    if repeat:
      blocks = blocks.concatenate(
          disk_cache.read_blocks(cache_path, layouts, True))
  return _block_batches(blocks, layouts, label_key, batch_size, repeat)


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
    cache: one of `CACHE_MODES` (see the module docstring).
    shuffle: how training input that is not the parsed table is mixed, one
      of `SHUFFLE_MODES`: "window" (chunks and windows of rows,
      `_window_shuffled_batches`) or "record" (a record buffer).
    cache_dir: where input_cache="disk" writes its blocks (None: it
      streams instead).
    table_first: build the parsed table of training input whole before the
      first batch instead of while its first epoch streams (an input_fn
      that stops before an epoch ends, as eval_strategy="alternate" does).

  Returns:
    The dataset.
  """
  if shuffle not in SHUFFLE_MODES:
    raise InputCacheError(
        f'input_shuffle {shuffle!r} is not one of {list(SHUFFLE_MODES)}; set '
        "custom_config['input_shuffle'] to one of them.")
  files = data_checks.split_files(file_pattern)
  feature_spec = schemas_lib.feature_spec(schema)
  chosen = choose_cache(cache, files, feature_spec, training,
                        invocation_index, invocation_count, cache_dir)
  disk_path = None
  if chosen == 'disk':
    disk_path = _disk_cache_path(files, feature_spec, training, cache_dir,
                                 invocation_index, invocation_count)
    chosen = 'none'
  if disk_path is not None:
    dataset = _disk_cached_batches(
        _records(files, True, invocation_index, invocation_count,
                 STREAM_CHUNK_ROWS), files,
        feature_spec, label_key, batch_size, repeat, disk_path)
  elif chosen == 'parsed' and training and not table_first:
    dataset = _table_after_first_epoch(
        _records(files, training, invocation_index, invocation_count,
                 STREAM_CHUNK_ROWS),
        feature_spec, label_key, batch_size, repeat)
  elif chosen == 'parsed':
    dataset = _parsed_table_batches(
        _records(files, training, invocation_index, invocation_count,
                 PARSE_CHUNK_SIZE),
        feature_spec, label_key, batch_size, training, repeat)
  elif training and shuffle == 'window':
    dataset = _window_shuffled_batches(
        _records(files, training, invocation_index, invocation_count,
                 STREAM_CHUNK_ROWS),
        feature_spec, label_key, batch_size, repeat, chosen == 'serialized')
  else:
    records = _records(files, training, invocation_index, invocation_count)
    dataset = _parsed_per_batch(records, feature_spec, label_key, batch_size,
                                training, repeat, chosen == 'serialized')
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
    cache: the default chain's cache, one of `CACHE_MODES`.
    shuffle: the default chain's shuffle, one of `SHUFFLE_MODES`.
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
