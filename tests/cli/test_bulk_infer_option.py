"""`compile --bulk-infer`: the bundled pipeline's optional TPUBulkInferrer step
(`run --bulk-infer` runs in tests/test_pipeline_e2e.py)."""

import os
import tarfile

import yaml

from tfx_tpu_trainer_cli import main as cli

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
