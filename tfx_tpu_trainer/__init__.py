"""tfx-tpu-trainer: a TFX Trainer that trains and exports a TPUEstimator.

`from tfx_tpu_trainer import TPUTrainer` imports TFX on first use only, so
light modules (config, the CLI's argument checks) stay quick to import.
"""

__all__ = ['TPUTrainer']


def __getattr__(name):
  if name == 'TPUTrainer':
    from tfx_tpu_trainer.component import TPUTrainer  # pylint: disable=g-import-not-at-top
    return TPUTrainer
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
