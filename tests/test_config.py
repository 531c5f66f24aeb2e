"""TrainerConfig: the custom_config schema and its errors."""

import re

import pytest

from tfx_tpu_trainer import config as config_lib

ConfigError = config_lib.ConfigError
from_custom_config = config_lib.TrainerConfig.from_custom_config


def test_defaults():
  config = from_custom_config(None, environ={})
  assert config.use_tpu is False
  assert config.tpu is None
  assert (config.train_batch_size, config.eval_batch_size,
          config.predict_batch_size) == (64, 64, 8)
  assert config.iterations_per_loop == 100
  assert config.per_host_input == 'PER_HOST_V2'
  assert config.eval_strategy == 'train_and_evaluate'
  assert config.export_saved_model_api_version == 1
  assert config.input_cache == 'auto'
  assert config.params == {}
  assert config.show_progress is True
  assert config.eval_every_steps is None


@pytest.mark.parametrize('custom_config,save_checkpoints_steps', [
    ({'eval_every_steps': 200}, 200),
    ({'eval_every_steps': 200, 'save_checkpoints_steps': 200}, 200),
    ({'save_checkpoints_steps': 300}, 300),
])
def test_eval_every_steps_sets_the_checkpoint_steps(custom_config,
                                                    save_checkpoints_steps):
  config = from_custom_config(custom_config, environ={})
  assert config.save_checkpoints_steps == save_checkpoints_steps
  assert config.eval_every_steps == custom_config.get('eval_every_steps')


def test_use_tpu_is_automatic_from_tpu_name_or_environment():
  assert from_custom_config({'tpu': {'name': 'my-tpu'}}, environ={}).use_tpu
  from_env = from_custom_config({}, environ={'TPU_NAME': 'env-tpu'})
  assert from_env.use_tpu and from_env.tpu.name == 'env-tpu'
  assert not from_custom_config({'use_tpu': False},
                                environ={'TPU_NAME': 'x'}).use_tpu


def test_tpu_spec_accepts_dict_and_name():
  spec = from_custom_config(
      {'tpu': {'name': 'n', 'zone': 'us-central1-b', 'project': 'p'}},
      environ={}).tpu
  assert spec == config_lib.TPUSpec('n', 'us-central1-b', 'p')
  assert from_custom_config({'tpu': 'n'}, environ={}).tpu.name == 'n'


@pytest.mark.parametrize('custom_config,message', [
    ({'train_batchsize': 8}, "Unknown custom_config key(s) ['train_batchsize']"),
    ({'train_batch_size': '64'}, "custom_config['train_batch_size'] must be a positive integer"),
    ({'eval_batch_size': 0}, "custom_config['eval_batch_size'] must be a positive integer"),
    ({'iterations_per_loop': True}, "custom_config['iterations_per_loop'] must be a positive integer"),
    ({'iterations_per_loop': 0}, "custom_config['iterations_per_loop'] must be a positive integer (steps) or a time"),
    ({'iterations_per_loop': -3}, "custom_config['iterations_per_loop'] must be a positive integer (steps) or a time"),
    ({'iterations_per_loop': 2.5}, "custom_config['iterations_per_loop'] must be a positive integer (steps) or a time"),
    ({'iterations_per_loop': '5x'}, "custom_config['iterations_per_loop']='5x' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '-3s'}, "custom_config['iterations_per_loop']='-3s' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '0s'}, "custom_config['iterations_per_loop']='0s' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '05m'}, "custom_config['iterations_per_loop']='05m' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '5|'}, "custom_config['iterations_per_loop']='5|' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '5 m'}, "custom_config['iterations_per_loop']='5 m' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '100'}, "custom_config['iterations_per_loop']='100' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': ''}, "custom_config['iterations_per_loop']='' is not a time TPUConfig accepts"),
    ({'iterations_per_loop': '9223372036854775808s'}, "custom_config['iterations_per_loop']=9223372036854775808 is too large"),
    ({'iterations_per_loop': 2**63}, "custom_config['iterations_per_loop']=9223372036854775808 is too large"),
    ({'input_shuffle': 'files'}, "custom_config['input_shuffle']='files' is not accepted; use one of ['window', 'record']"),
    ({'use_tpu': 'yes'}, "custom_config['use_tpu'] must be true or false"),
    ({'per_host_input': 'PER_HOST'}, "custom_config['per_host_input']='PER_HOST' is not accepted"),
    ({'eval_strategy': 'both'}, "custom_config['eval_strategy']='both' is not accepted"),
    ({'input_cache': 'memory'}, "custom_config['input_cache']='memory' is not accepted; use one of ['auto', 'parsed', 'disk', 'serialized', 'none']"),
    ({'export_saved_model_api_version': 3}, "custom_config['export_saved_model_api_version']=3"),
    ({'tpu': {'zone': 'z'}}, "custom_config['tpu'] needs a 'name'"),
    ({'tpu': {'name': 'n', 'region': 'r'}}, "Unknown custom_config['tpu'] key(s) ['region']"),
    ({'tpu': 7}, "custom_config['tpu'] must be a dict"),
    ({'params': {'batch_size': 3}}, "custom_config['params'] may not set ['batch_size']"),
    ({'params': [1]}, "custom_config['params'] must be a dict"),
    ({'label_key': ''}, "custom_config['label_key'] must be a non-empty string"),
    ({'use_tpu': True, 'num_shards': 8, 'train_batch_size': 60},
     "custom_config['train_batch_size']=60 does not divide by num_shards=8"),
    ({'use_tpu': True, 'num_shards': 8, 'predict_batch_size': 4},
     "custom_config['predict_batch_size']=4 does not divide by num_shards=8"),
    ({'eval_every_steps': 0},
     "custom_config['eval_every_steps'] must be a positive integer, got 0"),
    ({'eval_every_steps': 100, 'save_checkpoints_steps': 50},
     "custom_config['eval_every_steps']=100 and ['save_checkpoints_steps']=50 "
     'differ: an evaluation reads a checkpoint'),
    ({'eval_every_steps': 150, 'host_iterations_per_loop': 100},
     "custom_config['eval_every_steps']=150 is not a multiple of "
     "custom_config['host_iterations_per_loop']=100"),
    ({'show_progress': 'no'},
     "custom_config['show_progress'] must be true or false, got 'no'"),
])
def test_invalid_config_names_the_key(custom_config, message):
  with pytest.raises(ConfigError) as error:
    from_custom_config(custom_config, environ={})
  assert message in str(error.value)


