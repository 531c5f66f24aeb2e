"""`python -m tfx_tpu_trainer.kubeflow.v2_metrics`: the KFP v2 trainer step.

Compiled pipelines run this path; the code is in publishing/v2_metrics.py.
"""

from tfx_tpu_trainer.publishing import v2_metrics

__all__ = []

if __name__ == '__main__':
  v2_metrics.main()
