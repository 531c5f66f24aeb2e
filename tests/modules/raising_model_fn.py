"""A model_fn that raises (test module)."""

LABEL_KEY = 'big_tipper'


def model_fn(features, labels, mode, params):
  raise ValueError('the model cannot be built: feature "fare_xf" is missing')
