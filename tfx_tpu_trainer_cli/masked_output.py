"""A pipe whose every line reaches a log file with its secrets masked, for
file descriptors 1 and 2 of a command and of the processes it starts."""

import os
import select
import threading
from typing import BinaryIO

from tfx_tpu_trainer.publishing import secrets

# A line still unfinished after this long is written as it is (a prompt).
_IDLE_SECS = 1.0
# How long closing waits for the processes that still hold the pipe.
_CLOSE_WAIT_SECS = 10.0
_READ_BYTES = 65536


def _masked(data: bytes) -> bytes:
  text = data.decode('utf-8', 'surrogateescape')
  return secrets.mask_text(text).encode('utf-8', 'surrogateescape')


class MaskedPipe:
  """Bytes written to `write_fd` reach `log` line by line, masked.

  A thread copies the pipe to the log; lines are masked whole (a secret is
  never split between two reads). Whatever still holds the writing end
  (TensorFlow's C++ logging, Beam's worker processes, pip) writes through
  the mask too.
  """

  def __init__(self, log: BinaryIO):
    self._log = log
    self._read_fd, self.write_fd = os.pipe()
    self._thread = threading.Thread(target=self._copy, daemon=True,
                                    name='masked-log')
    self._thread.start()

  def _write(self, data: bytes) -> None:
    try:
      self._log.write(_masked(data))
      self._log.flush()
    except (OSError, ValueError):
      pass  # A full disk: drop the line; the pipe must keep draining.

  def _copy(self) -> None:
    pending = b''
    while True:
      ready, _, _ = select.select([self._read_fd], [], [], _IDLE_SECS)
      if not ready:
        if pending:
          self._write(pending)
          pending = b''
        continue
      chunk = os.read(self._read_fd, _READ_BYTES)
      if not chunk:
        break
      pending += chunk
      end = pending.rfind(b'\n') + 1
      if end:
        self._write(pending[:end])
        pending = pending[end:]
    if pending:
      self._write(pending)
    os.close(self._read_fd)

  def close(self) -> None:
    """Closes the writing end and waits for the log to have every line.

    File descriptors 1 and 2 must point elsewhere first; a process that
    still holds the pipe past `_CLOSE_WAIT_SECS` keeps writing through the
    thread while this process lives.
    """
    os.close(self.write_fd)
    self._thread.join(_CLOSE_WAIT_SECS)
