"""The TPU preflight: checks on CPU that a model_fn would run on a TPU."""
