"""TPU runtimes per generation: the matrix (tpu/runtimes.py, rendered in
docs/guide/tpu_slices.md), the default accelerator and its reason, refusals and
warnings citing their sources, and compiled v1/v2 files whose TPU steps
carry the chosen runtime's environment (shown in the compile summary)."""

import os

import pytest
import yaml

from tfx_tpu_trainer.tpu import runtimes
from tfx_tpu_trainer_cli import main as cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PIPELINE_ROOT = 'gs://test-bucket/tfx/taxi_tpu'
DATA_ROOT = 'gs://test-bucket/data/taxi'
PJRT_ENV = {'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'true',
            'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': '/lib/libtpu.so'}


def test_docs_show_the_support_matrix_of_the_code():
  with open(os.path.join(REPO, 'docs', 'guide', 'tpu_slices.md')) as f:
    docs = f.read()
  assert runtimes.support_matrix_markdown() in docs
  assert runtimes.DEFAULT_ACCELERATOR_REASON in ' '.join(docs.split())


@pytest.mark.parametrize('accelerator,runtime,env', [
    ('tpu-v4-podslice', 'se', {}),
    ('tpu-v5-lite-podslice', 'pjrt', PJRT_ENV),
    ('tpu-v5-lite-device', 'pjrt', PJRT_ENV),
    ('tpu-v5p-slice', 'pjrt', PJRT_ENV),
    ('tpu-v6e-slice', 'pjrt', PJRT_ENV),
])
def test_each_generation_defaults_to_a_runtime_google_documents(
    accelerator, runtime, env):
  choice = runtimes.choose(accelerator)
  assert choice.runtime == runtime
  assert choice.env == dict(env, TFX_TPU_TRAINER_TPU_RUNTIME=runtime,
                            TFX_TPU_TRAINER_ACCELERATOR=accelerator)
  assert choice.image_target == f'tpu-{runtime}'


def test_the_default_accelerator_is_the_one_without_a_reported_failure():
  from tfx_tpu_trainer.kubeflow import scheduling  # pylint: disable=g-import-not-at-top
  assert scheduling.DEFAULT_ACCELERATOR == 'tpu-v4-podslice'
  choice = runtimes.choose(scheduling.DEFAULT_ACCELERATOR)
  assert (choice.runtime, choice.warnings) == ('se', ())


@pytest.mark.parametrize('accelerator,runtime', [
    ('tpu-v4-podslice', 'pjrt'), ('tpu-v5-lite-podslice', None),
    ('tpu-v5p-slice', None), ('tpu-v6e-slice', None)])
def test_pjrt_warns_citing_the_open_report(accelerator, runtime):
  (warning,) = runtimes.choose(accelerator, runtime).warnings
  assert 'with the pjrt runtime: reported broken: ' in warning
  assert 'https://github.com/tensorflow/tensorflow/issues/90807 (open)' in (
      warning)
  assert warning.endswith('Run `tfx-tpu-trainer tpu-check` on such a TPU (or '
                          'compile with --tpu-check) before the pipeline.')


@pytest.mark.parametrize('accelerator,runtime,message', [
    ('tpu-v6e-slice', 'se',
     'tpu-runtime se is not supported on TPU v6e (tpu-v6e-slice): TensorFlow '
     '2.15 runs v6e with pjrt only (https://cloud.google.com/tpu/docs/'
     'runtimes); use --tpu-runtime pjrt.'),
    ('tpu-v5p-slice', 'se',
     'tpu-runtime se is not supported on TPU v5p (tpu-v5p-slice): TensorFlow '
     '2.15 runs v5p with pjrt only (https://cloud.google.com/tpu/docs/'
     'runtimes); use --tpu-runtime pjrt.'),
    ('tpu-v4-podslice', 'xla',
     "tpu-runtime 'xla' is not a TPU runtime; accepted values: se, pjrt."),
    ('tpu-v9', None,
     "accelerator 'tpu-v9' has no known TPU generation; accepted values: "),
])
def test_unsupported_combinations_are_refused(accelerator, runtime, message):
  with pytest.raises(runtimes.TPURuntimeError) as e:
    runtimes.choose(accelerator, runtime)
  assert str(e.value).startswith(message)


def test_runtime_in_use_reads_the_pjrt_switch():
  assert runtimes.runtime_in_use({}) == 'se'
  assert runtimes.runtime_in_use(dict(PJRT_ENV)) == 'pjrt'
  assert runtimes.runtime_in_use(
      {'NEXT_PLUGGABLE_DEVICE_USE_C_API': 'false',
       'TF_PLUGGABLE_DEVICE_LIBRARY_PATH': '/lib/libtpu.so'}) == 'se'


def _compile(tmp_path, capsys, *argv):
  assert cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--output-dir', str(tmp_path),
                   '--trainer-image', 'gcr.io/p/tpu:1'] + list(argv)) == 0
  return capsys.readouterr()


def _v1_env(path, step):
  from tfx_tpu_trainer.kubeflow import compiled_files  # pylint: disable=g-import-not-at-top
  template = compiled_files.argo_step(
      compiled_files.read_argo_workflow(path), step)
  return template, {e['name']: e.get('value')
                    for e in template['container'].get('env', [])}


