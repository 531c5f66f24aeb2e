"""Issue 23's compile hooks through the library API (`compiler`), on a
pipeline of the user's own: two TPUTrainers, pipeline-level Beam args. Each
TPU step carries the runtime env; `tpu_check` adds the TPUCheck step first;
Beam args reach the Beam components only (v2 too); a Vertex job with a TPU,
bad runtimes and bad Beam args are refused naming the option, with nothing
written."""

import json
import os
import re
import tarfile

import pytest
import yaml
from tfx import v1 as tfx

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer.kubeflow import compiled_files
from tfx_tpu_trainer.kubeflow import compiler
from tfx_tpu_trainer.kubeflow import scheduling
from tfx_tpu_trainer.tpu import runtimes

V5E = 'tpu-v5-lite-podslice'
TRAINER_IMAGE = 'gcr.io/p/tfx-tpu-trainer-tpu-{runtime}:1'
PIPELINE_BEAM_ARGS = ['--direct_num_workers=2', '--runner=DirectRunner']
TRAINERS = ('TrainerA', 'TrainerB')


def _pipeline(name='two-trainers', custom_config=None):
  """CsvExampleGen, StatisticsGen, SchemaGen and two TPUTrainers."""
  from tfx_tpu_trainer import TPUTrainer  # pylint: disable=g-import-not-at-top
  with compiler.user_modules_not_packaged():
    example_gen = tfx.components.CsvExampleGen(input_base='/data')
    statistics_gen = tfx.components.StatisticsGen(
        examples=example_gen.outputs['examples'])
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs['statistics'])
    trainers = [
        TPUTrainer(module_file='/m.py',
                   examples=example_gen.outputs['examples'],
                   schema=schema_gen.outputs['schema'],
                   train_args=tfx.proto.TrainArgs(num_steps=1),
                   eval_args=tfx.proto.EvalArgs(num_steps=1),
                   custom_config=custom_config).with_id(i)
        for i in TRAINERS]
  return tfx.dsl.Pipeline(
      pipeline_name=name, pipeline_root='/root',
      components=[example_gen, statistics_gen, schema_gen] + trainers,
      beam_pipeline_args=list(PIPELINE_BEAM_ARGS))


def _options(**kwargs):
  kwargs.setdefault('trainer_pod', scheduling.TrainerPod(
      tpu=scheduling.tpu_vm(V5E, '2x2')))
  kwargs.setdefault('trainer_image', TRAINER_IMAGE)
  return compiler.KubeflowOptions(**kwargs)


def _env(container):
  return {e['name']: e.get('value') for e in container.get('env') or []}


def test_v1_every_tpu_step_carries_the_runtime_and_the_check_runs_first(
    tmp_path):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'p.tar.gz'),
      _options(tpu_check=True, step_env=(('A', '1'),)))
  choice = runtimes.choose(V5E)
  assert result.tpu_runtime == choice
  assert result.tpu_check_id == 'TPUCheck'
  assert result.trainer_image == 'gcr.io/p/tfx-tpu-trainer-tpu-pjrt:1'
  assert len(result.trainer_summaries) == 2
  for summary in result.trainer_summaries:
    assert 'TPU runtime env NEXT_PLUGGABLE_DEVICE_USE_C_API=true' in summary
  with tarfile.open(result.path) as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  steps = {t['name']: t for t in workflow['spec']['templates']
           if 'container' in t}
  tpu_steps = {'trainera', 'trainerb', 'tpucheck'}
  assert tpu_steps < set(steps)
  for name, step in steps.items():
    env = _env(step['container'])
    assert env['A'] == '1', name  # step_env on every step.
    runtime_env = {k: v for k, v in env.items()
                   if k in runtimes.STEP_ENV_NAMES}
    if name in tpu_steps:
      assert runtime_env == choice.env, name
      assert step['container']['image'] == result.trainer_image, name
      assert step['container']['resources']['limits'] == {
          'google.com/tpu': '4'}, name
    else:
      assert not runtime_env, name
  (dag,) = [t['dag'] for t in workflow['spec']['templates'] if 'dag' in t]
  for task in dag['tasks']:
    if task['name'] != 'tpucheck':
      assert 'tpucheck' in task['dependencies'], task['name']


