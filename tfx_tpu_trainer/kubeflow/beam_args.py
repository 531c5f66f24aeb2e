"""The `--beam-arg` values of a compile: checked as Beam itself reads them."""

import argparse
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set

from tfx_tpu_trainer import errors
from tfx_tpu_trainer.publishing import secrets

__all__ = ['CLUSTER_DEFAULTS', 'DIRECT_RUNNER', 'DATAFLOW_RUNNER',
           'DATAFLOW_REQUIRED', 'HELP', 'BeamArgError', 'name',
           'runner_class_name', 'runner', 'is_direct', 'pipeline_args',
           'merged', 'validate', 'beam_component_ids', 'strip_from_other_executors']

# Beam's DirectRunner over the pod's cores; dropped when another runner is
# named, and each one replaced by a --beam-arg of the same name.
CLUSTER_DEFAULTS = ('--direct_running_mode=multi_processing',
                    '--direct_num_workers=0')
# `DirectRunner` is Beam's `SwitchingDirectRunner` class (direct_runner.py).
DIRECT_RUNNER = 'SwitchingDirectRunner'
DATAFLOW_RUNNER = 'DataflowRunner'
DATAFLOW_REQUIRED = ('project', 'region', 'temp_location')
_BEAM_ARG = re.compile(r'^--[A-Za-z][A-Za-z0-9_-]*(=.*)?$', re.S)
# A second option inside one value: `--runner=DirectRunner --project=p`.
_SECOND_OPTION = re.compile(r'\s--?[A-Za-z]')
HELP = ('A Beam pipeline argument for the components that run Beam '
        '(ExampleGen, StatisticsGen, Transform, Evaluator; SchemaGen, '
        'ExampleValidator, the trainer and Pusher run none), one option per '
        'flag, written --beam-arg=--NAME=VALUE (e.g. '
        '--beam-arg=--runner=DataflowRunner); repeatable. Replaces the default '
        'of the same name (--direct_running_mode=multi_processing, '
        '--direct_num_workers=0); a runner other than DirectRunner drops both.')


class BeamArgError(errors.TPUTrainerError, ValueError):
  """A `--beam-arg` value Beam would not accept as given."""


def name(arg: str) -> str:
  """`--runner=DataflowRunner` -> `runner` (dashes as underscores)."""
  return arg[2:].split('=', 1)[0].replace('-', '_')


def _value(arg: str) -> Optional[str]:
  return arg.split('=', 1)[1] if '=' in arg else None


def runner_class_name(runner: str) -> str:
  """The class Beam runs for a `--runner` value (Beam's own resolution).

  Raises:
    BeamArgError: when Beam knows no such runner.
  """
  from apache_beam.runners import runner as beam_runner  # pylint: disable=g-import-not-at-top
  try:
    return type(beam_runner.create_runner(runner)).__name__
  except (ValueError, ImportError, AttributeError) as e:
    raise BeamArgError(
        f'--beam-arg=--runner={runner}: Beam knows no such runner ({e}).'
    ) from e


def runner(beam_args: Sequence[str]) -> Optional[str]:
  """The last `--runner` value given, or None."""
  values = [_value(a) for a in beam_args if name(a) == 'runner' and '=' in a]
  return values[-1] if values else None


def is_direct(beam_args: Sequence[str]) -> bool:
  """Whether the data components run Beam's DirectRunner."""
  given = runner(beam_args)
  return given is None or runner_class_name(given) == DIRECT_RUNNER


def pipeline_args(beam_args: Sequence[str]) -> List[str]:
  """The cluster defaults, overridden and extended by `beam_args`."""
  names = {name(a) for a in beam_args}
  direct = is_direct(beam_args)
  defaults = [a for a in CLUSTER_DEFAULTS if name(a) not in names and direct]
  return defaults + list(beam_args)


def merged(beam_args: Sequence[Any], existing: Sequence[Any] = (),
           cluster_defaults: bool = True,
           defaults: Sequence[str] = CLUSTER_DEFAULTS) -> List[Any]:
  """The cluster `defaults`, then `existing`, then `beam_args`.

  A later argument replaces an earlier one of the same name; a `--runner`
  other than the DirectRunner (by Beam's own name resolution: `direct`,
  `directrunner` ...) drops the DirectRunner defaults. Arguments that are
  not strings (placeholders) are kept as they are.

  Raises:
    BeamArgError: a `--runner` Beam does not know.
  """
  given = list(existing) + list(beam_args)
  names = [name(a) if isinstance(a, str) else None for a in given]
  direct = is_direct([a for a in given if isinstance(a, str)])
  kept_defaults = [a for a in defaults
                   if cluster_defaults and direct and name(a) not in names]
  kept = [a for i, (a, n) in enumerate(zip(given, names))
          if n is None or n not in names[i + 1:]]
  return kept_defaults + kept


