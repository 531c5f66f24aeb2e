"""RunConfig/TPUConfig mapping and the TPUEstimator built from a config."""

import pytest
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import errors
from tfx_tpu_trainer.training import estimator_builder


class StandInResolver:
  """Answers like TPUClusterResolver for a named TPU, without a TPU."""

  calls = []

  def __init__(self, tpu, zone, project):
    StandInResolver.calls.append((tpu, zone, project))

  def master(self):
    return 'grpc://10.240.1.2:8470'

  def cluster_spec(self):
    return tf.train.ClusterSpec({'worker': ['10.240.1.2:8470']})


def _config(**custom_config):
  return config_lib.TrainerConfig.from_custom_config(custom_config, environ={})


def test_named_tpu_is_passed_as_master_not_cluster(tmp_path):
  config = _config(
      tpu={'name': 'tpu-a', 'zone': 'us-central1-b', 'project': 'proj'},
      iterations_per_loop=250, num_shards=8, per_host_input='PER_HOST_V1',
      save_checkpoints_steps=500, keep_checkpoint_max=3)
  run_config = estimator_builder.build_run_config(
      config, str(tmp_path), resolver_factory=StandInResolver)

  assert StandInResolver.calls[-1] == ('tpu-a', 'us-central1-b', 'proj')
  assert run_config.master == 'grpc://10.240.1.2:8470'
  assert run_config.evaluation_master == 'grpc://10.240.1.2:8470'
  assert run_config.cluster is None
  # Without cluster=, train_and_evaluate stays on its local branch.
  assert not run_config.cluster_spec.as_dict()
  assert list(run_config.session_config.cluster_def.job[0].tasks.values()) == [
      '10.240.1.2:8470']
  assert run_config.tpu_config.iterations_per_loop == 250
  assert run_config.tpu_config.num_shards == 8
  assert (run_config.tpu_config.per_host_input_for_training ==
          tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V1)
  assert run_config.save_checkpoints_steps == 500
  assert run_config.keep_checkpoint_max == 3
  assert run_config.model_dir == str(tmp_path)


def test_cpu_run_config_needs_no_resolver(tmp_path):
  def no_resolver(**unused_kwargs):
    raise AssertionError('no TPU is named; nothing must be resolved')

  run_config = estimator_builder.build_run_config(
      _config(), str(tmp_path), resolver_factory=no_resolver)
  assert run_config.master == ''
  # The TPU loop length means nothing on CPU; 1 keeps per-step logging off.
  assert run_config.tpu_config.iterations_per_loop == 1
  assert (run_config.tpu_config.per_host_input_for_training ==
          tf.compat.v1.estimator.tpu.InputPipelineConfig.PER_HOST_V2)


def test_estimator_gets_all_three_batch_sizes_and_params(tmp_path):
  config = _config(train_batch_size=32, eval_batch_size=16,
                   predict_batch_size=4, export_saved_model_api_version=2,
                   params={'learning_rate': 0.5})
  estimator = estimator_builder.build_estimator(
      lambda features, labels, mode, params, config: None, config,
      estimator_builder.build_run_config(config, str(tmp_path)),
      {'learning_rate': 0.5})
  context = estimator._ctx  # pylint: disable=protected-access
  assert context._train_batch_size == 32  # pylint: disable=protected-access
  assert context._eval_batch_size == 16  # pylint: disable=protected-access
  assert context._predict_batch_size == 4  # pylint: disable=protected-access
  assert estimator.params['learning_rate'] == 0.5
  assert estimator._export_saved_model_api_version == 2  # pylint: disable=protected-access


def test_unreachable_tpu_is_a_clear_error(tmp_path):
  def unreachable(**unused_kwargs):
    raise ConnectionError('Name or service not known')

  with pytest.raises(errors.TPUTrainerError,
                     match=r"Could not resolve TPU 'tpu-x' .*ConnectionError"):
    estimator_builder.build_run_config(
        _config(tpu='tpu-x'), str(tmp_path), resolver_factory=unreachable)


@pytest.mark.parametrize('loop,seconds', [('300s', 300), ('5m', 300),
                                          ('1h', 3600)])
def test_iterations_per_loop_as_a_time_reaches_tpu_config(tmp_path, loop,
                                                          seconds):
  # pylint: disable-next=g-import-not-at-top
  from tensorflow_estimator.python.estimator.tpu import util as tpu_util
  config = _config(tpu={'name': 'tpu-a'}, iterations_per_loop=loop)
  run_config = estimator_builder.build_run_config(
      config, str(tmp_path), resolver_factory=StandInResolver)
  assert run_config.tpu_config.iterations_per_loop == loop
  # TPUEstimator reads it back as a time per loop.
  assert tpu_util.parse_iterations_per_loop(
      run_config.tpu_config.iterations_per_loop) == (seconds, 'seconds')
