"""Building the TPUEstimator and running training and evaluation: the host loop, the train/eval schedule, live progress and checkpoints."""
