"""`python -m tfx_tpu_trainer.kubeflow.v2_metrics`, run by compiled specs:
the KFP v2 trainer step, v2_step with the `system` module installed."""

from tfx_tpu_trainer.kubeflow import v2_step
from tfx_tpu_trainer.publishing import v2_metrics

# This module, which compiled specs run for the trainer steps.
TRAINER_STEP_ENTRYPOINT = 'tfx_tpu_trainer.kubeflow.v2_metrics'


def main() -> None:
  """The trainer's KFP v2 step: the `system` module its `metrics` output
  needs, then what every v2 step runs (v2_step.run)."""
  v2_metrics.install_system_module()
  v2_step.run()


if __name__ == '__main__':
  main()
