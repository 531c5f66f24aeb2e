"""The raw and transformed schemas a TPUTrainer run reads its examples with."""

import dataclasses
from typing import Dict, Mapping, Optional

import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.utils import io_utils
from tfx_tpu_trainer import errors

__all__ = ['ExampleSchemas', 'transform_raw_features', 'feature_spec',
           'load_schemas', 'check_label_key']


class SchemaError(errors.TPUTrainerError, ValueError):
  """The schema inputs are missing or do not describe the label."""


@dataclasses.dataclass(frozen=True)
class ExampleSchemas:
  """Schemas of one run.

  Attributes:
    raw: schema of the raw examples (what serving receives); None when the
      pipeline gave neither a schema nor a transform graph.
    examples: schema of the examples the trainer reads: the transformed
      schema with a transform graph, else the raw one.
    tf_transform_output: the transform graph, or None.
  """
  raw: Optional[schema_pb2.Schema]
  examples: schema_pb2.Schema
  tf_transform_output: Optional[tft.TFTransformOutput]

  def raw_feature_spec(self):
    """Feature spec for parsing serialized raw `tf.Example`s."""
    if self.tf_transform_output is not None:
      return self.tf_transform_output.raw_feature_spec()
    return feature_spec(self.raw)


@tf.autograph.experimental.do_not_convert
def transform_raw_features(tf_transform_output: tft.TFTransformOutput,
                           raw_features: Mapping[str, tf.Tensor]
                           ) -> Dict[str, tf.Tensor]:
  """`tf_transform_output.transform_raw_features`, in the current TF1 graph.

  Called in a TF1 graph, tf.Transform's Keras layer has Keras convert its
  code with autograph (once per process: CHANGELOG.md, "Performance, round
  two (issue 16)"); that code has no tensor-dependent Python control flow,
  so it runs here unconverted and builds the same ops.

  Args:
    tf_transform_output: the transform graph.
    raw_features: raw feature tensors (a subset gives the outputs that
      need only those).

  Returns:
    The transformed features.
  """
  return dict(tf_transform_output.transform_raw_features(raw_features))


def feature_spec(schema: schema_pb2.Schema):
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  return schema_utils.schema_as_feature_spec(schema).feature_spec


def load_schemas(schema_path: Optional[str],
                 transform_graph_path: Optional[str]) -> ExampleSchemas:
  """Reads the raw schema file and the transform graph, whichever are given.

  Args:
    schema_path: the schema artifact's file (fn_args.schema_path), or None.
    transform_graph_path: the transform graph artifact's URI, or None.

  Returns:
    The schemas of the run.

  Raises:
    SchemaError: when neither input is given.
  """
  raw = (io_utils.parse_pbtxt_file(schema_path, schema_pb2.Schema())
         if schema_path else None)
  if transform_graph_path:
    tf_transform_output = tft.TFTransformOutput(transform_graph_path)
    if raw is None:
      raw = tf_transform_output.raw_metadata.schema
    return ExampleSchemas(
        raw=raw,
        examples=tf_transform_output.transformed_metadata.schema,
        tf_transform_output=tf_transform_output)
  if raw is None:
    raise SchemaError(
        'TPUTrainer needs a schema or a transform_graph to read the examples; '
        'connect SchemaGen (schema=...) or Transform (transform_graph=...).')
  return ExampleSchemas(raw=raw, examples=raw, tf_transform_output=None)


def check_label_key(schema: schema_pb2.Schema, label_key: str,
                    where: str) -> None:
  """Raises SchemaError unless `label_key` is a feature of `schema`."""
  names = sorted(feature.name for feature in schema.feature)
  if label_key not in names:
    raise SchemaError(
        f'Label key {label_key!r} is not a feature of the {where} schema '
        f'(features: {names}). Set LABEL_KEY in the module or '
        "custom_config['label_key'] to one of them.")
