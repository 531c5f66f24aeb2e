"""Which raw features the served model needs, and which are the raw label.

TFX's convention renames the label in Transform (`tips` -> `tips_xf`), so
leaving the transformed label out of the serving parse spec would still
make every request carry the raw one: the transform graph says which raw
features the served (non-label) features are computed from.
"""

import dataclasses
import os
from typing import Collection, Dict, FrozenSet, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf
import tensorflow_transform as tft

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.data import schemas as schemas_lib

__all__ = ['ServingFeatures', 'serving_features', 'find_serving_features']

RAW_LABEL_KEY = 'raw_label_key'


@dataclasses.dataclass(frozen=True)
class ServingFeatures:
  """The raw features the default serving input parses.

  Attributes:
    parsed: raw features parsed from a served example (sorted).
    raw_label: raw features left out because only the label needs them.
    unused: raw features no transformed feature is computed from.
  """
  parsed: Tuple[str, ...]
  raw_label: Tuple[str, ...]
  unused: Tuple[str, ...] = ()


def transformed_feature_sources(
    tf_transform_output: tft.TFTransformOutput
) -> Dict[str, FrozenSet[str]]:
  """Transformed feature name -> the raw features it is computed from.

  Applies the transform graph in a scratch graph (nothing runs) to all raw
  features, then to all but one at a time: tf.Transform itself leaves out
  the outputs that need a raw feature it was not given, so an output missing
  without `f` depends on `f`.

  Args:
    tf_transform_output: the run's transform output.

  Returns:
    For every transformed feature, the raw features it needs.
  """
  # A separate TFTransformOutput: its cached Keras layer is built in this
  # scratch graph, apart from the one the export graph uses.
  transform_output = tft.TFTransformOutput(
      os.path.dirname(tf_transform_output.transform_savedmodel_dir.rstrip('/')))
  raw_feature_spec = transform_output.raw_feature_spec()
  with tf.Graph().as_default():
    serialized = tf.compat.v1.placeholder(tf.string, shape=[None])
    raw_features = tf.io.parse_example(serialized, raw_feature_spec)
    outputs = set(schemas_lib.transform_raw_features(transform_output,
                                                     raw_features))
    sources = {name: set() for name in outputs}
    for left_out in sorted(raw_features):
      partial = {name: tensor for name, tensor in raw_features.items()
                 if name != left_out}
      for name in outputs - set(
          schemas_lib.transform_raw_features(transform_output, partial)):
        sources[name].add(left_out)
  return {name: frozenset(raw) for name, raw in sources.items()}


def serving_features(raw_feature_names: Collection[str],
                     sources: Optional[Mapping[str, Collection[str]]],
                     label_key: Optional[str],
                     raw_label_key: Optional[str] = None) -> ServingFeatures:
  """Decides what the serving input parses.

  Args:
    raw_feature_names: the features of the raw schema.
    sources: `transformed_feature_sources`, or None without a transform graph.
    label_key: the (transformed) label, or None when unknown.
    raw_label_key: custom_config['raw_label_key'], or None to find it.

  Returns:
    The parsed, raw label and unused raw features.

  Raises:
    config_lib.ConfigError: `raw_label_key` is not a raw feature, or a served
      feature is computed from it.
  """
  raw_feature_names = set(raw_feature_names)
  if raw_label_key is not None and raw_label_key not in raw_feature_names:
    raise config_lib.ConfigError(
        f'custom_config[{RAW_LABEL_KEY!r}]={raw_label_key!r} is not a feature '
        f'of the raw schema (features: {sorted(raw_feature_names)}). Set it to '
        'the raw feature Transform turns into the label, or leave it unset to '
        'find it from the transform graph.')
  if sources is None:
    # No transform: the model gets raw features; only the label(s) go.
    raw_label = raw_feature_names & {label_key, raw_label_key}
    return ServingFeatures(
        parsed=tuple(sorted(raw_feature_names - raw_label)),
        raw_label=tuple(sorted(raw_label)))
  served = {name: raw for name, raw in sources.items() if name != label_key}
  needed = set().union(*served.values()) if served else set()
  if raw_label_key is not None:
    users = sorted(name for name, raw in served.items()
                   if raw_label_key in raw)
    if users:
      raise config_lib.ConfigError(
          f'custom_config[{RAW_LABEL_KEY!r}]={raw_label_key!r} cannot be left '
          f'out of served requests: the served transformed feature(s) {users} '
          f'are computed from it (label: {label_key!r}). Name the raw feature '
          'only the label is computed from, or leave it unset.')
    raw_label = {raw_label_key}
  else:
    raw_label = set(sources.get(label_key, ())) - needed
  used = set().union(*sources.values()) if sources else set()
  return ServingFeatures(
      parsed=tuple(sorted((needed & raw_feature_names) - raw_label)),
      raw_label=tuple(sorted(raw_label)),
      unused=tuple(sorted(raw_feature_names - used - raw_label)))


def find_serving_features(schemas: schemas_lib.ExampleSchemas,
                          label_key: Optional[str],
                          raw_label_key: Optional[str] = None
                          ) -> ServingFeatures:
  """`serving_features` of a run, reading the transform graph if any."""
  sources = None
  if schemas.tf_transform_output is not None:
    sources = transformed_feature_sources(schemas.tf_transform_output)
  features = serving_features(schemas.raw_feature_spec(), sources, label_key,
                              raw_label_key)
  how = ('custom_config' if raw_label_key else
         'the transform graph' if sources is not None else 'the label key')
  logging.info(
      'Serving input parses raw features %s; leaves out the raw label %s '
      '(from %s) and unused raw features %s.', list(features.parsed),
      list(features.raw_label), how, list(features.unused))
  return features
