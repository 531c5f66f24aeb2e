"""The default input's tf.data chains: one invocation's share of a split's
records to static `(features, label)` batches, one chain per cache."""

from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.data import cache_policy
from tfx_tpu_trainer.data import disk_cache
from tfx_tpu_trainer.data import shared_cache

SHUFFLE_MODES = config_lib.INPUT_SHUFFLE_MODES
# input_shuffle="record": the records shuffled one by one in this buffer.
SHUFFLE_BUFFER_SIZE = 10000
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
# input_cache="disk", in the first epoch: chunks of `DISK_CHUNK_ROWS` rows
# shuffled in a buffer of `DISK_CHUNK_BUFFER` before they are cut into
# blocks (disk_cache.py).
DISK_CHUNK_ROWS = STREAM_CHUNK_ROWS
DISK_CHUNK_BUFFER = STREAM_CHUNK_BUFFER
# Records parsed per `parse_example` call while the parsed table is built.
PARSE_CHUNK_SIZE = 4096
# Rows a repeating parsed-table input gathers per call (whole batches).
ROWS_PER_GATHER = 4096
# The read buffer of each open TFRecord file (TensorFlow's default, 256 KB,
# halves the rate of reading gzip'd records).
READ_BUFFER_BYTES = 8 * 1024 * 1024
_WHOLE_SPLIT = 2**62


def batches(choice: cache_policy.CacheChoice, files: List[str],
            feature_spec: Mapping[str, Any], label_key: str,
            batch_size: int, training: bool, repeat: bool,
            invocation_index: int = 0, invocation_count: int = 1,
            shuffle: str = 'window',
            table_first: bool = False) -> tf.data.Dataset:
  """`(features, label)` batches of one invocation's share of a split.

  Args:
    choice: the cache to build (`cache_policy.choose_cache`).
    files: the split's files.
    feature_spec: what `parse_example` reads.
    label_key: the label feature, returned apart from the features.
    batch_size: the batch size of this input invocation.
    training: shuffle, and read files in any order, when true.
    repeat: repeat the split forever.
    invocation_index: which input invocation this is (a TPU host).
    invocation_count: how many invocations share the split.
    shuffle: how training input that is not the parsed table is mixed, one
      of `SHUFFLE_MODES`: "window" (chunks and windows of rows,
      `_window_shuffled_batches`) or "record" (a record buffer).
    table_first: build the parsed table of training input whole before the
      first batch instead of while its first epoch streams.

  Returns:
    The dataset of batches (not prefetched).
  """

  def records(chunk_rows: Optional[int] = None) -> tf.data.Dataset:
    return _records(files, training, invocation_index, invocation_count,
                    chunk_rows)

  if choice.mode == 'disk':
    return _disk_cached_batches(records(STREAM_CHUNK_ROWS), files,
                                feature_spec, label_key, batch_size, repeat,
                                choice.disk_path)
  if choice.mode == 'parsed' and training and not table_first:
    return _table_after_first_epoch(records(STREAM_CHUNK_ROWS), feature_spec,
                                    label_key, batch_size, repeat)
  if choice.mode == 'parsed':
    return _parsed_table_batches(records(PARSE_CHUNK_SIZE), feature_spec,
                                 label_key, batch_size, training, repeat)
  if training and shuffle == 'window':
    return _window_shuffled_batches(records(STREAM_CHUNK_ROWS), feature_spec,
                                    label_key, batch_size, repeat,
                                    choice.mode == 'serialized')
  return _parsed_per_batch(records(), feature_spec, label_key, batch_size,
                           training, repeat, choice.mode == 'serialized')


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
  share = cache_policy.file_share(files, invocation_index, invocation_count)
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
  if not cache_policy.not_tabular(feature_spec, numeric_only=False):
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
