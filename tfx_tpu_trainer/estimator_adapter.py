"""Where user modules import `to_tpu_model_fn` (docs/guide/your_model.md)."""

from tfx_tpu_trainer.model_fn.estimator_spec_adapter import AdapterError
from tfx_tpu_trainer.model_fn.estimator_spec_adapter import to_tpu_model_fn

__all__ = ['AdapterError', 'to_tpu_model_fn']
