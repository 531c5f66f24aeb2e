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


def test_tpu_estimator_knobs_reach_tpu_config_and_run_config(tmp_path):
  config = _config(tpu={'name': 'tpu-a'}, tf_random_seed=7,
                   initial_infeed_sleep_secs=30,
                   experimental_host_call_every_n_steps=10,
                   experimental_allow_per_host_v2_parallel_get_next=True)
  run_config = estimator_builder.build_run_config(
      config, str(tmp_path), resolver_factory=StandInResolver)
  tpu_config = run_config.tpu_config
  assert tpu_config.initial_infeed_sleep_secs == 30
  assert tpu_config.experimental_host_call_every_n_steps == 10
  assert tpu_config.experimental_allow_per_host_v2_parallel_get_next is True
  assert run_config.tf_random_seed == 7
  defaults = estimator_builder.build_run_config(_config(), str(tmp_path))
  assert defaults.tf_random_seed is None
  assert defaults.tpu_config.initial_infeed_sleep_secs is None
  assert defaults.tpu_config.experimental_host_call_every_n_steps == 1
  assert not (
      defaults.tpu_config.experimental_allow_per_host_v2_parallel_get_next)


class TwoHostResolver(StandInResolver):
  """A Cloud TPU pod named by name: two hosts in its cluster spec."""

  def cluster_spec(self):
    return tf.train.ClusterSpec({'worker': ['10.0.0.2:8470',
                                            '10.0.0.3:8470']})


def test_named_tpu_of_two_hosts_refuses_an_input_mode_it_cannot_evaluate(
    tmp_path):
  config = _config(tpu='pod-a', per_host_input='PER_HOST_V1')
  with pytest.raises(config_lib.ConfigError) as error:
    estimator_builder.build_run_config(config, str(tmp_path),
                                       resolver_factory=TwoHostResolver)
  assert str(error.value).startswith(
      "custom_config['per_host_input']='PER_HOST_V1' cannot evaluate on a "
      'TPU slice of 2 hosts')
  accepted = estimator_builder.build_run_config(
      _config(tpu='pod-a'), str(tmp_path), resolver_factory=TwoHostResolver)
  assert len(accepted.session_config.cluster_def.job[0].tasks) == 2


def test_warm_start_settings_select_and_rename_from_the_base_model(tmp_path):
  saved_model = tmp_path / 'Format-Serving'
  (saved_model / 'variables').mkdir(parents=True)
  (saved_model / 'variables' / 'variables.index').write_bytes(b'')
  base = str(saved_model)
  # No selection: the path, as TPUEstimator takes it (all trainable vars).
  assert estimator_builder.warm_start_settings(_config(), base) == base
  assert estimator_builder.warm_start_settings(_config(), None) is None
  settings = estimator_builder.warm_start_settings(
      _config(vars_to_warm_start=['dense/.*', 'global_step'],
              var_name_to_prev_var_name={'dense/kernel': 'old/kernel'}),
      base)
  assert settings.ckpt_to_initialize_from == str(
      saved_model / 'variables' / 'variables')
  assert settings.vars_to_warm_start == ['dense/.*', 'global_step']
  assert settings.var_name_to_prev_var_name == {'dense/kernel': 'old/kernel'}
  renamed_only = estimator_builder.warm_start_settings(
      _config(var_name_to_prev_var_name={'w': 'v'}), str(tmp_path / 'ckpt'))
  assert renamed_only.ckpt_to_initialize_from == str(tmp_path / 'ckpt')
  assert renamed_only.vars_to_warm_start == '.*'
  with pytest.raises(config_lib.ConfigError, match='has no base_model input'):
    estimator_builder.warm_start_settings(
        _config(vars_to_warm_start='dense'), None)
