"""The taxi pipeline or `--pipeline`: the options only the taxi one takes."""

import dataclasses
from typing import Any, Dict, Mapping, Tuple

from tfx_tpu_trainer_cli import common

# The taxi pipeline's steps and batch sizes, in `run` and `compile`:
# flag -> (attribute, default).
STEP_OPTIONS = {
    '--train-steps': ('train_steps', 1000),
    '--eval-steps': ('eval_steps', 50),
    '--train-batch-size': ('train_batch_size', 64),
    '--eval-batch-size': ('eval_batch_size', 64),
}
_STEP_HELP = {
    '--train-steps': 'Training steps, train_args.num_steps',
    '--eval-steps': 'Steps of each evaluation, eval_args.num_steps',
    '--train-batch-size': 'Global training batch size, custom_config '
                          'train_batch_size',
    '--eval-batch-size': 'Global evaluation batch size, custom_config '
                         'eval_batch_size',
}
# With these all unset, the taxi pipeline keeps its own Evaluator keys.
_EVALUATOR_KEY_ATTRIBUTES = ('module_file', 'preprocessing_module_file',
                             'eval_label_key', 'eval_prediction_key')


@dataclasses.dataclass(frozen=True)
class TaxiOptions:
  """The options of the taxi pipeline one command takes.

  Attributes:
    options: flag -> (attribute, default), in the order an error names them.
    set_by_your_pipeline: what a `--pipeline` function sets instead, for the
      error.
  """
  options: Mapping[str, Tuple[str, Any]]
  set_by_your_pipeline: str

  def add_step_arguments(self, parser) -> None:
    """Adds --train-steps, --eval-steps and the batch sizes to `parser`."""
    for flag in STEP_OPTIONS:
      parser.add_argument(flag, type=common.positive_int, default=None,
                          help=f'{_STEP_HELP[flag]} (default: '
                          f'{self.options[flag][1]}).')

  def check(self, args) -> None:
    """Refuses these options with `--pipeline`; else fills their defaults.

    Raises:
      common.UsageError: naming the options given with `--pipeline`.
    """
    if args.pipeline:
      given = [flag for flag, (attr, _) in self.options.items()
               if getattr(args, attr, None) is not None]
      if given:
        raise common.UsageError(
            f'{", ".join(given)} '
            f'{"applies" if len(given) == 1 else "apply"} to the bundled '
            'taxi pipeline only; with --pipeline, your function sets '
            f'{self.set_by_your_pipeline}.')
      return
    for attr, default in self.options.values():
      if getattr(args, attr, None) is None:
        setattr(args, attr, default)


def evaluator_options(args, trainer_module_file: str,
                      preprocessing_module_file: str, data_root: str,
                      custom_config: Mapping[str, Any]) -> Dict[str, Any]:
  """The taxi pipeline's Evaluator keys, for `run` and `compile` alike.

  The bundled modules with no key given keep the pipeline's own ({});
  otherwise the keys are given or traced from the modules
  (evaluator_keys.py).

  Raises:
    common.UsageError: naming the module and what to pass.
  """
  if all(getattr(args, attr) is None for attr in _EVALUATOR_KEY_ATTRIBUTES):
    return {}
  from tfx_tpu_trainer_cli import evaluator_keys  # pylint: disable=g-import-not-at-top
  try:
    return evaluator_keys.evaluator_options(
        trainer_module_file, preprocessing_module_file, data_root,
        custom_config, label_override=args.eval_label_key,
        prediction_override=args.eval_prediction_key)
  except evaluator_keys.EvaluatorKeyError as e:
    raise common.UsageError(str(e)) from e
  except Exception as e:  # pylint: disable=broad-except
    raise common.UsageError(
        f'--module-file: the Evaluator\'s keys could not be found from '
        f'{trainer_module_file}: {type(e).__name__}: {e}') from e
