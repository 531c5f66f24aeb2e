"""The compiled KFP v1 taxi pipeline runs, step by step, as its pods would.

`tfx-tpu-trainer compile` writes the Argo workflow; every step's container
command, arguments and environment are then executed exactly as compiled
(`tests/fixtures/argo_pod.py`: Argo's substitutions, the pod's fieldRefs, the
repository at /tfx-tpu-trainer through a mount namespace and chroot, one pod
root per step) in DAG order, against a real MLMD store behind a gRPC server
(`tests/fixtures/mlmd_grpc_server.py`) that the `metadata-grpc-configmap`
points at.

The run and its checks are `tests/fixtures/taxi_kfp_v1_run.py`'s: the CPU
compile's data steps, the TPU compile's trainer step failing with "no TPU",
the CPU trainer as Argo's retry of it, the Evaluator and Pusher, and the
trainer retried again. Here each Beam step runs one worker process
(`--beam-arg=--direct_num_workers=1` in both compiles).
tests/kubeflow/test_built_image.py runs these same steps in the built image
(`make test-image`), with Beam's default worker count (one per core), the
same checks and the image's own; where an image is named for them
(TFX_TPU_TRAINER_TEST_IMAGE, as .ci/run names the one it builds before it
runs both) and Docker runs, this stand-in for the image is skipped.
(A user's pipeline: test_compiled_user_pipeline_runs.py, a module of its own
so that the two can run in different xdist processes.)
"""

import pytest

from tests.fixtures import argo_pod
from tests.fixtures import compiled_runs
from tests.fixtures import docker_pod
from tests.fixtures import taxi_kfp_v1_run
from tests.fixtures.compiled_runs import data_root  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import mlmd_server  # pylint: disable=unused-import
from tests.fixtures.compiled_runs import work  # pylint: disable=unused-import

_IN_THE_IMAGE = docker_pod.steps_run_in_the_image()

pytestmark = compiled_runs.MARKS + [
    pytest.mark.skipif(bool(_IN_THE_IMAGE), reason=_IN_THE_IMAGE)]

# Each Beam worker process imports TensorFlow and TFX (about 6 s of CPU).
ONE_WORKER = '--beam-arg=--direct_num_workers=1'


@pytest.fixture(scope='module')
def taxi_run(work, data_root, mlmd_server):
  """The CPU compile's data steps, then the TPU compile's trainer step."""
  return taxi_kfp_v1_run.start(work, data_root, mlmd_server,
                               argo_pod.run_step_logged, [ONE_WORKER])


def test_tpu_trainer_step_fails_with_no_tpu(taxi_run):
  taxi_kfp_v1_run.check_tpu_compile(taxi_run)


def test_cpu_pipeline_runs_every_step_and_retried_trainers_exit_0(
    work, taxi_run):
  taxi_kfp_v1_run.check_cpu_steps_and_retries(work, taxi_run)
