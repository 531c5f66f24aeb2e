"""XLA_FLAGS for the preflight's CPU compiles: no LLVM optimization of the code."""

import contextlib
import os
from typing import Iterator

__all__ = ['ENV', 'FAST_COMPILE_FLAGS', 'fast_cpu_compiles']

ENV = 'XLA_FLAGS'
# The preflight runs each step once: LLVM's optimization of the code it
# runs costs most of the compile (MnasNet-small's train step: 242 s at the
# default level, 38 s with these, on a loaded 2-core machine) and checks
# nothing XLA would refuse.
FAST_COMPILE_FLAGS = ('--xla_backend_optimization_level=0',
                      '--xla_llvm_disable_expensive_passes=true')


@contextlib.contextmanager
def fast_cpu_compiles() -> Iterator[None]:
  """XLA_FLAGS with FAST_COMPILE_FLAGS added (those the user set win).

  TensorFlow's XLA reads XLA_FLAGS once per process, at its first
  compile: they apply when the preflight compiles first (the CLI, the
  executor before training), else the preflight is slower, not different.
  The variable is restored afterwards, for what reads it later (child
  processes, libtpu when the TPU is initialized).
  """
  previous = os.environ.get(ENV)
  given = (previous or '').split()
  names = {flag.split('=')[0] for flag in given}
  added = [flag for flag in FAST_COMPILE_FLAGS
           if flag.split('=')[0] not in names]
  os.environ[ENV] = ' '.join(given + added)
  try:
    yield
  finally:
    if previous is None:
      del os.environ[ENV]
    else:
      os.environ[ENV] = previous
