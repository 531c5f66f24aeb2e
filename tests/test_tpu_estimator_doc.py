"""docs/reference/tpu_estimator.md against the installed tensorflow_estimator.

Every constructor argument of TPUEstimator, TPUConfig, RunConfig and
WarmStartSettings and every TPUEstimatorSpec field has a row; every row
names a real feature and a real custom_config key; every argument written
as a custom_config key is a key or is refused with a reason.
"""

import dataclasses
import inspect
import os
import re

import pytest
import tensorflow as tf
from tensorflow_estimator.python.estimator import run_config
from tensorflow_estimator.python.estimator.tpu import tpu_config
from tensorflow_estimator.python.estimator.tpu import tpu_estimator

from tfx_tpu_trainer import config as config_lib

DOC = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'docs',
                   'reference', 'tpu_estimator.md')
_ROW = re.compile(
    r'^\| `(TPUEstimator|TPUConfig|RunConfig|TPUEstimatorSpec|'
    r'WarmStartSettings)(?:\((\w+)\)|\.(\w+))` \| (.+) \|$', re.M)
KINDS = ('**key**', '**module**', '**set**', '**kept**', '**refused**')


def _arguments(function):
  return [name for name, parameter in inspect.signature(
      function).parameters.items()
          if name != 'self' and parameter.kind not in (
              parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)]


def installed_features():
  """(class, name) of every feature of the installed tensorflow_estimator."""
  constructors = {
      'TPUEstimator': _arguments(tpu_estimator.TPUEstimator.__init__),
      # tpu RunConfig's own arguments, then the base RunConfig's (**kwargs).
      'RunConfig': (_arguments(tpu_config.RunConfig.__init__) +
                    _arguments(run_config.RunConfig.__init__)),
      'WarmStartSettings': _arguments(tf.estimator.WarmStartSettings),
  }
  fields = {'TPUConfig': tpu_config.TPUConfig._fields,
            'TPUEstimatorSpec': tpu_estimator.TPUEstimatorSpec._fields}
  return ({(owner, name) for owner, names in constructors.items()
           for name in names} |
          {(owner, name) for owner, names in fields.items()
           for name in names})


def _doc():
  with open(DOC) as f:
    return f.read()


def documented_features():
  return {(owner, call or field): how
          for owner, call, field, how in _ROW.findall(_doc())}


def test_every_installed_feature_has_exactly_one_row():
  rows = _ROW.findall(_doc())
  documented = [(owner, call or field) for owner, call, field, _ in rows]
  assert len(documented) == len(set(documented)), 'a feature has two rows'
  installed = installed_features()
  assert len(installed) > 50
  missing = sorted(installed - set(documented))
  unknown = sorted(set(documented) - installed)
  assert not missing, f'docs/reference/tpu_estimator.md has no row for {missing}'
  assert not unknown, (f'docs/reference/tpu_estimator.md has rows for {unknown}, which '
                       'the installed tensorflow_estimator does not have')


def test_every_row_says_how_it_is_taken():
  for feature, how in documented_features().items():
    assert how.startswith(KINDS), (feature, how)


def test_every_key_the_doc_names_exists():
  keys = {field.name for field in dataclasses.fields(config_lib.TrainerConfig)}
  named = set(re.findall(r"custom_config\['(\w+)'\]", _doc()))
  assert named, 'the doc names no key'
  # A refused one is named only as what it is not (e.g. in an error).
  named -= set(config_lib.KEYS_TAKEN_ELSEWHERE)
  assert not named - keys, sorted(named - keys)
  for (owner, name), how in documented_features().items():
    if how.startswith('**key**') and owner != 'TPUEstimatorSpec':
      assert re.search(r"custom_config\['\w+'\]", how), (owner, name)


def _constructor_arguments():
  return sorted({name for owner, name in installed_features()
                 if owner != 'TPUEstimatorSpec'})


@pytest.mark.parametrize('name', _constructor_arguments())
def test_a_constructor_argument_written_as_a_key_is_a_key_or_says_why(name):
  keys = {field.name for field in dataclasses.fields(config_lib.TrainerConfig)}
  if name in keys:
    return
  assert name in config_lib.KEYS_TAKEN_ELSEWHERE, name
  with pytest.raises(config_lib.ConfigError) as error:
    config_lib.TrainerConfig.from_custom_config({name: 1}, environ={})
  assert str(error.value) == (
      f'custom_config[{name!r}] is not a TPUTrainer key: '
      f'{config_lib.KEYS_TAKEN_ELSEWHERE[name]}')


def test_refused_rows_are_refused_keys():
  for (owner, name), how in documented_features().items():
    if how.startswith('**refused**'):
      assert name in config_lib.KEYS_TAKEN_ELSEWHERE, (owner, name)
