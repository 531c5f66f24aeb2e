"""A module without model_fn or build_keras_model (test module)."""

LABEL_KEY = 'big_tipper'


def preprocessing_fn(inputs):
  return inputs
