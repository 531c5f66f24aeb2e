"""`--model`: the bundled taxi models, picked by name in `run` and `compile`."""

import json
import os
import tarfile

import pytest
import yaml

from tfx_tpu_trainer_cli import main as cli
from tfx_tpu_trainer_cli import paths
from tfx_tpu_trainer_cli import run as run_command

from tests.fixtures import cli_exit

IMAGE_COMPONENTS = '/tfx-tpu-trainer/components'


def test_every_bundled_model_is_a_module_file_of_components():
  assert sorted(paths.MODEL_MODULE_FILES) == ['embeddings', 'keras',
                                              'wide_and_deep']
  for model in paths.MODEL_MODULE_FILES:
    assert os.path.isfile(paths.model_module_file(model))
  assert paths.TRAINER_MODULE_FILE == paths.model_module_file(
      paths.DEFAULT_MODEL)


@pytest.mark.slow
def test_run_model_embeddings_picks_the_embedding_module():
  args = cli.build_parser().parse_args(['run', '--model', 'embeddings'])
  options = run_command._validate_run_args(args)  # pylint: disable=protected-access
  assert options['trainer_module_file'] == os.path.join(
      paths.COMPONENTS_DIR, 'taxi_embedding_module.py')
  # A bundled model keeps the pipeline's Evaluator keys.
  assert 'eval_label_key' not in options


def test_model_and_module_file_exclude_each_other(capsys):
  for command in ('run', 'compile'):
    assert cli_exit.exit_code([command, '--model', 'keras', '--module-file',
                       '/x.py']) == 2
    assert ('argument --module-file: not allowed with argument --model'
            in capsys.readouterr().err)


def test_an_unknown_model_names_the_bundled_ones(capsys):
  assert cli_exit.exit_code(['run', '--model', 'dlrm']) == 2
  assert ("argument --model: invalid choice: 'dlrm' (choose from "
          "'embeddings', 'keras', 'wide_and_deep')") in capsys.readouterr().err


def test_compile_model_embeddings_names_its_module_in_the_image(tmp_path):
  assert cli.main([
      'compile', '--pipeline-root', 'gs://bucket/root', '--data-root',
      'gs://bucket/data', '--image', 'gcr.io/p/tfx-tpu-trainer:1',
      '--output-dir', str(tmp_path), '--no-use-tpu', '--model',
      'embeddings']) == 0
  (package,) = os.listdir(tmp_path)
  with tarfile.open(tmp_path / package) as archive:
    workflow = yaml.safe_load(archive.extractfile('pipeline.yaml'))
  (trainer,) = [t for t in workflow['spec']['templates']
                if t['name'] == 'tputrainer']
  args = trainer['container']['args']
  node = json.loads(args[args.index('--tfx_ir') + 1])['nodes'][0]
  parameters = node['pipelineNode']['parameters']['parameters']
  assert parameters['module_file']['fieldValue']['stringValue'] == (
      f'{IMAGE_COMPONENTS}/taxi_embedding_module.py')
