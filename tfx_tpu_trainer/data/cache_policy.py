"""Which cache one input invocation of a split builds (`CacheChoice`), decided
once by `choose_cache`; the dataset builders build it and decide nothing."""

import dataclasses
import os
import shutil
import struct
import zlib
from typing import Any, List, Mapping, Optional

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors

__all__ = ['check_cache_mode']

CACHE_MODES = config_lib.INPUT_CACHE_MODES
# "auto" caches serialized records when a split's gzip files add up to at
# most this (gzip'd tf.Examples expand about 5-10x).
CACHE_MAX_COMPRESSED_BYTES = 128 * 1024 * 1024
# "auto" caches the parsed table of a training split when the estimated peak
# memory of building it (per input invocation: the table twice while its
# chunks are joined, plus two row-index vectors) is at most this.
PARSED_CACHE_MAX_BYTES = 512 * 1024 * 1024
# input_cache="disk" (its blocks: disk_cache.py): the most parsed bytes one
# input invocation writes (a larger share streams).
DISK_CACHE_MAX_BYTES = 64 * 1024**3
# Free space a local disk keeps beyond the cache, else the split streams.
DISK_CACHE_HEADROOM_BYTES = 2 * 1024**3
# Compressed bytes read from the start of a file to count records per byte.
SIZE_SAMPLE_BYTES = 1024 * 1024
_RECORD_FRAMING_BYTES = 16  # Length (8), its CRC (4), the data's CRC (4).


class InputCacheError(errors.TPUTrainerError, ValueError):
  """The requested input cache cannot hold this split's features."""


@dataclasses.dataclass(frozen=True)
class CacheChoice:
  """The cache one input invocation builds, as `choose_cache` decided it.

  Attributes:
    mode: "parsed", "disk", "serialized" or "none" (never "auto").
    disk_path: where mode "disk" writes and reads this invocation's blocks
      (`<cache_dir>/host-<i>-of-<n>`); None for the other modes.
  """
  mode: str
  disk_path: Optional[str] = None


def _compressed_size(files: List[str]) -> int:
  return sum(tf.io.gfile.stat(path).length for path in files)


