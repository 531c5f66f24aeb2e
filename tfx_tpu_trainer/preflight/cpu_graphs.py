"""On CPU, before training: the graphs TPUEstimator builds after training."""

import dataclasses
import tempfile
import time
from typing import Any, Callable, Dict, List

from absl import logging
import tensorflow as tf
from tensorflow import estimator as tf_estimator

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer import prepare
from tfx_tpu_trainer.model_fn import estimator_spec_adapter
from tfx_tpu_trainer.preflight import precision
from tfx_tpu_trainer.preflight import report as preflight_report
from tfx_tpu_trainer.preflight import spec_checks
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.training import estimator_builder

__all__ = ['ERROR', 'ModeKeys', 'check_graphs_before_training']

ERROR = preflight_report.ERROR
ModeKeys = tf_estimator.ModeKeys


def _cpu_step_findings(model_fn, mode: str, features: Any, labels: Any,
                       params: Dict[str, Any], run_config: Any,
                       phase: str) -> List[preflight_report.Finding]:
  """Builds one step as TPUEstimator does on CPU; its errors as findings.

  `mode` is EVAL or PREDICT (training builds its own graph first thing).
  `spec.as_estimator_spec()` is what TPUEstimator makes of the spec when
  `use_tpu` is false: it calls `metric_fn` (eval) and any `host_call` on the
  step's tensors, where an error would otherwise surface only after
  training.
  """
  try:
    spec = estimator_spec_adapter.call_model_fn(
        model_fn, features, labels, mode, params, run_config)
  except errors.TPUTrainerError:
    raise  # The module's own error (it names the module): as it is.
  except Exception as e:  # pylint: disable=broad-except
    return [preflight_report.Finding('model-fn-error', ERROR,
                    f'the model_fn failed in mode {mode!r}: '
                    f'{type(e).__name__}: {e}', phase,
                    error=f'{type(e).__name__}: {e}')]
  fields = {ModeKeys.EVAL: ('loss',), ModeKeys.PREDICT: ('predictions',)}[mode]
  try:
    spec_checks.require(spec, mode, fields, phase)
  except spec_checks.SpecProblem as e:
    return [e.finding]
  unused = precision.bfloat16_findings(
      tf.compat.v1.get_default_graph().get_operations(), params, phase)
  if unused:
    return unused
  try:
    spec.as_estimator_spec()
  except Exception as e:  # pylint: disable=broad-except
    what = ('metric_fn' if mode == ModeKeys.EVAL else
            'host_call (or eval_metrics)')
    return [preflight_report.Finding(
        'eval-metric-fn' if mode == ModeKeys.EVAL else 'host-call', ERROR,
        f'the {what} of the {mode!r} TPUEstimatorSpec failed: '
        f'{type(e).__name__}: {e}', phase)]
  return []


def _tpu_inference_findings(
    run: prepare.PreparedRun,
    cpu_config: config_lib.TrainerConfig) -> List[preflight_report.Finding]:
  """Export API v2: the `{serve, tpu}` PREDICT graph must run on the TPU.

  Built as `export_saved_model` builds it (the serving input, then the
  model_fn in PREDICT mode with `params['use_tpu']=True`); a graph without
  TPU ops would be exported as a CPU graph tagged `{serve, tpu}`.
  """
  params = dict(run.params, use_tpu=True)
  with tempfile.TemporaryDirectory(prefix='tpu-trainer-check-') as tmp:
    run_config = estimator_builder.build_run_config(cpu_config, tmp)
    with tf.Graph().as_default() as graph:
      tf.compat.v1.train.create_global_step()
      receiver = run.serving_input_receiver_fn()
      try:
        estimator_spec_adapter.call_model_fn(
            run.model_fn, receiver.features, None, ModeKeys.PREDICT, params,
            run_config)
      except errors.TPUTrainerError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        return [preflight_report.Finding(
            'model-fn-error', ERROR,
            "the model_fn failed in mode 'infer' with params['use_tpu']=True "
            '(the {serve, tpu} graph of export_saved_model_api_version=2): '
            f'{type(e).__name__}: {e}', 'export')]
  if export.has_tpu_inference(graph.as_graph_def()):
    return []
  return [preflight_report.Finding(
      'no-tpu-inference', ERROR,
      export.no_tpu_inference_message(prepare.model_fn_source(run.module)),
      'export')]


def check_graphs_before_training(
    run: prepare.PreparedRun,
    config: config_lib.TrainerConfig,
    eval_input_fn: Callable[[Dict[str, Any]], tf.data.Dataset],
) -> preflight_report.PreflightReport:
  """The executor's check on CPU (`use_tpu` false), before the first step.

  Builds, without running them, the graphs TPUEstimator builds on CPU only
  after training: the eval step (with its metric_fn) on the eval input and
  the export's PREDICT step on the serving input. The train graph is not
  built here: it is the first thing training builds, a second later, and
  an error in it fails there, naming the model_fn. No XLA compile and no
  TPU checks. An error of the module's own (a TPUTrainerError naming it)
  is raised as it is; other failures are findings, raised together as a
  preflight_report.PreflightError.

  Args:
    run: the prepared run.
    config: the validated trainer config (use_tpu false).
    eval_input_fn: the eval split's `input_fn(params)`.

  Returns:
    The report (logged).

  Raises:
    TPUTrainerError: the module's error, e.g. a UserModuleError.
    preflight_report.PreflightError: listing the other errors.
  """
  report = preflight_report.PreflightReport(
      source=run.module.module_file, num_shards=1,
      sample_origin='the graph of the eval input (not read)')
  cpu_config = dataclasses.replace(config, use_tpu=False, tpu=None)

  def step(mode, input_fn, batch_size, phase):

    def build():
      params = dict(run.params, use_tpu=False)
      if batch_size is not None:
        params['batch_size'] = batch_size
      with tempfile.TemporaryDirectory(prefix='tpu-trainer-check-') as tmp:
        run_config = estimator_builder.build_run_config(cpu_config, tmp)
        with tf.Graph().as_default():
          tf.compat.v1.train.create_global_step()
          if input_fn is None:
            receiver = run.serving_input_receiver_fn()
            features, labels = receiver.features, None
          else:
            dataset = input_fn(dict(params))
            element = tf.compat.v1.data.make_one_shot_iterator(
                dataset).get_next()
            features, labels = (element if isinstance(element, tuple) and
                                len(element) == 2 else (element, None))
          return _cpu_step_findings(run.model_fn, mode, features, labels,
                                    params, run_config, phase)

    start = time.time()
    report.findings.extend(build())
    report.seconds[phase] = round(time.time() - start, 2)

  step(ModeKeys.EVAL, eval_input_fn, config.eval_batch_size, 'eval')
  if run.serving_input_receiver_fn is not None:
    step(ModeKeys.PREDICT, None, None, 'export')
    if config.export_to_tpu and config.export_saved_model_api_version == 2:
      report.findings.extend(_tpu_inference_findings(run, cpu_config))
  report.findings = preflight_report.merge_repeated(report.findings)
  logging.info('Graphs checked before training in %s s: %s', report.seconds,
               [finding.line() for finding in report.findings] or 'no errors')
  report.raise_if_not_ready(
      f'{report.source}: {len(report.errors)} error(s) found before training, '
      'in the graphs TPUEstimator builds on CPU:')
  return report
