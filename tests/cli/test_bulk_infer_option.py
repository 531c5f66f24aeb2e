"""`compile --bulk-infer` and `run --bulk-infer`: the bundled pipeline's
optional TPUBulkInferrer step scoring the eval split."""

import os
import tarfile

import pytest
import yaml

from tfx_tpu_trainer_cli import main as cli

from tests import conftest
from tests.fixtures import bulk_inference

PIPELINE_ROOT = 'gs://test-bucket/tfx/taxi_tpu'
DATA_ROOT = 'gs://test-bucket/data/taxi'
IMAGE = 'gcr.io/test-project/tfx-tpu-trainer:1'


def test_compile_bulk_infer_puts_the_inferrer_on_the_tpu(tmp_path, capsys):
  code = cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--image', IMAGE, '--output-dir',
                   str(tmp_path), '--bulk-infer'])
  out = capsys.readouterr().out
  assert code == 0, out
  (line,) = [l for l in out.splitlines() if 'Inferrer step:' in l]
  assert line == ("  Inferrer step:   TPUBulkInferrer, custom_config {'tpu': "
                  "{'name': 'local'}, 'use_tpu': True}"), out
  (path,) = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path)]
  with tarfile.open(path) as package:
    workflow = yaml.safe_load(package.extractfile('pipeline.yaml'))
  steps = {t['name']: t for t in workflow['spec']['templates']
           if 'container' in t}
  with_tpu = sorted(
      name for name, step in steps.items()
      if 'google.com/tpu' in ((step['container'].get('resources') or {})
                              .get('limits') or {}))
  assert with_tpu == ['tpubulkinferrer', 'tputrainer']
  args = ' '.join(steps['tpubulkinferrer']['container']['args'])
  assert 'example_splits' in args
  (dag,) = [t['dag'] for t in workflow['spec']['templates'] if 'dag' in t]
  needs = {t['name']: set(t.get('dependencies', [])) for t in dag['tasks']}
  assert {'evaluator', 'tputrainer', 'csvexamplegen'} <= needs[
      'tpubulkinferrer']


def test_compile_without_bulk_infer_has_no_inferrer(tmp_path, capsys):
  code = cli.main(['compile', '--pipeline-root', PIPELINE_ROOT, '--data-root',
                   DATA_ROOT, '--image', IMAGE, '--output-dir',
                   str(tmp_path), '--no-use-tpu'])
  assert code == 0
  assert 'Inferrer step' not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.heavy
def test_run_bulk_infer_scores_the_eval_split(tmp_path, capfd):
  data = conftest.write_taxi_slice(str(tmp_path / 'data'), rows=300)
  code = cli.main(['run', '--train-steps', '30', '--eval-steps', '2',
                   '--train-batch-size', '16', '--eval-batch-size', '16',
                   '--min-accuracy', '0', '--data-root', data,
                   '--output-root', str(tmp_path / 'out'), '--bulk-infer'])
  captured = capfd.readouterr()
  assert code == 0, captured.out + captured.err
  assert '[9/9] TPUBulkInferrer done in' in captured.out
  line = [l for l in captured.out.splitlines()
          if l.startswith('  Bulk inference:')]
  assert line, captured.out
  result_dir = line[0].split(':', 1)[1].strip()

  class _Result:
    uri = result_dir

  logs = bulk_inference.prediction_logs(_Result)
  assert logs and all(log.predict_log.response.outputs['probabilities']
                      .float_val for log in logs)
