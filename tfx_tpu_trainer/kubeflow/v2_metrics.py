"""`python -m tfx_tpu_trainer.kubeflow.v2_metrics`, run by compiled specs:
the KFP v2 trainer step, whose code is publishing/v2_metrics.py."""

from tfx_tpu_trainer.publishing import v2_metrics

__all__ = []

if __name__ == '__main__':
  v2_metrics.main()
