"""A user's compiled KFP v1 pipeline runs, step by step, as its pods would.

examples/penguin_tpu, copied out of the repository, through `compile
--pipeline --no-use-tpu`: TFX packages its module file under the pipeline
root while compiling; every step (tests/fixtures/argo_pod.py, as in
test_compiled_pipeline_runs.py) exits 0 and the model is pushed. Beam runs
in worker processes as by default (`multi_processing`), one per step
(`--beam-arg=--direct_num_workers=1`; the default, one per core, runs in
the taxi KFP v1 run): each worker installs the module's wheel.
test_built_image_user_pipeline.py runs these same compiled steps in the
built image (`make test-image`) with the same checks
(`compiled_runs.check_user_pipeline_run`); where an image is named for them
and Docker runs (docker_pod.steps_run_in_the_image), this stand-in is
skipped.
"""

import os

import pytest

from tests.fixtures import argo_pod
from tests.fixtures import compiled_runs
from tests.fixtures import docker_pod
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import

_IN_THE_IMAGE = docker_pod.steps_run_in_the_image()

pytestmark = compiled_runs.MARKS + [
    pytest.mark.skipif(bool(_IN_THE_IMAGE), reason=_IN_THE_IMAGE)]


def test_user_pipeline_outside_the_repo_runs_every_step_to_a_pushed_model(
    work, mlmd_server, monkeypatch):
  """examples/penguin_tpu, copied out of the repository, through
  `compile --pipeline`: TFX packages its module file as a wheel under the
  pipeline root, and every step, run as its pod would, installs it."""
  workflow, root = compiled_runs.compile_user_pipeline(
      work, monkeypatch, 'user')
  assert os.listdir(root / '_wheels')  # TFX's packaging, at compile time.
  run = compiled_runs.workflow_run(work, workflow, mlmd_server, 'user')
  results = argo_pod.run_all(run)
  for result in results:
    assert result.returncode == 0, (
        f'{result.task}:\n{compiled_runs.tail(result)}')
  compiled_runs.check_user_pipeline_run(results, root)
