"""tfx-tpu-trainer: a TFX Trainer that trains and exports a TPUEstimator."""

from tfx_tpu_trainer.component import TPUTrainer

__all__ = ['TPUTrainer']
