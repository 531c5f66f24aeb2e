"""Off the TPU, a step of embedding columns reads only the rows it looks up."""

import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.training import estimator_builder

# Grappler's rewrite of embedding_lookup_sparse reads the whole table.
FULL_TABLE_READ = 'SimplifyEmbeddingLookupStage_ReadVar'
ROWS = 100_000


def _executed_nodes(session_config):
  """The nodes one train step of a 100,000-row embedding column runs."""
  column = tf.compat.v1.tpu.experimental.embedding_column(
      tf.feature_column.categorical_column_with_hash_bucket(
          'item', ROWS, dtype=tf.int64), 8)
  with tf.Graph().as_default():
    features = {'item': tf.constant([[3], [17], [123456789], [3]], tf.int64)}
    net = tf.compat.v1.feature_column.input_layer(features, [column])
    loss = tf.reduce_mean(tf.square(net))
    train_op = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss)
    with tf.compat.v1.Session(config=session_config) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      metadata = tf.compat.v1.RunMetadata()
      session.run(train_op, options=tf.compat.v1.RunOptions(
          trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                  run_metadata=metadata)
  return [node.node_name for device in metadata.step_stats.dev_stats
          for node in device.node_stats]


def test_cpu_lookups_turn_off_the_full_table_read(tmp_path):
  config = config_lib.TrainerConfig()
  default = estimator_builder.build_run_config(config, str(tmp_path / 'a'))
  assert default.session_config is None
  assert any(FULL_TABLE_READ in node for node in _executed_nodes(
      tf.compat.v1.ConfigProto(allow_soft_placement=True)))

  run_config = estimator_builder.build_run_config(
      config, str(tmp_path / 'b'), embedding_lookups_on_cpu=True)
  session_config = run_config.session_config
  assert session_config.allow_soft_placement
  rewrite_options = session_config.graph_options.rewrite_options
  assert rewrite_options.arithmetic_optimization == rewrite_options.OFF
  # The estimator's own default otherwise.
  assert rewrite_options.meta_optimizer_iterations == rewrite_options.ONE
  nodes = _executed_nodes(session_config)
  assert not [node for node in nodes if FULL_TABLE_READ in node]
  assert any('ResourceSparseApplyAdagrad' in node or 'Adagrad' in node
             for node in nodes)
