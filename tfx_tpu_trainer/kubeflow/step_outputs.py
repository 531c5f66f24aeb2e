"""`python -m tfx_tpu_trainer.kubeflow.step_outputs`, run by compiled specs:
the KFP v1 trainer step, whose code is publishing/step_outputs.py."""

from tfx_tpu_trainer.publishing import step_outputs
from tfx_tpu_trainer.training import leftover_threads

__all__ = []

if __name__ == '__main__':
  # A thread the user's module left running must not hold the step forever.
  leftover_threads.run_then_end(step_outputs.main, 'The TPUTrainer step')