def _runtime_env(env):
  return {k: v for k, v in env.items() if k in runtimes.STEP_ENV_NAMES}


@pytest.mark.parametrize('accelerator,runtime', [
    ('tpu-v4-podslice', 'se'), ('tpu-v5-lite-podslice', 'pjrt')])
def test_v1_tpu_steps_carry_the_generations_runtime(tmp_path, capsys,
                                                    accelerator, runtime):
  captured = _compile(tmp_path, capsys, '--accelerator', accelerator,
                      '--tpu-check')
  path = str(tmp_path / 'taxi_tpu.tar.gz')
  expected = runtimes.choose(accelerator).env
  for step in ('TPUTrainer', 'TPUCheck'):
    template, env = _v1_env(path, step)
    assert _runtime_env(env) == expected, step
    assert template['container']['image'] == 'gcr.io/p/tpu:1', step
    assert template['nodeSelector'][
        'cloud.google.com/gke-tpu-accelerator'] == accelerator, step
  _, csv_env = _v1_env(path, 'CsvExampleGen')
  assert not _runtime_env(csv_env)
  # The check runs first: every other step waits for it.
  from tfx_tpu_trainer.kubeflow import compiled_files  # pylint: disable=g-import-not-at-top
  workflow = compiled_files.read_argo_workflow(path)
  (dag,) = [t['dag'] for t in workflow['spec']['templates'] if 'dag' in t]
  for task in dag['tasks']:
    if task['name'] != 'tpucheck':
      assert 'tpucheck' in task['dependencies'], task['name']
  # The summary, read back from the file.
  env_text = ', '.join(f'{k}={v}' for k, v in expected.items())
  assert f'TPU runtime env {env_text}' in captured.out
  assert (f'  TPU runtime:    {runtime} (TPU '
          f'{runtimes.generation(accelerator).name}, Dockerfile target '
          f'tpu-{runtime}; env {env_text})') in captured.out
  assert ('  TPU check:      step TPUCheck first, scheduled like the trainer '
          '(tfx-tpu-trainer tpu-check)') in captured.out
  warned = 'issues/90807' in captured.err
  assert warned is (runtime == 'pjrt')


def test_v2_tpu_executors_carry_the_chosen_runtime(tmp_path, capsys):
  captured = _compile(tmp_path, capsys, '--runner', 'kubeflow_v2',
                      '--accelerator', 'tpu-v4-podslice', '--tpu-runtime',
                      'pjrt', '--tpu-check', '--no-vertex-job')
  assert os.listdir(tmp_path) == ['taxi-tpu.kfp-v2-pipeline.yaml']
  with open(tmp_path / 'taxi-tpu.kfp-v2-pipeline.yaml') as f:
    spec, platform = yaml.safe_load_all(f)
  expected = runtimes.choose('tpu-v4-podslice', 'pjrt').env
  executors = spec['deploymentSpec']['executors']
  for name, executor in executors.items():
    env = {e['name']: e['value'] for e in executor['container']['env']}
    if name in ('TPUTrainer_executor', 'TPUCheck_executor'):
      assert _runtime_env(env) == expected, name
      assert executor['container']['resources']['accelerator'][
          'resourceCount'] == '4', name
    else:
      assert not _runtime_env(env), name
  assert sorted(platform['platforms']['kubernetes']['deploymentSpec'][
      'executors']) == ['TPUCheck_executor', 'TPUTrainer_executor']
  assert spec['root']['dag']['tasks']['CsvExampleGen']['dependentTasks'] == [
      'TPUCheck']
  assert 'TPU runtime env NEXT_PLUGGABLE_DEVICE_USE_C_API=true' in (
      captured.out)
  assert 'TPU v4 with the pjrt runtime: reported broken' in captured.err


@pytest.mark.parametrize('accelerator,image', [
    ('tpu-v4-podslice', 'gcr.io/p/tfx-tpu-trainer-tpu-se:1'),
    ('tpu-v5p-slice', 'gcr.io/p/tfx-tpu-trainer-tpu-pjrt:1')])
def test_trainer_image_follows_the_generations_runtime(tmp_path, capsys,
                                                       accelerator, image):
  assert cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--output-dir', str(tmp_path), '--accelerator',
                   accelerator, '--trainer-image',
                   'gcr.io/p/tfx-tpu-trainer-tpu-{runtime}:1']) == 0
  assert f'taxi_tpu.tar.gz: image {image};' in capsys.readouterr().out
  template, _ = _v1_env(str(tmp_path / 'taxi_tpu.tar.gz'), 'TPUTrainer')
  assert template['container']['image'] == image


def test_a_runtime_image_without_a_tpu_is_refused(tmp_path, capsys):
  assert cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--output-dir', str(tmp_path / 'out'),
                   '--no-use-tpu', '--trainer-image',
                   'gcr.io/p/tpu-{runtime}:1']) == 2
  assert capsys.readouterr().err == (
      "tfx-tpu-trainer compile: error: --trainer-image "
      "'gcr.io/p/tpu-{runtime}:1' names {runtime}, which needs a TPU VM "
      'runtime (--use-tpu, --tpu-style tpu-vm).\n')
  assert not (tmp_path / 'out').exists()
