"""Per-host input of a multi-host slice: every record read once per epoch.

TPUEstimator with `PER_HOST_V2` calls the input_fn once per host
(`params['context'].current_input_fn_deployment()`); the default chain reads
that host's share of the split. Across hosts the shares must cover every
record exactly once, whether each host takes whole files or, with fewer
files than hosts, records of every file.
"""

import numpy as np
import pytest

from tests.data import numbered_split
from tfx_tpu_trainer.data import input_fns


def _schema():
  return numbered_split.schema()


def _split(directory, files, rows_per_file):
  return numbered_split.write_split(directory, files, rows_per_file)


def _rows_read(paths, host, hosts, cache, shuffle='window'):
  dataset = input_fns.default_dataset(
      paths, _schema(), 'y', batch_size=1, training=True, repeat=False,
      invocation_index=host, invocation_count=hosts, cache=cache,
      shuffle=shuffle)
  return [int(row) for features, _ in dataset
          for row in np.ravel(features['row'])]


@pytest.mark.parametrize('files,hosts', [(8, 4), (6, 4), (2, 4), (1, 2),
                                         (3, 2)])
@pytest.mark.parametrize('cache,shuffle', [('none', 'window'),
                                           ('serialized', 'window'),
                                           ('none', 'record'),
                                           ('serialized', 'record'),
                                           ('parsed', 'window')])
def test_host_shares_cover_every_record_once(tmp_path, files, hosts, cache,
                                             shuffle):
  # Every input chain (streamed in chunks and windows, or record by record,
  # or tabled) reads each host's share only.
  rows_per_file = 25
  paths = _split(tmp_path, files, rows_per_file)
  shares = [_rows_read(paths, host, hosts, cache, shuffle)
            for host in range(hosts)]
  every_row = sorted(row for share in shares for row in share)
  assert every_row == list(range(files * rows_per_file))
  # No host is left without input, and none reads much more than its part.
  sizes = [len(share) for share in shares]
  assert min(sizes) > 0
  assert max(sizes) <= 2 * files * rows_per_file / hosts
