"""Checks that a local run can write its output root, before it starts."""

import os
import tempfile

from tfx_tpu_trainer import errors

PROBE_PREFIX = '.tfx-tpu-trainer-probe-'


class OutputRootError(errors.TPUTrainerError, OSError):
  """The output root cannot be created or written."""


def check_pipeline_name(name: str, flag: str = '--pipeline-name') -> None:
  """Raises OutputRootError unless `name` is one folder name.

  The local run writes `metadata/NAME/`, `pipelines/NAME/` and
  `serving_model/NAME/` under the output root: a name with a separator, or
  `.`/`..`, would put them elsewhere (`../../escaped` outside it).

  Args:
    name: the pipeline name.
    flag: where the name came from, for the message.
  """
  if (name in ('', '.', '..') or '/' in name or '\\' in name or
      '\0' in name or os.sep in name):
    raise OutputRootError(
        f'{flag} {name!r} is not a plain name: the run keeps each pipeline\'s '
        'outputs in a folder of that name under the output root, and this '
        'one would leave it (or be no folder). Use letters, digits, "-" and '
        '"_", e.g. taxi_tpu.')


def check_writable(output_root: str, flag: str = '--output-root') -> None:
  """Raises OutputRootError unless files can be created under `output_root`.

  Writes and removes a probe file in `output_root`, or, when it does not
  exist yet, in its nearest existing parent (the run creates the rest), so
  nothing is left behind either way. A permission check alone misses a
  read-only mount for root and a full disk for everyone.

  Args:
    output_root: the absolute output root.
    flag: the command-line flag, for the message.
  """
  existing = output_root
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise OutputRootError(
        f'{flag} {output_root!r} cannot be created: {existing!r} is a file. '
        'Choose another directory.')
  try:
    fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=existing)
    try:
      os.write(fd, b'x' * 4096)
    finally:
      os.close(fd)
      os.remove(probe)
  except OSError as e:
    where = ('' if existing == output_root else
             f' (it does not exist and its parent {existing!r} cannot be '
             'written)')
    raise OutputRootError(
        f'{flag} {output_root!r} is not writable{where}: '
        f'{e.strerror or e}. The run writes its pipeline outputs, metadata '
        f'and logs there: choose a writable directory with free space, '
        f'e.g. {flag} ./tfx_output.') from e
