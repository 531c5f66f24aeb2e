"""The taxi pipeline's options, as `run` and `compile` take them."""

import argparse

import pytest

from tfx_tpu_trainer_cli import common
from tfx_tpu_trainer_cli import pipeline_choice

_OPTIONS = pipeline_choice.TaxiOptions(
    {'--data-root': ('data_root', None), **pipeline_choice.STEP_OPTIONS},
    set_by_your_pipeline='its data and steps')


def _args(pipeline=None, **given):
  args = argparse.Namespace(pipeline=pipeline, data_root=None,
                            train_steps=None, eval_steps=None,
                            train_batch_size=None, eval_batch_size=None)
  for name, value in given.items():
    setattr(args, name, value)
  return args


def test_the_taxi_pipeline_gets_the_defaults_of_what_is_not_given():
  args = _args(train_steps=7)
  _OPTIONS.check(args)
  assert (args.data_root, args.train_steps, args.eval_steps,
          args.train_batch_size, args.eval_batch_size) == (None, 7, 50, 64, 64)


@pytest.mark.parametrize('given,message', [
    (dict(eval_steps=5), '--eval-steps applies to the bundled taxi pipeline '
     'only; with --pipeline, your function sets its data and steps.'),
    (dict(train_batch_size=8, data_root='d'),
     '--data-root, --train-batch-size apply to the bundled taxi pipeline '
     'only'),
])
def test_pipeline_refuses_the_taxi_options_in_table_order(given, message):
  with pytest.raises(common.UsageError) as e:
    _OPTIONS.check(_args(pipeline='p.py:f', **given))
  assert message in str(e.value)


def test_pipeline_with_no_taxi_option_fills_nothing():
  args = _args(pipeline='p.py:f')
  _OPTIONS.check(args)
  assert args.train_steps is None
