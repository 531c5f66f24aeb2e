"""The native-Keras TFX Trainer of the benchmark (a `run_fn` module file)."""

import os
import sys

import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

_COMPONENTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'components')
if _COMPONENTS not in sys.path:
  sys.path.insert(0, _COMPONENTS)

import taxi_keras_module  # pylint: disable=g-import-not-at-top,wrong-import-position


def _dataset(file_pattern, data_accessor, tf_transform_output, batch_size,
             label_key):
  return data_accessor.tf_dataset_factory(
      file_pattern,
      tfxio.TensorFlowDatasetOptions(batch_size=batch_size,
                                     label_key=label_key),
      tf_transform_output.transformed_metadata.schema).repeat()


def _serving_signature(model, tf_transform_output, raw_label_keys):
  """serving_default: serialized raw tf.Examples in, probabilities out."""
  model.tft_layer_inference = tf_transform_output.transform_features_layer()

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def serve_tf_examples_fn(serialized_tf_example):
    raw_feature_spec = tf_transform_output.raw_feature_spec()
    for key in raw_label_keys:
      raw_feature_spec.pop(key, None)
    raw_features = tf.io.parse_example(serialized_tf_example, raw_feature_spec)
    transformed = model.tft_layer_inference(raw_features)
    inputs = {name: transformed[name] for name in model.input_names}
    return {'probabilities': model(inputs)}

  return serve_tf_examples_fn


def run_fn(fn_args):
  """Trains with model.fit and saves the serving model (TFX's run_fn)."""
  config = fn_args.custom_config or {}
  batch_size = config.get('batch_size', 40)
  label_key = config['label_key']
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  train_dataset = _dataset(fn_args.train_files, fn_args.data_accessor,
                           tf_transform_output, batch_size, label_key)
  eval_dataset = _dataset(fn_args.eval_files, fn_args.data_accessor,
                          tf_transform_output, batch_size, label_key)
  model = taxi_keras_module.build_keras_model(
      {'steps_per_execution': config.get('steps_per_execution', 1)})
  tensorboard_callback = tf.keras.callbacks.TensorBoard(
      log_dir=fn_args.model_run_dir, update_freq='epoch')
  model.fit(
      train_dataset,
      steps_per_epoch=fn_args.train_steps,
      validation_data=eval_dataset,
      validation_steps=fn_args.eval_steps,
      callbacks=[tensorboard_callback],
      verbose=0)
  # The raw label (`tips`, from which the transform derives `tips_xf`) is
  # not a serving input.
  raw_label_keys = [label_key[:-len('_xf')]] if label_key.endswith(
      '_xf') else []
  signatures = {
      'serving_default':
          _serving_signature(model, tf_transform_output, raw_label_keys),
  }
  model.save(fn_args.serving_model_dir, save_format='tf',
             signatures=signatures)
