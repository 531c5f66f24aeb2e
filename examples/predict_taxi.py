"""Sends one raw taxi trip to the pushed model (docs/guide/your_model.md,
"Serving").

    python examples/predict_taxi.py tfx_output/serving_model/taxi_tpu

Loads the newest pushed version's `{serve}` graph and calls its
`serving_default` signature on one serialized `tf.Example` of raw CSV
values, without the label (`big_tipper`, `tips`): the bundled module's
model answers `probabilities`, `logits` and `class_ids`.
"""

import glob
import os
import sys

import tensorflow as tf

TRIP = {  # One row of the taxi CSV; absent values (empty cells) left out.
    'fare': 12.45, 'trip_start_month': 5, 'trip_start_hour': 19,
    'trip_start_day': 6, 'trip_start_timestamp': 1400269500,
    'trip_miles': 0.0, 'payment_type': 'Credit Card',
    'company': 'Chicago Elite Cab Corp. (Chicago Carriag', 'trip_seconds': 0,
}


def feature(value) -> tf.train.Feature:
  if isinstance(value, str):
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[value.encode()]))
  if isinstance(value, int):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
  return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))


def main(serving_model_dir: str) -> None:
  versions = sorted(glob.glob(os.path.join(serving_model_dir, '*')),
                    key=lambda path: int(os.path.basename(path)))
  model = tf.saved_model.load(versions[-1], tags=['serve'])
  predict = model.signatures['serving_default']
  example = tf.train.Example(features=tf.train.Features(
      feature={name: feature(value) for name, value in TRIP.items()}))
  # `examples` (a Predict signature) or `inputs` (a Classify signature).
  (input_name,) = predict.structured_input_signature[1]
  outputs = predict(**{input_name: tf.constant([example.SerializeToString()])})
  for name, value in sorted(outputs.items()):
    print(f'{name}: {value.numpy().tolist()}')


if __name__ == '__main__':
  main(sys.argv[1])
