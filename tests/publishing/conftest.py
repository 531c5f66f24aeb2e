"""Fixtures shared by the tests of the trainer step's KFP UI outputs."""

import pytest

from tfx_tpu_trainer.publishing import step_outputs as kfp_outputs


@pytest.fixture
def paths(tmp_path):
  """Where the KFP v1 entrypoint reads the step's metrics and UI metadata."""
  return kfp_outputs.KfpOutputPaths(
      metrics_path=str(tmp_path / 'mlpipeline-metrics.json'),
      ui_metadata_path=str(tmp_path / 'mlpipeline-ui-metadata.json'))