def test_unknown_key_error_lists_accepted_keys():
  with pytest.raises(ConfigError, match='Accepted keys: .*train_batch_size'):
    from_custom_config({'bogus': 1}, environ={})


def test_not_a_dict():
  with pytest.raises(ConfigError, match='custom_config must be a dict'):
    from_custom_config(['use_tpu'], environ={})


def test_shard_divisibility_only_matters_on_tpu():
  config = from_custom_config(
      {'use_tpu': False, 'num_shards': 8, 'train_batch_size': 60}, environ={})
  assert config.num_shards == 8
  off_tpu_eval = from_custom_config(
      {'use_tpu': True, 'num_shards': 8, 'eval_on_tpu': False,
       'eval_batch_size': 3}, environ={})
  assert off_tpu_eval.eval_batch_size == 3


def test_check_steps():
  cpu = from_custom_config({}, environ={})
  cpu.check_steps(10, None)
  with pytest.raises(ConfigError, match='train_args.num_steps must be a positive'):
    cpu.check_steps(None, 5)
  with pytest.raises(ConfigError, match='eval_args.num_steps must be positive'):
    cpu.check_steps(10, -1)
  tpu = from_custom_config({'tpu': 'n'}, environ={})
  with pytest.raises(ConfigError, match='eval_args.num_steps is required when use_tpu'):
    tpu.check_steps(10, None)
  tpu.check_steps(10, 5)


