"""The data steps on Beam's portable runner: a job server and an EXTERNAL
worker pool, both Beam's own, started here as processes on localhost.

`run --beam-arg` points the bundled pipeline's Beam components at them, with
TFX's own taxi_utils.py (the stock Trainer's module: its preprocessing_fn
and its trainer_fn, a canned Estimator) from a folder on no one's path: the
workers get it the way the image's boot gets it on a cluster, from the job's
staged files (TFX's user-module wheel, `--extra_package`), installed by a
boot stand-in (`fixtures/beam_boot.py`). The Evaluator follows that module
(label tips_xf; how the keys are found: tests/cli/test_evaluator_keys.py) to
its blessing decision.
"""

import os
import shutil
import sys
import time

import pytest

from tests import conftest
from tests.fixtures import beam_jobs
from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

COMPONENTS = ('CsvExampleGen', 'StatisticsGen', 'SchemaGen',
              'ExampleValidator', 'Transform', 'TPUTrainer', 'Evaluator',
              'Pusher')
# The components whose executors run Beam (BeamExecutorSpec).
BEAM_COMPONENTS = ('CsvExampleGen', 'StatisticsGen', 'Transform', 'Evaluator')
ROWS = 300
BOOT = os.path.join(os.path.dirname(__file__), 'fixtures', 'beam_boot.py')


@pytest.fixture
def beam_services(tmp_path):
  """(job endpoint, worker pool address, worker pool log) on localhost."""
  services = tmp_path / 'services'
  services.mkdir()
  boot = services / 'boot.sh'
  boot.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{BOOT}" "$@"\n')
  boot.chmod(0o755)
  pool_port = beam_jobs.free_port()
  pool_log = services / 'pool.log'
  with beam_jobs.job_server(str(services)) as job_endpoint, beam_jobs.started(
      [beam_jobs.WORKER_POOL_MODULE, f'--service_port={pool_port}',
       f'--container_executable={boot}'], str(services), pool_log) as pool:
    beam_jobs.wait(pool, beam_jobs.accepts(pool_port), pool_log)
    yield job_endpoint, f'localhost:{pool_port}', pool_log


def _num_examples(statistics_uri):
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  counts = {}
  for split in ('train', 'eval'):
    stats = tfdv.load_stats_binary(os.path.join(
        statistics_uri, f'Split-{split}', 'FeatureStats.pb'))
    counts[split] = stats.datasets[0].num_examples
  return counts


def test_pipeline_on_a_job_server_and_worker_pool(tmp_path, capfd,
                                                  beam_services):
  job_endpoint, pool, pool_log = beam_services
  data = conftest.write_taxi_slice(str(tmp_path / 'data'), rows=ROWS)
  modules = tmp_path / 'user_modules'  # On no one's path.
  modules.mkdir()
  taxi_utils = str(modules / 'taxi_utils.py')
  shutil.copy(serving_data.stock_taxi_utils_module(), taxi_utils)
  output_root = tmp_path / 'out'
  started = time.time()
  code = cli.main([
      'run', '--train-steps', '60', '--eval-steps', '4', '--eval-every-steps',
      '0', '--train-batch-size', '16', '--eval-batch-size', '16',
      '--min-accuracy', '0',
      '--min-balanced-accuracy', '0', '--data-root',
      data, '--output-root', str(output_root), '--module-file', taxi_utils,
      '--preprocessing-module-file', taxi_utils,
      '--beam-arg=--runner=PortableRunner',
      f'--beam-arg=--job_endpoint={job_endpoint}',
      '--beam-arg=--environment_type=EXTERNAL',
      f'--beam-arg=--environment_config={pool}'])
  seconds = time.time() - started
  captured = capfd.readouterr()
  assert code == 0, captured.out + captured.err
  stdout = captured.out
  for index, component in enumerate(COMPONENTS, start=1):
    assert f'[{index}/8] {component} done in' in stdout
  # The Evaluator scored taxi_utils' model and decided (thresholds 0: yes).
  assert 'Evaluator metrics:      ' in stdout and 'binary_accuracy=' in stdout
  assert 'Blessed:                yes' in stdout
  assert 'Pushed model tag sets:  {serve}, {serve, tpu}' in stdout

  # The Beam components ran on the pool's workers, each with the staged
  # user-module wheel installed by the boot (Transform's import of it).
  with open(pool_log) as f:
    workers = f.read().count('Starting worker with command')
  assert workers >= len(BEAM_COMPONENTS), workers
  # As the DirectRunner: every row, split by hash as ExampleGen splits.
  statistics = [p for p in (output_root / 'pipelines' / 'taxi_tpu' /
                            'StatisticsGen' / 'statistics').iterdir()]
  (statistics_uri,) = statistics
  counts = _num_examples(str(statistics_uri))
  assert sum(counts.values()) == ROWS
  assert counts['train'] > counts['eval'] > 0
  print(f'portable run: {seconds:.0f} s, {workers} workers, {counts}',
        file=sys.stderr)
