"""What in the user's code an XLA compile or run error comes from."""

import dataclasses
import linecache
import os
import re
from typing import Optional

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\s]+)')
# Paths of code that is not the user's: installed packages, this library,
# the Python standard library.
_LIBRARY_DIRS = ('site-packages', 'dist-packages', 'tfx_tpu_trainer',
                 os.path.dirname(os.__file__))
# XLA phrases, and what they mean for a TPU model.
_EXPLANATIONS = (
    ('Fail to proof the equality',
     'XLA could not prove two dimensions equal: a tensor whose size depends '
     'on the data (tf.boolean_mask, tf.unique, tf.where with one argument, '
     'sparse tensors of categorical feature columns) meets one of fixed '
     'size. Keep sizes fixed (tf.where(cond, x, 0) instead of '
     'tf.boolean_mask; dense one-hot or embedding inputs instead of '
     'categorical feature columns).'),
    ('must be a compile-time constant',
     'an argument XLA needs as a constant (a shape, a top_k k, a slice size) '
     'is computed from the data. Use a Python number or a static shape.'),
)


@dataclasses.dataclass(frozen=True)
class Frame:
  """A line of the user's code in an op's definition trace."""
  path: str
  line: int
  function: str

  def describe(self) -> str:
    code = self.source()
    return (f'{self.function} at {self.path}:{self.line}'
            + (f' (`{code}`)' if code else ''))

  def source(self) -> str:
    return linecache.getline(self.path, self.line).strip()


def _is_library(path: str) -> bool:
  normalized = os.path.normpath(os.sep + path.lstrip(os.sep))
  return path.startswith('<') or any(
      part in normalized for part in _LIBRARY_DIRS if part)


def _existing(path: str) -> str:
  """The path as written, or absolute when the trace dropped its leading /."""
  if not os.path.exists(path) and os.path.exists(os.sep + path):
    return os.sep + path
  return path


def user_frame(message: str) -> Optional[Frame]:
  """The deepest frame of the message's op-definition trace in user code."""
  frames = [Frame(_existing(path), int(line), function)
            for path, line, function in _FRAME.findall(message)
            if not _is_library(path)]
  return frames[-1] if frames else None


def explanation(message: str) -> str:
  """What an XLA message means for the model, or ''."""
  return ' '.join(text for phrase, text in _EXPLANATIONS if phrase in message)