def test_gke_tpu_node_endpoint_names_the_tpu():
  config = from_custom_config(
      {}, environ={'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS': 'grpc://10.0.0.2:8470'})
  assert config.use_tpu and config.tpu.name == 'grpc://10.0.0.2:8470'
  named = from_custom_config(
      {}, environ={'TPU_NAME': 'a', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS': 'b'})
  assert named.tpu.name == 'a'


def test_every_key_is_declared_once_with_its_check_and_help():
  import dataclasses  # pylint: disable=g-import-not-at-top
  for field in dataclasses.fields(config_lib.TrainerConfig):
    assert callable(field.metadata[config_lib.CHECK]), field.name
    assert field.metadata[config_lib.HELP].strip(), field.name
  # The defaults of the parser are the fields' defaults.
  assert from_custom_config({}, environ={}) == config_lib.TrainerConfig()


def test_reference_table_of_keys_is_rendered_from_the_fields():
  import os  # pylint: disable=g-import-not-at-top
  page = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'docs',
                      'reference', 'custom_config.md')
  with open(page) as f:
    text = f.read()
  table = config_lib.keys_table()
  assert table in text, (
      'docs/reference/custom_config.md\'s TPUTrainer table differs from the '
      'TrainerConfig fields; paste the output of `python -m '
      'tfx_tpu_trainer.config` under "## TPUTrainer":\n' + table)
  assert table.startswith('| key | default | meaning |\n')
  assert "| `train_batch_size` | `64` |" in table
  assert '| `per_host_input` | `PER_HOST_V2` |' in table
  assert '| `allow_nonfinite_metrics` | `false` |' in table


# TPUEstimator's knobs (issue 47): each a key, checked here and by the
# Kubeflow compile (tests/kubeflow/test_compiler_tpu.py).
@pytest.mark.parametrize('custom_config,message', [
    ({'tf_random_seed': -1},
     "custom_config['tf_random_seed'] must be an integer >= 0"),
    ({'tf_random_seed': '7'},
     "custom_config['tf_random_seed'] must be an integer >= 0"),
    ({'tf_random_seed': True},
     "custom_config['tf_random_seed'] must be an integer >= 0"),
    ({'initial_infeed_sleep_secs': 0},
     "custom_config['initial_infeed_sleep_secs'] must be a positive integer"),
    ({'experimental_host_call_every_n_steps': 0},
     "custom_config['experimental_host_call_every_n_steps'] must be a "
     'positive integer'),
    ({'experimental_allow_per_host_v2_parallel_get_next': 'yes'},
     "custom_config['experimental_allow_per_host_v2_parallel_get_next'] must "
     'be true or false'),
    ({'experimental_allow_per_host_v2_parallel_get_next': True,
      'per_host_input': 'PER_HOST_V1'},
     "custom_config['experimental_allow_per_host_v2_parallel_get_next'] is "
     "true, but custom_config['per_host_input']='PER_HOST_V1': it acts only "
     'on PER_HOST_V2 input.'),
    ({'bfloat16': 1}, "custom_config['bfloat16'] must be true or false"),
    ({'vars_to_warm_start': ''},
     "custom_config['vars_to_warm_start'] must hold non-empty regular "
     'expressions'),
    ({'vars_to_warm_start': 'dense/('},
     "custom_config['vars_to_warm_start']: 'dense/(' is not a regular "
     'expression'),
    ({'vars_to_warm_start': []},
     "custom_config['vars_to_warm_start'] is an empty list, which "
     'warm-starts nothing'),
    ({'vars_to_warm_start': ['dense', 3]},
     "custom_config['vars_to_warm_start'] must hold non-empty regular "
     'expressions (strings), got 3.'),
    ({'var_name_to_prev_var_name': {'w': 1}},
     "custom_config['var_name_to_prev_var_name'] must map variable names"),
    ({'var_name_to_prev_var_name': 'w'},
     "custom_config['var_name_to_prev_var_name'] must map variable names"),
])
def test_invalid_tpu_estimator_knob_names_the_key(custom_config, message):
  with pytest.raises(ConfigError) as error:
    from_custom_config(custom_config, environ={})
  assert message in str(error.value)


@pytest.mark.parametrize('key,value,reason', [
    ('num_cores_per_replica', 2, 'model parallelism is not supported'),
    ('input_partition_dims', [[1, 2, 2, 1], None],
     'spatial partitioning is not supported'),
    ('model_dir', '/tmp/m', "params['model_dir']"),
    ('train_steps', 100, 'TrainArgs(num_steps=N)'),
    ('warm_start_from', '/tmp/m', "TPUTrainer's base_model input"),
    ('precision', 'bfloat16', "custom_config['bfloat16']: true"),
    ('per_host_input_for_training', 'PER_HOST_V2',
     "custom_config['per_host_input']"),
])
def test_estimator_arguments_that_are_no_key_say_why(key, value, reason):
  with pytest.raises(ConfigError) as error:
    from_custom_config({key: value}, environ={})
  assert str(error.value).startswith(
      f'custom_config[{key!r}] is not a TPUTrainer key: ')
  assert reason in str(error.value)


def test_input_modes_that_cannot_evaluate_on_several_hosts_are_refused():
  two_hosts = {'TPU_WORKER_HOSTNAMES': 'h0,h1'}
  for mode in ('PER_HOST_V1', 'PER_SHARD_V1'):
    for custom_config, environ in (
        ({'per_host_input': mode, 'tpu_workers': ['h0', 'h1']}, {}),
        ({'per_host_input': mode}, two_hosts)):
      with pytest.raises(ConfigError) as error:
        from_custom_config(custom_config, environ=environ)
      assert str(error.value) == (
          f"custom_config['per_host_input']={mode!r} cannot evaluate on a "
          'TPU slice of 2 hosts: TPUEstimator evaluates on several hosts only '
          "with ['PER_HOST_V2', 'BROADCAST'] and would stop at the first "
          "evaluation, after training. Use 'PER_HOST_V2' (the default).")
  # One host, or a slice in a mode TPUEstimator evaluates with: accepted.
  assert from_custom_config({'per_host_input': 'PER_HOST_V1', 'tpu': 'n'},
                            environ={}).per_host_input == 'PER_HOST_V1'
  assert from_custom_config({'per_host_input': 'BROADCAST'},
                            environ=two_hosts).use_tpu


@pytest.mark.parametrize('custom_config,key', [
    ({'tpu': 'n', 'save_checkpoints_steps': 150}, 'save_checkpoints_steps'),
    ({'tpu': 'n', 'eval_every_steps': 250, 'iterations_per_loop': 100},
     'eval_every_steps'),
])
def test_tpu_checkpoints_that_miss_the_loop_ends_are_refused(custom_config,
                                                             key):
  with pytest.raises(ConfigError) as error:
    from_custom_config(custom_config, environ={})
  steps = custom_config.get(key)
  assert str(error.value).startswith(
      f"custom_config['{key}']={steps} is not a multiple of "
      "custom_config['iterations_per_loop']=100: on a TPU, TPUEstimator "
      'saves checkpoints only between two loops of 100 steps')


def test_checkpoint_steps_off_the_loop_are_fine_off_tpu_or_with_a_time():
  assert from_custom_config({'save_checkpoints_steps': 150},
                            environ={}).save_checkpoints_steps == 150
  assert from_custom_config(
      {'tpu': 'n', 'save_checkpoints_steps': 150, 'iterations_per_loop': '5m'},
      environ={}).use_tpu
  assert from_custom_config(
      {'tpu': 'n', 'save_checkpoints_steps': 300, 'iterations_per_loop': 100},
      environ={}).save_checkpoints_steps == 300


def test_params_the_config_sets_must_agree_with_it():
  config = from_custom_config(
      {'train_batch_size': 32, 'bfloat16': True, 'iterations_per_loop': 50,
       'params': {'train_batch_size': 32, 'num_train_images': 1000}},
      environ={})
  assert config.config_params() == {
      'train_batch_size': 32, 'eval_batch_size': 64, 'predict_batch_size': 8,
      'iterations_per_loop': 50, 'precision': 'bfloat16',
      'use_bfloat16': True}
  with pytest.raises(ConfigError) as error:
    from_custom_config({'params': {'train_batch_size': 1024}}, environ={})
  assert str(error.value) == (
      "custom_config['params'] sets 'train_batch_size'=1024, but TPUTrainer "
      "sets params['train_batch_size']=64 from "
      "custom_config['train_batch_size'], which the estimator uses: the model "
      'would read one value while training runs with the other. Set '
      "custom_config['train_batch_size'] instead, and drop 'train_batch_size' "
      "from custom_config['params'].")
  with pytest.raises(ConfigError, match=re.escape(
      "sets 'precision'='bfloat16', but TPUTrainer sets "
      "params['precision']='float32' from custom_config['bfloat16']")):
    from_custom_config({'params': {'precision': 'bfloat16'}}, environ={})
  with pytest.raises(ConfigError, match="sets 'use_bfloat16'=1"):
    from_custom_config({'bfloat16': True, 'params': {'use_bfloat16': 1}},
                       environ={})


def test_warm_start_keys_need_a_base_model():
  config = from_custom_config({'vars_to_warm_start': ['dense/.*'],
                               'var_name_to_prev_var_name': {'a': 'b'}},
                              environ={})
  assert config.vars_to_warm_start == ('dense/.*',)
  config.check_warm_start(True)
  with pytest.raises(ConfigError) as error:
    config.check_warm_start(False)
  assert str(error.value).startswith(
      "custom_config['vars_to_warm_start'] and "
      "custom_config['var_name_to_prev_var_name'] select variables of the "
      'base model to warm-start from, but the TPUTrainer has no base_model '
      'input.')
  from_custom_config({}, environ={}).check_warm_start(False)


def test_params_may_repeat_the_run_steps_only_as_they_are():
  config = from_custom_config({'params': {'train_steps': 100,
                                          'eval_steps': 5}}, environ={})
  config.check_steps(100, 5)
  with pytest.raises(ConfigError, match=re.escape(
      "custom_config['params'] sets 'eval_steps'=5, but TPUTrainer sets "
      "params['eval_steps']=10 from eval_args.num_steps")):
    config.check_steps(100, 10)