def test_v2_tpu_executors_and_beam_args_on_beam_components_only(tmp_path):
  pipeline = _pipeline()
  result = compiler.compile_pipeline(
      pipeline, str(tmp_path / 'p.yaml'),
      _options(runner='kubeflow_v2', vertex_job=False, tpu_check=True,
               beam_args=('--direct_num_workers=3',)))
  assert result.paths == (str(tmp_path / 'p.yaml'),)
  assert os.listdir(tmp_path) == ['p.yaml']  # No Vertex job, no leftovers.
  with open(result.path) as f:
    spec, platform = yaml.safe_load_all(f)
  executors = spec['deploymentSpec']['executors']
  labels = {task: compiled_files.trainer_executor_label(spec, task)
            for task in spec['root']['dag']['tasks']}
  tpu_executors = {labels[i] for i in TRAINERS + ('TPUCheck',)}
  assert set(platform['platforms']['kubernetes']['deploymentSpec'][
      'executors']) == tpu_executors
  beam_executors = {labels['CsvExampleGen'], labels['StatisticsGen']}
  for label, executor in executors.items():
    container = executor['container']
    runtime_env = {k: v for k, v in _env(container).items()
                   if k in runtimes.STEP_ENV_NAMES}
    assert (runtime_env == runtimes.choose(V5E).env) is (
        label in tpu_executors), label
    beam = [a for a in container['args'] if a.startswith('--direct_')
            or a.startswith('--runner')]
    if label in beam_executors:
      # The cluster's defaults, the pipeline's, then the option's, by name.
      assert beam == ['--direct_running_mode=multi_processing',
                      '--runner=DirectRunner', '--direct_num_workers=3'], label
    else:
      assert not beam, label
  # Issue 21: the trainers still start through the system.Metrics entrypoint.
  for trainer in TRAINERS:
    assert executors[labels[trainer]]['container']['command'] == [
        'python', '-m', 'tfx_tpu_trainer.kubeflow.v2_metrics']
  assert executors[labels['TPUCheck']]['container']['command'] == [
      'python', '-m', 'tfx_tpu_trainer.kubeflow.v2_step']


def test_v2_cpu_writes_the_vertex_job(tmp_path):
  result = compiler.compile_pipeline(
      _pipeline(), str(tmp_path / 'p.yaml'),
      compiler.KubeflowOptions(runner='kubeflow_v2'))
  assert [os.path.basename(p) for p in result.paths] == [
      'p.yaml', 'p.vertex-pipeline-job.json']
  assert result.tpu_runtime is None and result.tpu_check_id is None
  with open(result.paths[1]) as f:
    job = json.load(f)
  for executor in job['pipelineSpec']['deploymentSpec']['executors'].values():
    assert not set(_env(executor['container'])) & set(
        runtimes.STEP_ENV_NAMES)


VERTEX_REFUSAL = (
    'the Vertex AI job cannot schedule the trainer on this TPU: Vertex AI '
    f'runs {V5E} 2x2 as machine type ct5lp-hightpu-4t (TPU_V5_LITEPOD) with '
    'tpuTopology 2x2, which a pipeline step cannot carry')


