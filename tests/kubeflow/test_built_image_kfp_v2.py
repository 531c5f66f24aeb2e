"""The taxi pipeline compiled for KFP v2 runs every task in the built image.

Each task starts from its executor's container spec with the ExecutorInput
and arguments the KFP v2 driver and launcher give it
(`tests/fixtures/kfp_v2_launch.py`), as a `docker run` of the image as its
non-root user, each fed its producers' outputs. One Beam worker process per
step (`--beam-arg=--direct_num_workers=1`; the default count runs in
test_built_image.py's KFP v1 run).
"""

import itertools
import json
import os

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.utils import path_utils
import yaml

from tests.fixtures import compiled_runs
from tests.fixtures import docker_pod
from tests.fixtures import kfp_v2_launch
from tests.fixtures.compiled_runs import data_root  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import
from tests.fixtures.docker_pod import built_image  # pylint: disable=unused-import
from tfx_tpu_trainer.publishing import export
from tfx_tpu_trainer.publishing import metrics as metrics_lib
from tfx_tpu_trainer_cli import main as cli

pytestmark = docker_pod.image_marks()

V2_TASKS = ['CsvExampleGen', 'StatisticsGen', 'SchemaGen', 'ExampleValidator',
            'Transform', 'TPUTrainer', 'Evaluator', 'Pusher']
USER_UID = docker_pod.IMAGE_UID


def test_kfp_v2_pipeline_runs_every_step_in_the_image_to_a_pushed_model(
    image, work, data_root):
  """The taxi pipeline compiled for KFP v2 (CPU), each task started as a KFP
  v2 backend starts it, in the DAG's order: its upstream artifacts read back
  from the producers' ExecutorOutput with the blank type schema the backend
  gives them (tensorflow/tfx#7768), `{{$}}` substituted by the launcher."""
  os.chmod(work, 0o755)
  v2 = work / 'kfp_v2'
  assert cli.main([
      'compile', '--runner', 'kubeflow_v2', '--no-use-tpu', '--no-vertex-job',
      '--pipeline-root', str(v2 / 'pipeline_root'), '--data-root', data_root,
      '--output-dir', str(v2 / 'compiled'), '--image',
      'gcr.io/test/tfx-tpu-trainer:1', '--train-steps',
      str(compiled_runs.TRAIN_STEPS), '--eval-steps', '5',
      '--train-batch-size', '32', '--eval-batch-size', '32',
      # One Beam worker process per step, each importing TensorFlow; the
      # default count runs in the KFP v1 taxi run (taxi_run).
      '--beam-arg=--direct_num_workers=1']) == 0
  with open(v2 / 'compiled' / 'taxi-tpu.kfp-v2-pipeline.yaml') as f:
    spec = list(yaml.safe_load_all(f))[0]
  # The pipeline root, like a bucket, is the pods' to write (the Pusher
  # writes `serving_model` there).
  (v2 / 'pipeline_root').mkdir()
  docker_pod.shared_with_the_pods(v2)
  order = kfp_v2_launch.task_order(spec)
  assert order == V2_TASKS
  ids = itertools.count(1)
  results = {}
  for task in order:
    inputs = kfp_v2_launch.task_inputs(spec, task, results, ids)
    for listed in inputs.values():
      assert listed[0]['type'] == {'instanceSchema': ''}
    results[task] = kfp_v2_launch.run_task(
        spec, task, inputs, spec['defaultPipelineRoot'], str(v2 / 'pods'),
        [str(work)], image=image)
    assert results[task].returncode == 0, (
        f'{task}:\n{results[task].log()[-6000:]}')
    # The step's ExecutorInput parses as the pipeline spec's own message.
    json_format.ParseDict(results[task].executor_input,
                          pipeline_spec_pb2.ExecutorInput())
    # The ExecutorOutput the launcher reads, written by the image's user:
    # each output at the URI the driver gave it.
    assert os.stat(results[task].output_file).st_uid == USER_UID, task
    with open(results[task].output_file) as f:
      executor_output = json_format.Parse(f.read(),
                                          pipeline_spec_pb2.ExecutorOutput())
    for key, listed in executor_output.artifacts.items():
      assert listed.artifacts[0].uri == results[task].output_uri(key), (
          task, key)

  result = results['TPUTrainer']
  with open(result.output_file) as f:
    executor_output = json_format.Parse(f.read(),
                                        pipeline_spec_pb2.ExecutorOutput())
  artifacts = {k: v.artifacts[0] for k, v in executor_output.artifacts.items()}
  assert sorted(artifacts) == ['metrics', 'model', 'model_run']
  for key, artifact in artifacts.items():
    assert artifact.name == key
  metrics = json_format.MessageToDict(artifacts['metrics'].metadata)
  assert metrics['global_step'] == compiled_runs.TRAIN_STEPS
  assert 'loss' in metrics
  model_metadata = json_format.MessageToDict(artifacts['model'].metadata)
  assert model_metadata['eval_global_step'] == compiled_runs.TRAIN_STEPS
  serving = path_utils.serving_model_path(result.output_uri('model'))
  assert export.saved_model_tag_sets(serving) == [('serve',), ('serve', 'tpu')]
  assert os.stat(os.path.join(serving, 'saved_model.pb')).st_uid == USER_UID
  written = os.path.join(result.output_uri('model_run'),
                         metrics_lib.METRICS_FILE_NAME)
  assert os.stat(written).st_uid == USER_UID
  assert compiled_runs.read_json(written)['global_step'] == (
      compiled_runs.TRAIN_STEPS)

  # The Evaluator blessed the trainer's model and the Pusher pushed it.
  blessing = results['Evaluator'].output_uri('blessing')
  assert os.path.exists(os.path.join(blessing, 'BLESSED'))
  with open(results['Pusher'].output_file) as f:
    pushed = json.load(f)['artifacts']['pushed_model']['artifacts'][0]
  assert pushed['metadata']['pushed'] == 1
  destination = pushed['metadata']['pushed_destination']
  assert destination.startswith(str(v2 / 'pipeline_root' / 'serving_model'))
  assert export.saved_model_tag_sets(destination) == [('serve',),
                                                      ('serve', 'tpu')]
  assert os.stat(os.path.join(destination, 'saved_model.pb')).st_uid == (
      USER_UID)