def _option_parser() -> argparse.ArgumentParser:
  """Every option Beam's PipelineOptions classes define, with their checks."""
  from apache_beam.options import pipeline_options  # pylint: disable=g-import-not-at-top

  class _Parser(argparse.ArgumentParser):

    def error(self, message):
      raise BeamArgError(f'--beam-arg: {secrets.mask_text(message)}')

  parser = _Parser(add_help=False, allow_abbrev=False)
  classes, seen = [pipeline_options.PipelineOptions], set()
  while classes:
    cls = classes.pop()
    if cls in seen:
      continue
    seen.add(cls)
    classes.extend(cls.__subclasses__())
    try:
      cls._add_argparse_args(parser)  # pylint: disable=protected-access
    except argparse.ArgumentError:
      pass  # An option two classes define; the first is enough.
  return parser


def validate(values: Sequence[str], on_cluster: bool = True,
             pipeline_root: Optional[str] = None) -> List[str]:
  """Checks each `--beam-arg` value, then the set; returns them unchanged.

  Args:
    values: the `--beam-arg` values.
    on_cluster: the data steps run in a cluster's pods (a compile), not on
      this machine (`run`); see `beam_runners.check`.
    pipeline_root: where the run's files go, if known.

  Raises:
    BeamArgError: naming the value and what to write instead.
  """
  values = list(values)
  if not values:
    return []
  parser = _option_parser()
  known = set(parser._option_string_actions)  # pylint: disable=protected-access
  for value in values:
    # What an error may show of the value: a secret's is masked.
    shown = secrets.mask_text(secrets.masked_arg(value))
    if not _BEAM_ARG.match(value):
      raise BeamArgError(
          f'--beam-arg {shown!r} is not one Beam argument of the form '
          '--name=value or --flag (write --beam-arg=--runner=DataflowRunner).')
    if _SECOND_OPTION.search(value):
      raise BeamArgError(
          f'--beam-arg {shown!r} holds more than one option; give one per '
          '--beam-arg (e.g. ' + ' '.join(
              f'--beam-arg={secrets.masked_arg(part)}'
              for part in value.split() if part.startswith('-')) + ').')
    option = value.split('=', 1)[0]
    if option not in known:
      if f'--{name(value)}' in known:
        # Beam's parser discards it ("Discarding unparseable args").
        raise BeamArgError(
            f'--beam-arg {shown!r}: Beam reads --{name(value)} (underscores) '
            f'and would discard {option}: write --beam-arg=--{name(value)}' +
            (f'={_value(shown)}' if '=' in value else '') + '.')
      raise BeamArgError(
          f'--beam-arg {shown!r}: {name(value)!r} is not a Beam pipeline '
          'option.')
  parser.parse_known_args(values)
  from tfx_tpu_trainer.kubeflow import beam_runners  # pylint: disable=g-import-not-at-top
  beam_runners.check(values, on_cluster=on_cluster,
                     pipeline_root=pipeline_root)
  return values


def beam_component_ids(components: Iterable[Any]) -> Set[str]:
  """The ids of the components whose executor runs Beam."""
  from tfx.dsl.components.base import executor_spec  # pylint: disable=g-import-not-at-top
  return {c.id for c in components
          if isinstance(getattr(c, 'executor_spec', None),
                        executor_spec.BeamExecutorSpec)}


def strip_from_other_executors(spec: Dict[str, Any],
                               beam_component_ids_: Set[str],
                               beam_args: Sequence[str]) -> List[str]:
  """Takes the Beam args off the KFP v2 executors of non-Beam components.

  `KubeflowV2DagRunner` appends them to every executor's container args.

  Args:
    spec: a KFP v2 pipeline spec (JSON), changed in place.
    beam_component_ids_: from `beam_component_ids`.
    beam_args: the pipeline's Beam args, as appended.

  Returns:
    The executor labels they were taken off.
  """
  beam_args = list(beam_args)
  if not beam_args:
    return []
  tasks = spec['root']['dag']['tasks']
  executors = spec['deploymentSpec']['executors']
  stripped = []
  for task_name, task in tasks.items():
    if task_name in beam_component_ids_:
      continue
    component = spec['components'][task['componentRef']['name']]
    container = executors.get(component.get('executorLabel'), {}).get(
        'container')
    if not container:
      continue
    args = container.get('args', [])
    if args[-len(beam_args):] == beam_args:
      container['args'] = args[:-len(beam_args)]
      stripped.append(component['executorLabel'])
  return stripped
