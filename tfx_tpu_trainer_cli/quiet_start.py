"""What TensorFlow and google.api_core print on import, kept off stderr."""

import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings

__all__ = ['TENSORFLOW_NOISE', 'API_CORE_WARNING', 'SELF_RENAME_WARNING',
           'install']

# What TensorFlow's C++ start-up writes at level E (TF_CPP_MIN_LOG_LEVEL=2
# lets E through) on a machine without a GPU: the XLA GPU plugins registered
# twice. Harmless, and printed by every process that imports TensorFlow.
TENSORFLOW_NOISE = re.compile(
    r'Unable to register (cuDNN|cuFFT|cuBLAS) factory: Attempting to '
    r'register factory for plugin')
# google.api_core's FutureWarning on Python 3.10, once per Google client
# library imported (TFX imports four): the stack pins Python 3.10
# (docs/architecture.md, "The stack").
API_CORE_WARNING = 'You are using a non-supported Python version'
# TensorFlow 2.15's table of renames moves tf.estimator.tpu.X to
# tf.compat.v1.estimator.tpu.X, and the module wrapper of
# tf.compat.v1.estimator.tpu checks its own names against that table: the
# first use of tf.compat.v1.estimator.tpu.TPUEstimatorSpec (the very name it
# recommends) logs, twice, that it is deprecated. Other deprecations pass.
SELF_RENAME_WARNING = re.compile(
    r'The name tf\.estimator\.tpu\.(\w+) is deprecated\. Please use '
    r'tf\.compat\.v1\.estimator\.tpu\.\1 instead')


def install() -> None:
  """Filters them from this process's first TensorFlow import on.

  Other lines TensorFlow writes while it loads still reach stderr.
  """
  warnings.filterwarnings('ignore', message=API_CORE_WARNING,
                          category=FutureWarning)
  tensorflow_logger = logging.getLogger('tensorflow')
  if not any(isinstance(f, _SelfRenameFilter)
             for f in tensorflow_logger.filters):
    tensorflow_logger.addFilter(_SelfRenameFilter())
  if 'tensorflow' not in sys.modules and not any(
      isinstance(finder, _QuietTensorFlowImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _QuietTensorFlowImport())


class _SelfRenameFilter(logging.Filter):
  """Drops TensorFlow's warning that a name is deprecated for itself."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not SELF_RENAME_WARNING.search(record.getMessage())


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
  """Runs the first `import tensorflow` with fd 2 captured and filtered.

  The lines come from C++ static initialisers while the package loads, so
  they are written to file descriptor 2 directly, not through sys.stderr.
  """

  def find_spec(self, name, path, target=None):
    del path, target
    if name != 'tensorflow':
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
      return spec
    load = spec.loader.exec_module

    def exec_module(module):
      with _StderrFiltered(TENSORFLOW_NOISE):
        load(module)

    spec.loader.exec_module = exec_module
    return spec


class _StderrFiltered:
  """File descriptor 2 into a file; its lines but `noise` written back after."""

  def __init__(self, noise: re.Pattern):
    self._noise = noise
    self._saved = None
    self._capture = None

  def __enter__(self):
    sys.stderr.flush()
    self._saved = os.dup(2)
    self._capture = tempfile.TemporaryFile()
    os.dup2(self._capture.fileno(), 2)

  def __exit__(self, *exc_info):
    sys.stderr.flush()
    os.dup2(self._saved, 2)
    os.close(self._saved)
    self._capture.seek(0)
    text = self._capture.read().decode('utf-8', errors='replace')
    self._capture.close()
    kept = [line for line in text.splitlines(keepends=True)
            if not self._noise.search(line)]
    if kept:
      sys.stderr.write(''.join(kept))
      sys.stderr.flush()
    return False
