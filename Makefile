# The two commands of the README: `make run` (main job) and `make test`.
# Both create and fill .venv on first use (scripts/setup_env.sh).

VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# `make test` and `make test-fast` run the suite in TEST_WORKERS processes
# (pytest-xdist; one more than the 2-core machine's cores: about a tenth of
# the suite's time is spent waiting, on containers, job servers and the
# slice rehearsals' deadlines, and a third process fills it). Each test file
# stays in one process (--dist loadfile), so a module's fixtures are built
# once; the session data fixtures are built once per run
# (tests/fixtures/run_once.py).
# Files are handed out in the order tests/conftest.py gives them (the files
# of `heavy` tests first), not xdist's most-tests-first, so that no minutes-
# long file starts last. TEST_WORKERS=0 runs the suite in this process alone.
TEST_WORKERS ?= 3
XDIST_ARGS := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The tests that run steps in the built image (`image`: tests/kubeflow/
# test_built_image*.py, test_beam_docker_worker.py) are `make test-image`'s:
# it builds the image (Docker's cache) and runs them; .ci/run runs it after
# `make test`. `make test` runs the same compiled steps in chroot pods
# unless TFX_TPU_TRAINER_TEST_IMAGE names an image and Docker runs (as in
# .ci/run): then test-image runs them in that image, once.
TEST_IMAGE ?= $(or $(TFX_TPU_TRAINER_TEST_IMAGE),tfx-tpu-trainer:test-built-image)
# Every run ends with its SLOWEST slowest test phases (setup, call, teardown:
# a shared fixture's cost shows as its first user's setup) and each test
# file's CPU seconds with the quiet-machine estimate (tests/suite_cost.py).
# PYTEST_ARGS=--durations=0 lists them all.
SLOWEST ?= 30
REPORT_ARGS := --durations=$(SLOWEST)
RUN_ARGS ?=
UV ?= $(shell command -v uv || echo .tools/uv/bin/uv)

.PHONY: env run test test-image test-fast lock docs bench bench-smoke clean image tpu-image

env:
	@bash scripts/setup_env.sh

run: env
	$(VENV)/bin/tfx-tpu-trainer run $(RUN_ARGS)

test: env
	$(PY) -m pytest -m "not image" $(XDIST_ARGS) $(REPORT_ARGS) $(PYTEST_ARGS)

test-image: env
	bash scripts/build_image.sh image $(TEST_IMAGE)
	TFX_TPU_TRAINER_TEST_IMAGE=$(TEST_IMAGE) $(PY) -m pytest -m image \
	  $(XDIST_ARGS) $(REPORT_ARGS) $(PYTEST_ARGS)

test-fast: env
	$(PY) -m pytest -m "not slow" $(XDIST_ARGS) $(REPORT_ARGS) $(PYTEST_ARGS)

# All trainers against each other and each module's compute limit, then the
# scale run (the training split x1/x10/x100, replicas written once under
# --work_dir; one repeat of the comparison took 28 min at load 3-5 on 2
# cores; the default is 2 repeats); bench-smoke:
# the same end to end with --quick, as a test (9 min 50 s at load 1-2; not
# in `make test`: a loaded machine makes it slow, never failing).
bench: env
	$(PY) -m benchmarks.run_benchmark $(BENCH_ARGS)
	$(PY) -m benchmarks.bulk_inference

bench-smoke: env
	TFX_TPU_TRAINER_BENCH_SMOKE=1 $(PY) -m pytest tests/test_benchmark_quick.py $(PYTEST_ARGS)

# Regenerates the fully pinned lock file from setup.py.
lock:
	$(UV) pip compile setup.py --extra test --python-version 3.10 \
	  --python-platform x86_64-manylinux_2_28 -o requirements.lock

# The generated reference: every option of every command, from the parsers
# (tests/cli/test_cli_reference.py fails when the page differs).
docs: env
	$(PY) -m tfx_tpu_trainer_cli.cli_reference > docs/reference/cli.md

# The Kubeflow images: Dockerfile targets, built with Docker
# (docs/guide/kubeflow.md).
# `make image` starts dockerd if needed and, where the Dockerfile's bases
# cannot be pulled, makes local ones (scripts/build_image.sh).
IMAGE ?= tfx-tpu-trainer:latest
TPU_SE_IMAGE ?= tfx-tpu-trainer-tpu-se:latest
TPU_PJRT_IMAGE ?= tfx-tpu-trainer-tpu-pjrt:latest

image:
	bash scripts/build_image.sh image $(IMAGE)

# One image per TPU runtime (docs/guide/tpu_slices.md, "TPU runtimes").
tpu-image:
	docker build --target tpu-se -t $(TPU_SE_IMAGE) .
	docker build --target tpu-pjrt -t $(TPU_PJRT_IMAGE) .

clean:
	rm -rf $(VENV) .tools .pytest_cache
