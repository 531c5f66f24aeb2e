"""Patches of other libraries' functions, scoped to one call in one thread."""

import contextlib
import dataclasses
import functools
import threading
from typing import Any, Callable, Dict, List, Tuple

_LOCK = threading.Lock()
_LOCAL = threading.local()


@dataclasses.dataclass
class _Installed:
  """A dispatcher standing in for `owner.name`."""
  original: Any  # As found in owner.__dict__ (a function, a staticmethod...).
  callable_original: Callable[..., Any]  # What getattr(owner, name) gave.
  users: int = 0


_INSTALLED: Dict[Tuple[int, str], _Installed] = {}


def _stack(key: Tuple[int, str]) -> List[Callable[..., Any]]:
  stacks = getattr(_LOCAL, 'stacks', None)
  if stacks is None:
    stacks = _LOCAL.stacks = {}
  return stacks.setdefault(key, [])


def _dispatcher(key: Tuple[int, str], original: Callable[..., Any]):
  """Calls the calling thread's innermost replacement, else the original."""

  @functools.wraps(original)
  def dispatch(*args, **kwargs):
    stack = _stack(key)
    target = stack[-1] if stack else original
    return target(*args, **kwargs)

  return dispatch


def _install(owner: Any, name: str, key: Tuple[int, str]) -> _Installed:
  with _LOCK:
    installed = _INSTALLED.get(key)
    if installed is None:
      installed = _Installed(original=vars(owner)[name],
                             callable_original=getattr(owner, name))
      setattr(owner, name, _dispatcher(key, installed.callable_original))
      _INSTALLED[key] = installed
    installed.users += 1
    return installed


def _uninstall(owner: Any, name: str, key: Tuple[int, str]) -> None:
  with _LOCK:
    installed = _INSTALLED[key]
    installed.users -= 1
    if not installed.users:
      setattr(owner, name, installed.original)
      del _INSTALLED[key]


@contextlib.contextmanager
def patched(owner: Any, name: str,
            make_replacement: Callable[[Callable[..., Any]],
                                       Callable[..., Any]]):
  """Replaces `owner.name` for calls from this thread while the block runs.

  Args:
    owner: a module or class whose attribute `name` is a function.
    name: the attribute; it must be defined on `owner` itself.
    make_replacement: given the original (as `getattr(owner, name)` gave
      it: for a class, the plain function taking `self`), returns what this
      thread's calls run instead.

  Yields:
    Nothing; on exit the thread's replacement is gone, and the original is
    back on `owner` once no scope in any thread patches it.
  """
  key = (id(owner), name)
  installed = _install(owner, name, key)
  stack = _stack(key)
  stack.append(make_replacement(installed.callable_original))
  try:
    yield
  finally:
    stack.pop()
    _uninstall(owner, name, key)


@contextlib.contextmanager
def all_patched(targets: List[Tuple[Any, str, Callable[..., Any]]]):
  """`patched` for each (owner, name, make_replacement), as one scope."""
  with contextlib.ExitStack() as stack:
    for owner, name, make_replacement in targets:
      stack.enter_context(patched(owner, name, make_replacement))
    yield