@pytest.mark.parametrize('kwargs,message', [
    (dict(runner='kubeflow_v2'), VERTEX_REFUSAL),
    (dict(runner='kubeflow_v2', vertex_accelerator_type='TPU_V5_LITEPOD'),
     VERTEX_REFUSAL),
    (dict(runner='kubeflow_v2', vertex_job=False,
          vertex_accelerator_type='TPU_V5_LITEPOD'),
     'vertex_accelerator_type needs the Vertex AI job (vertex_job=True).'),
    (dict(vertex_job=False), 'vertex_job=False needs runner kubeflow_v2.'),
    (dict(tpu_runtime='se'),
     f'tpu-runtime se is not supported on TPU v5e ({V5E}): TensorFlow 2.15 '
     'runs v5e with pjrt only'),
    (dict(trainer_pod=scheduling.TrainerPod(
        tpu=scheduling.tpu_vm('tpu-v6e-slice')), tpu_runtime='se'),
     'tpu-runtime se is not supported on TPU v6e (tpu-v6e-slice)'),
    (dict(trainer_pod=scheduling.TrainerPod(), tpu_runtime='se',
          trainer_image=None),
     "tpu_runtime 'se' needs a TPU VM request"),
    (dict(trainer_pod=scheduling.TrainerPod(), trainer_image=None,
          tpu_check=True),
     "tpu_check needs a TPU (trainer_pod.tpu): it checks the trainer's TPU."),
    (dict(trainer_pod=scheduling.TrainerPod()),
     f"trainer_image {TRAINER_IMAGE!r} names {{runtime}}, which needs a TPU "
     'VM runtime'),
    (dict(beam_args=('--runner=NoSuchRunner',)),
     '--beam-arg=--runner=NoSuchRunner: Beam knows no such runner'),
    (dict(beam_args=('--runner=DataflowRunner',)),
     '--beam-arg=--runner=DataflowRunner (the DataflowRunner) needs '
     '--beam-arg=--project=...'),
    (dict(beam_args=('--no_such_option=1',)),
     "'no_such_option' is not a Beam pipeline option."),
])
def test_bad_options_are_refused_before_anything_is_written(
    tmp_path, kwargs, message):
  output = tmp_path / 'out' / ('p.yaml' if kwargs.get('runner') else
                               'p.tar.gz')
  with pytest.raises(compiler.CompileError) as e:
    compiler.compile_pipeline(_pipeline(), str(output), _options(**kwargs))
  assert message in str(e.value)
  assert not output.parent.exists()


def test_a_component_named_like_the_check_is_refused(tmp_path):
  pipeline = _pipeline()
  pipeline.components[-1].with_id('TPUCheck')
  with pytest.raises(compiler.CompileError) as e:
    compiler.compile_pipeline(pipeline, str(tmp_path / 'out' / 'p.tar.gz'),
                              _options(tpu_check=True))
  assert str(e.value) == (
      "tpu_check: pipeline 'two-trainers' has a component 'TPUCheck' "
      'already; rename it, or compile without tpu_check.')
  assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('custom_config, refused', [
    ({'_note': 'x'}, "Unknown custom_config key(s) ['_note']"),
    ({'train_batch_size': 0}, 'train_batch_size'),
    ({'train_batch_size': 64, 'use_tpu': True}, None),
    # TPUEstimator's knobs (issue 47): accepted, refused, checked alike.
    ({'tf_random_seed': 3, 'initial_infeed_sleep_secs': 60,
      'experimental_host_call_every_n_steps': 10,
      'experimental_allow_per_host_v2_parallel_get_next': True,
      'bfloat16': True}, None),
    ({'tf_random_seed': -3}, "custom_config['tf_random_seed'] must be"),
    ({'num_cores_per_replica': 2}, 'model parallelism is not supported'),
    ({'input_partition_dims': [[1, 2], None]},
     'spatial partitioning is not supported'),
    ({'use_tpu': True, 'save_checkpoints_steps': 150},
     "custom_config['save_checkpoints_steps']=150 is not a multiple of "
     "custom_config['iterations_per_loop']=100"),
    ({'per_host_input': 'PER_HOST_V1',
      'experimental_allow_per_host_v2_parallel_get_next': True},
     'it acts only on PER_HOST_V2 input'),
    ({'params': {'iterations_per_loop': 10}},
     "custom_config['params'] sets 'iterations_per_loop'=10"),
    ({'params': {'train_steps': 1}}, None),
])
def test_the_compile_accepts_what_the_executor_accepts(tmp_path,
                                                        custom_config,
                                                        refused):
  """One check (TrainerConfig.from_custom_config) at compile and in Do."""
  output = tmp_path / 'p.tar.gz'
  if refused is None:
    compiler.compile_pipeline(_pipeline(custom_config=custom_config),
                              str(output), _options())
    config_lib.TrainerConfig.from_custom_config(custom_config, environ={})
    assert output.exists()
    return
  # The definition refuses it (component.py); so does the compile, for a
  # config changed after the definition.
  with pytest.raises(config_lib.ConfigError, match=re.escape(refused)):
    _pipeline(custom_config=custom_config)
  pipeline = _pipeline()
  for trainer in pipeline.components[-len(TRAINERS):]:
    trainer.exec_properties['custom_config'] = json.dumps(custom_config)
  with pytest.raises(compiler.CompileError, match=re.escape(refused)):
    compiler.compile_pipeline(pipeline, str(output), _options())
  with pytest.raises(config_lib.ConfigError, match=re.escape(refused)):
    config_lib.TrainerConfig.from_custom_config(custom_config, environ={})
  assert not output.exists()


