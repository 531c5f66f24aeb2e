"""The `[i/n] Component done in Ns` lines of a local run, cached ones labelled."""

import os

from absl import logging as absl_logging
from tfx import v1 as tfx
from tfx.dsl.component.experimental.annotations import OutputArtifact
from tfx.dsl.component.experimental.annotations import Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.orchestration import metadata
from tfx.types import standard_artifacts

from tfx_tpu_trainer_cli import local_runner


@component
def WriteText(text: Parameter[str],  # pylint: disable=invalid-name
              written: OutputArtifact[standard_artifacts.String]):
  """A component with one output: `text`."""
  written.value = text


def _run(root, enable_cache=True):
  """Runs the one-component pipeline; returns the progress lines."""
  connection = metadata.sqlite_metadata_connection_config(
      os.path.join(root, 'metadata.db'))
  pipeline = tfx.dsl.Pipeline(
      pipeline_name='cached', pipeline_root=os.path.join(root, 'root'),
      components=[WriteText(text='hello')], enable_cache=enable_cache,
      metadata_connection_config=connection)
  lines = []
  progress = local_runner.ComponentProgress(
      [c.id for c in pipeline.components],
      lambda line, **_: lines.append(line),
      lambda execution_id: local_runner.reused_execution(connection,
                                                         execution_id))
  absl_logging.set_verbosity(absl_logging.INFO)
  logger = absl_logging.get_absl_logger()
  logger.addFilter(progress)
  try:
    tfx.orchestration.LocalDagRunner().run(pipeline)
  finally:
    logger.removeFilter(progress)
  return lines


def test_a_cached_component_is_labelled_with_the_execution_it_reused(
    tmp_path):
  first = _run(str(tmp_path))
  assert first[0] == '[1/1] WriteText ...'
  assert first[1].startswith('[1/1] WriteText done in ')
  assert 'cached' not in first[1]
  second = _run(str(tmp_path))
  assert second[1].startswith('[1/1] WriteText done in ')
  # The first run's execution (id 1) made the outputs the second reused.
  assert second[1].endswith('s (cached: the outputs of execution 1)')
  connection = metadata.sqlite_metadata_connection_config(
      str(tmp_path / 'metadata.db'))
  assert local_runner.reused_execution(connection, 2) == 1
  assert local_runner.reused_execution(connection, 1) is None


def test_without_cache_nothing_is_labelled(tmp_path):
  _run(str(tmp_path), enable_cache=False)
  second = _run(str(tmp_path), enable_cache=False)
  assert 'cached' not in second[1]