def not_tabular(feature_spec: Mapping[str, Any],
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
    InputCacheError: `mode` is unknown, or "parsed" or "disk" was asked for
      features it cannot hold.
  """
  if mode not in CACHE_MODES:
    raise InputCacheError(
        f'input cache {mode!r} is not one of {list(CACHE_MODES)}.')
  if mode in ('parsed', 'disk'):
    unfit = not_tabular(feature_spec, numeric_only=False)
    if unfit:
      raise InputCacheError(
          f'input_cache="{mode}" needs fixed-length features of a known '
          f'shape; {unfit} are not. Set input_cache to "auto" or '
          '"serialized" in custom_config.')


def file_share(files: List[str], invocation_index: int,
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
  share = file_share(files, invocation_index, invocation_count)
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


def _disk_choice(cache_dir: str, cache_bytes: float, rows: float,
                 invocation_index: int,
                 invocation_count: int) -> CacheChoice:
  """The disk cache of this invocation, in its own directory."""
  path = os.path.join(cache_dir,
                      f'host-{invocation_index}-of-{invocation_count}')
  logging.info('Caching the parsed training split on disk in %s (about '
               '%.1f MB for %d examples).', path, cache_bytes / 2**20,
               int(rows))
  return CacheChoice('disk', path)


def _requested_disk(files: List[str], feature_spec: Mapping[str, Any],
                    training: bool, cache_dir: Optional[str],
                    invocation_index: int,
                    invocation_count: int) -> CacheChoice:
  """input_cache="disk": the disk cache, or no cache where it cannot go.

  Evaluation input (read for a few steps) and a run without a cache
  directory (a direct `Do()` call) stream; so does a share whose parsed
  size is estimated over `DISK_CACHE_MAX_BYTES` or over the free space of
  a local disk (`_disk_cache_refusal`). Asked for by name, the cache goes
  to a remote file system too, whose free space is not known.
  """
  if not training or cache_dir is None:
    logging.info('input_cache="disk" streams this split (%s).',
                 'evaluation input' if not training else
                 'no resumable directory to hold the cache')
    return CacheChoice('none')
  rows = _share_rows(files, _compressed_size(files), invocation_index,
                     invocation_count)
  cache_bytes = rows * _parsed_bytes_per_example(feature_spec)
  refusal = _disk_cache_refusal(cache_dir, cache_bytes, remote_ok=True)
  if refusal is not None:
    logging.warning('input_cache="disk": %s; streaming the split instead.',
                    refusal)
    return CacheChoice('none')
  return _disk_choice(cache_dir, cache_bytes, rows, invocation_index,
                      invocation_count)


def _automatic(files: List[str], feature_spec: Mapping[str, Any],
               training: bool, invocation_index: int, invocation_count: int,
               cache_dir: Optional[str]) -> CacheChoice:
  """input_cache="auto": the cache that suits this split (`choose_cache`)."""
  compressed = _compressed_size(files)
  if training and not not_tabular(feature_spec, numeric_only=False):
    rows = _share_rows(files, compressed, invocation_index, invocation_count)
    table_bytes = rows * _parsed_bytes_per_example(feature_spec)
    peak_bytes = 2 * table_bytes + 2 * 8 * rows
    if (peak_bytes <= PARSED_CACHE_MAX_BYTES and
        not not_tabular(feature_spec, numeric_only=True)):
      logging.info(
          'Caching the parsed training split in memory (about %.1f MB for '
          '%d examples).', table_bytes / 2**20, int(rows))
      return CacheChoice('parsed')
    refusal = ('no resumable directory to hold it' if cache_dir is None else
               _disk_cache_refusal(cache_dir, table_bytes, remote_ok=False))
    if refusal is None:
      logging.info(
          'input_cache="auto": the parsed training split (about %.1f MB) '
          'is over the in-memory cap (%.0f MB at peak); caching it on disk.',
          table_bytes / 2**20, PARSED_CACHE_MAX_BYTES / 2**20)
      return _disk_choice(cache_dir, table_bytes, rows, invocation_index,
                          invocation_count)
    logging.info('input_cache="auto": not caching the training split on '
                 'disk: %s.', refusal)
  if compressed <= CACHE_MAX_COMPRESSED_BYTES:
    return CacheChoice('serialized')
  logging.info('Not caching the split (%.1f MB of gzip files).',
               compressed / 2**20)
  return CacheChoice('none')


def choose_cache(mode: str, files: List[str],
                 feature_spec: Mapping[str, Any], training: bool = True,
                 invocation_index: int = 0,
                 invocation_count: int = 1,
                 cache_dir: Optional[str] = None) -> CacheChoice:
  """The cache one input invocation of a split builds, decided once.

  "auto" builds the parsed table for training input only: the table is
  built whole every time an input_fn is called, which pays off when the
  split is read for many epochs, not for an evaluation of a few steps.
  Training input of fixed-length features whose table is over the memory
  cap goes to the disk cache when `cache_dir` is on a local disk with room
  for it (`_disk_cache_refusal`); the choice and its reason are logged.
  "disk" asked for by name caches where it can and streams elsewhere
  (`_requested_disk`); the other modes are taken as they are.

  Args:
    mode: the requested mode, one of `CACHE_MODES`.
    files: the split's files.
    feature_spec: what `parse_example` reads.
    training: whether this is training input.
    invocation_index: which input invocation this is (a TPU host).
    invocation_count: how many input invocations share the split.
    cache_dir: where input_cache="disk" would write (None: nowhere).

  Returns:
    The cache to build, with the directory of a disk cache.

  Raises:
    InputCacheError: "parsed" or "disk" was asked for features it cannot
      hold, or `mode` is not one of `CACHE_MODES`.
  """
  check_cache_mode(mode, feature_spec)
  if mode == 'disk':
    return _requested_disk(files, feature_spec, training, cache_dir,
                           invocation_index, invocation_count)
  if mode != 'auto':
    return CacheChoice(mode)
  return _automatic(files, feature_spec, training, invocation_index,
                    invocation_count, cache_dir)
