"""The TFX taxi template as `tfx template copy` writes it, its Trainer
swapped for TPUTrainer (`run_fn='models.estimator_model.model.run_fn'`, an
import path as the templates name their module): `run --pipeline` checks
it up front and runs it to a pushed model that serves raw unlabeled
examples; `compile --pipeline` packages its `models` package as a wheel."""

import glob
import json
import os
import re
import tarfile
import zipfile

import pytest
import yaml

from tests.fixtures import cli_exit
from tests.fixtures import tfx_template
from tfx_tpu_trainer_cli import main as cli


TEMPLATE_ROWS = 1000


def test_a_run_fn_that_names_no_function_is_refused_before_any_component(
    tmp_path, capfd, monkeypatch):
  monkeypatch.chdir(tmp_path)
  spec = tfx_template.copy_template(
      str(tmp_path / 'tpl'), run_fn='models.estimator_model.model.train_fn')
  assert cli_exit.exit_code(['run', '--pipeline', spec, '--output-root',
                     str(tmp_path / 'out')]) == 2
  err = capfd.readouterr().err
  assert ("TPUTrainer(run_fn='models.estimator_model.model.train_fn'): "
          f"{tmp_path}/tpl/models/estimator_model/model.py defines no "
          "'train_fn'") in err
  assert not (tmp_path / 'tfx_pipeline_output').exists()


def test_compile_packages_the_templates_models_package(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  spec = tfx_template.copy_template(str(tmp_path / 'tpl'))
  assert cli.main(['compile', '--pipeline', spec, '--output-dir',
                   str(tmp_path / 'out')]) == 0
  (package,) = glob.glob(str(tmp_path / 'out' / '*.tar.gz'))
  with tarfile.open(package) as archive:
    workflow = yaml.safe_load(archive.extractfile('pipeline.yaml'))
  (trainer,) = [t for t in workflow['spec']['templates']
                if t['name'] == 'tputrainer']
  args = trainer['container']['args']
  ir = json.loads(args[args.index('--tfx_ir') + 1])
  parameters = {
      name: value['fieldValue']['stringValue']
      for name, value in ir['nodes'][0]['pipelineNode']['parameters'][
          'parameters'].items() if 'stringValue' in value.get('fieldValue', {})}
  assert parameters['run_fn'] == tfx_template.ESTIMATOR_RUN_FN
  name, wheel = parameters['module_path'].split('@')
  assert name == 'models.estimator_model.model'
  assert os.path.isfile(wheel)
  with zipfile.ZipFile(wheel) as archive:
    assert {'models/__init__.py', 'models/features.py',
            'models/estimator_model/model.py'} <= set(archive.namelist())


@pytest.mark.slow
@pytest.mark.heavy
def test_the_template_runs_to_a_pushed_model_that_serves_raw_examples(
    tmp_path, capfd, monkeypatch):
  monkeypatch.chdir(tmp_path)  # The template's outputs are under '.'.
  spec = tfx_template.copy_template(str(tmp_path / 'tpl'), train_steps=100,
                                    eval_steps=10)
  # The template's data, cut to its first rows: the run's path is what is
  # tested, not the 15,002 rows (binary_accuracy >= 0.6 blesses).
  data_csv = tmp_path / 'tpl' / 'data' / 'data.csv'
  data_csv.write_text(''.join(data_csv.read_text().splitlines(True)[
      :TEMPLATE_ROWS + 1]))
  assert cli.main(['run', '--pipeline', spec, '--output-root',
                   str(tmp_path / 'out')]) == 0
  out = capfd.readouterr().out
  assert '[6/8] TPUTrainer done in' in out
  assert 'Blessed:                yes' in out
  pushed = re.search(r'^  Pushed model:\s+(\S+)$', out, re.M).group(1)
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in out
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  (records,) = glob.glob(str(
      tmp_path / 'tfx_pipeline_output' / 'tpl-taxi' / 'CsvExampleGen' /
      'examples' / '*' / 'Split-eval' / '*.gz'))
  requests = []
  for record in tf.data.TFRecordDataset([records], 'GZIP').take(20):
    example = tf.train.Example.FromString(record.numpy())
    del example.features.feature['tips']  # A served request: no label.
    requests.append(example.SerializeToString())
  served = tf.saved_model.load(str(tmp_path / pushed), tags=['serve'])
  signature = served.signatures['serving_default']
  (name,) = signature.structured_input_signature[1]  # The serialized input.
  outputs = signature(**{name: tf.constant(requests)})
  assert outputs and all(value.shape[0] == 20 for value in outputs.values())
