"""Features of the Chicago taxi data set (big_tipper_label variant)."""

LABEL_KEY = 'big_tipper'

DENSE_FLOAT_FEATURE_KEYS = ['trip_miles', 'fare', 'trip_seconds']

VOCAB_FEATURE_KEYS = ['payment_type', 'company']
VOCAB_SIZE = 1000
OOV_SIZE = 10

BUCKET_FEATURE_KEYS = [
    'pickup_latitude', 'pickup_longitude', 'dropoff_latitude',
    'dropoff_longitude'
]
FEATURE_BUCKET_COUNT = 10

# The stock example zips these three bucket counts with the categorical keys,
# so only the first three categorical features reach its model.
CATEGORICAL_FEATURE_BUCKETS = {
    'trip_start_hour': 24,
    'trip_start_day': 31,
    'trip_start_month': 12,
}
CATEGORICAL_FEATURE_KEYS = list(CATEGORICAL_FEATURE_BUCKETS) + [
    'pickup_census_tract', 'dropoff_census_tract', 'pickup_community_area',
    'dropoff_community_area'
]


def transformed_name(key: str) -> str:
  return key + '_xf'


def wide_feature_buckets() -> dict:
  """Transformed categorical feature name -> number of ids, for the model."""
  buckets = {
      transformed_name(key): VOCAB_SIZE + OOV_SIZE for key in VOCAB_FEATURE_KEYS
  }
  buckets.update({
      transformed_name(key): FEATURE_BUCKET_COUNT for key in BUCKET_FEATURE_KEYS
  })
  buckets.update({
      transformed_name(key): count
      for key, count in CATEGORICAL_FEATURE_BUCKETS.items()
  })
  return buckets


def dense_feature_names() -> list:
  return [transformed_name(key) for key in DENSE_FLOAT_FEATURE_KEYS]
