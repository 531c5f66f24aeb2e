"""From a user module to the model_fn TPUEstimator runs."""
