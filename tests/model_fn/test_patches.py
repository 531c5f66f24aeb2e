"""patches.patched: a replacement for one thread, the original back after."""

import threading
import types

import pytest

from tfx_tpu_trainer.model_fn import patches

from tests.fixtures.model_fn_graphs import is_patched


def _owner():
  module = types.ModuleType('owner')
  module.greet = lambda who: f'hello {who}'
  return module


def _shout(original):
  return lambda who: original(who).upper()


def test_replacement_holds_in_the_block_and_the_original_is_back_after():
  owner = _owner()
  original = owner.greet
  with patches.patched(owner, 'greet', _shout):
    assert owner.greet('you') == 'HELLO YOU'
    assert is_patched(owner, 'greet')
  assert owner.greet is original
  assert not is_patched(owner, 'greet')


def test_original_is_back_when_the_block_raises():
  owner = _owner()
  original = owner.greet
  with pytest.raises(RuntimeError, match='failed inside'):
    with patches.patched(owner, 'greet', _shout):
      raise RuntimeError('failed inside')
  assert owner.greet is original


def test_nested_scopes_use_the_innermost_replacement():
  owner = _owner()
  with patches.patched(owner, 'greet', _shout):
    with patches.patched(owner, 'greet', lambda original: lambda who: 'inner'):
      assert owner.greet('you') == 'inner'
    assert owner.greet('you') == 'HELLO YOU'
  assert owner.greet('you') == 'hello you'


def test_methods_are_patched_on_their_class_and_restored():

  class Greeter:

    def greet(self, who):
      return f'{type(self).__name__} greets {who}'

  found = vars(Greeter)['greet']
  with patches.patched(Greeter, 'greet',
                       lambda original: lambda self, who: original(self, who)
                       + '!'):
    assert Greeter().greet('you') == 'Greeter greets you!'
  assert vars(Greeter)['greet'] is found


def test_other_threads_see_the_original_and_leaving_in_any_order_restores():
  owner = _owner()
  original = owner.greet
  inside, leave = threading.Event(), threading.Event()
  seen = {}

  def other():
    with patches.patched(owner, 'greet',
                         lambda original: lambda who: 'other thread'):
      inside.set()
      leave.wait()
      seen['other'] = owner.greet('x')

  thread = threading.Thread(target=other)
  thread.start()
  try:
    inside.wait()
    # The other thread's replacement does not reach this thread...
    seen['main, other inside'] = owner.greet('x')
    with patches.patched(owner, 'greet', _shout):
      seen['main, both inside'] = owner.greet('x')
    # ... and this thread leaving first does not restore under its feet.
    assert is_patched(owner, 'greet')
  finally:
    leave.set()
    thread.join()
  assert seen == {'main, other inside': 'hello x',
                  'main, both inside': 'HELLO X', 'other': 'other thread'}
  assert owner.greet is original
