"""A user's pipeline, compiled with `--pipeline`, runs every step in the
built image (test_built_image.py says how a step runs there).

examples/penguin_tpu, copied out of the repository: TFX packages its module
file as a wheel under the pipeline root while compiling, and each step
installs it, as the image's user. One Beam worker process per step
(`--beam-arg=--direct_num_workers=1`). The same steps and checks in chroot
pods, in `make test`: test_compiled_user_pipeline_runs.py.
"""

import os

from tests.fixtures import compiled_runs
from tests.fixtures import docker_pod
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import
from tests.fixtures.docker_pod import built_image  # pylint: disable=unused-import

pytestmark = docker_pod.image_marks()


def test_user_pipeline_runs_every_step_in_the_image_to_a_pushed_model(
    image, work, mlmd_server, monkeypatch):
  """examples/penguin_tpu, copied out of the repository, compiled with
  `--pipeline`: each step in the image installs the module wheel that TFX
  packaged under the pipeline root."""
  workflow, root = compiled_runs.compile_user_pipeline(
      work, monkeypatch, 'user_image')
  assert os.listdir(root / '_wheels')  # TFX's packaging, at compile time.
  os.chmod(work, 0o755)
  # The wheel TFX packaged, the data.
  docker_pod.shared_with_the_pods(root.parent)
  run = compiled_runs.workflow_run(work, workflow, mlmd_server, 'user-image')
  run.base_env = {}
  results = []
  for task in run.dag_tasks():
    results.append(docker_pod.run_step(run, task, [str(work)], image=image))
    assert results[-1].returncode == 0, (
        f'{task["name"]}:\n{compiled_runs.tail(results[-1])}')
  model = compiled_runs.check_user_pipeline_run(results, root)
  assert os.stat(model).st_uid == docker_pod.IMAGE_UID
