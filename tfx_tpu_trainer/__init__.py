"""tfx-tpu-trainer: a TFX Trainer that trains and exports a TPUEstimator."""

__all__ = ['TPUTrainer', 'TPUBulkInferrer', 'scalar_summaries_host_call']


def __getattr__(name):
  if name == 'TPUTrainer':
    from tfx_tpu_trainer.component import TPUTrainer  # pylint: disable=g-import-not-at-top
    return TPUTrainer
  if name == 'TPUBulkInferrer':
    from tfx_tpu_trainer.bulk_inferrer.component import TPUBulkInferrer  # pylint: disable=g-import-not-at-top
    return TPUBulkInferrer
  if name == 'scalar_summaries_host_call':
    from tfx_tpu_trainer.model_fn.host_call import scalar_summaries_host_call  # pylint: disable=g-import-not-at-top
    return scalar_summaries_host_call
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
