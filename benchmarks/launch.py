"""Runs one harness step as a fresh Python subprocess and takes its rusage."""

import dataclasses
import os
import subprocess
import sys
import threading
import time
from typing import List, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class ProcessResult:
  """How a subprocess ended and what it cost."""
  returncode: int
  seconds: float
  max_rss_kb: int
  log_path: str
  timed_out: bool = False

  def log_tail(self, lines: int = 30) -> str:
    """The last `lines` lines of the subprocess's log."""
    try:
      with open(self.log_path, errors='replace') as f:
        return ''.join(f.readlines()[-lines:])
    except OSError:
      return ''


def run_module(module: str,
               args: List[str],
               log_path: str,
               timeout_seconds: Optional[float] = None) -> ProcessResult:
  """Runs `python -m module args...` from the repository root.

  Output (stdout and stderr) goes to `log_path`. The child is reaped with
  `os.wait4`, whose rusage is the child's own: `ru_maxrss` is its peak
  resident memory (KiB on Linux), imports and all.

  Args:
    module: the module to run, e.g. 'benchmarks.measure'.
    args: its command-line arguments.
    log_path: where its output goes.
    timeout_seconds: kill the child (and only it) after this long.

  Returns:
    The exit code, wall time, peak memory and log path.
  """
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  with open(log_path, 'w') as log:
    start = time.time()
    process = subprocess.Popen([sys.executable, '-m', module, *args],
                               stdout=log,
                               stderr=subprocess.STDOUT,
                               cwd=REPO_ROOT)
    timed_out = threading.Event()

    def kill():
      timed_out.set()
      process.kill()

    timer = None
    if timeout_seconds:
      timer = threading.Timer(timeout_seconds, kill)
      timer.start()
    try:
      _, status, rusage = os.wait4(process.pid, 0)
    finally:
      if timer is not None:
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
  return ProcessResult(
      returncode=process.returncode,
      seconds=time.time() - start,
      max_rss_kb=rusage.ru_maxrss,
      log_path=log_path,
      timed_out=timed_out.is_set())