def _beam_args(pipeline):
  return {c.id: list(c.executor_spec.beam_pipeline_args)
          for c in pipeline.components
          if hasattr(c.executor_spec, 'beam_pipeline_args')}


def _trainer_configs(pipeline):
  return {c.id: c.exec_properties.get('custom_config')
          for c in pipeline.components if c.id in TRAINERS}


def test_compiling_leaves_the_callers_pipeline_as_it_was(tmp_path):
  pipeline = _pipeline()
  ids = [c.id for c in pipeline.components]
  configs = _trainer_configs(pipeline)
  beam_args = _beam_args(pipeline)
  compiler.compile_pipeline(pipeline, str(tmp_path / 'tpu.tar.gz'),
                            _options(tpu_check=True))
  assert [c.id for c in pipeline.components] == ids
  assert _trainer_configs(pipeline) == configs
  assert _beam_args(pipeline) == beam_args
  for component in pipeline.components:
    assert not any(u.id == 'TPUCheck' for u in component.upstream_nodes)

  # The same object, for KFP v2 without a TPU: no check step, no TPU config.
  result = compiler.compile_pipeline(
      pipeline, str(tmp_path / 'cpu.yaml'),
      compiler.KubeflowOptions(runner='kubeflow_v2', vertex_job=False))
  with open(result.path) as f:
    spec = next(yaml.safe_load_all(f))
  assert 'TPUCheck' not in spec['root']['dag']['tasks']
  for trainer in TRAINERS:
    assert result.custom_configs[trainer] == {}
    parameters = spec['root']['dag']['tasks'][trainer]['inputs']['parameters']
    assert 'use_tpu' not in json.dumps(parameters['custom_config'])

  # And with the check again: compiling twice is not "a component already".
  again = compiler.compile_pipeline(pipeline, str(tmp_path / 'again.tar.gz'),
                                    _options(tpu_check=True))
  assert again.tpu_check_id == 'TPUCheck'


def test_warm_start_keys_without_a_base_model_are_refused_at_compile(
    tmp_path):
  output = tmp_path / 'p.tar.gz'
  with pytest.raises(compiler.CompileError) as error:
    compiler.compile_pipeline(
        _pipeline(custom_config={'vars_to_warm_start': 'dense/.*'}),
        str(output), _options())
  assert str(error.value).startswith(
      "TPUTrainer 'TrainerA': custom_config['vars_to_warm_start'] select "
      'variables of the base model to warm-start from, but the TPUTrainer '
      'has no base_model input.')
  assert not output.exists()


def test_params_that_disagree_with_the_train_args_are_refused_at_compile(
    tmp_path):
  output = tmp_path / 'p.tar.gz'
  with pytest.raises(compiler.CompileError) as error:
    compiler.compile_pipeline(
        _pipeline(custom_config={'params': {'train_steps': 5000}}),
        str(output), _options())
  assert str(error.value).startswith(
      "TPUTrainer 'TrainerA': custom_config['params'] sets "
      "'train_steps'=5000, but TPUTrainer sets params['train_steps']=1 from "
      'train_args.num_steps')
  assert not output.exists()
