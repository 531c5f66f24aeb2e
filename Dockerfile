# Images of the Kubeflow steps, built from this repository (see
# docs/guide/kubeflow.md, "Build and push the images", and
# docs/guide/tpu_slices.md, "TPU runtimes"). Targets:
#
#   image (default)  every step: Python 3.10, exactly requirements.lock (TFX
#                    1.15.1, TF 2.15.1 CPU, Beam 2.59.0, kfp 1.8.22 ...), this
#                    package, the repository at /tfx-tpu-trainer; Beam's SDK
#                    worker boot as entrypoint, so Dataflow can run it as the
#                    SDK container (--beam-arg=--sdk_container_image=...),
#                    and Flink or Spark as the DOCKER environment or the
#                    worker pool (docs/guide/kubeflow.md, "Beam on
#                    Flink or Spark").
#   tpu              the trainer on GKE TPU VMs: the same plus TensorFlow 2.15's
#                    TPU VM build and its libtpu at /lib/libtpu.so, from
#                    Google's Cloud TPU release storage (PyPI's tensorflow-tpu
#                    starts at 2.16, which has no Estimator); no runtime
#                    chosen: the compiled step's environment chooses it.
#   tpu-se           tpu with the StreamExecutor runtime (TPU v4; the
#                    default accelerator's runtime).
#   tpu-pjrt         tpu with the PJRT runtime (TPU v5e, v5p: PJRT only).
#
#   docker build --target image -t IMAGE .            (make image)
#   docker build --target tpu-se -t TPU_SE_IMAGE .    (make tpu-image)
#   docker build --target tpu-pjrt -t TPU_PJRT_IMAGE . (make tpu-image)
#
# `compile` sets the runtime's variables on the trainer step for the
# accelerator's generation (tfx_tpu_trainer/tpu/runtimes.py) and names
# the target to use; `tfx-tpu-trainer tpu-check` in the image says whether
# the runtime it runs is the one the step asked for.
#
# All run as the non-root user tfx (uid 1000). The base is Python itself,
# not tensorflow/tfx:1.15.1, whose package set differs from the lock (TFX's
# own build script notes its TensorFlow is 2.15.0): the lock is what the
# tests ran.

# The bases, as build arguments: a machine that cannot pull them passes
# locally made ones (scripts/build_image.sh, docs/guide/kubeflow.md,
# "Building the image where nothing can be pulled").
ARG PYTHON_IMAGE=python:3.10.13-slim-bookworm
ARG BEAM_SDK_IMAGE=apache/beam_python3.10_sdk:2.59.0
FROM ${BEAM_SDK_IMAGE} AS beam-sdk

# The repository's files the image holds, gathered in one layer (under the
# vfs storage driver every layer is a full copy of the file system below it).
FROM scratch AS source
WORKDIR /tfx-tpu-trainer
COPY setup.py README.md ./
COPY tfx_tpu_trainer ./tfx_tpu_trainer
COPY tfx_tpu_trainer_cli ./tfx_tpu_trainer_cli
COPY pipelines ./pipelines
COPY components ./components

FROM ${PYTHON_IMAGE} AS image
ARG USER_UID=1000
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The steps run as tfx. KFP v1 reads a step's UI outputs at /, where tfx may
# not create files: they exist, writable by tfx (TFX's entrypoint and the
# trainer's wrapper write them in place).
RUN useradd --uid "${USER_UID}" --create-home --home-dir /home/tfx tfx \
    && touch /mlpipeline-ui-metadata.json /mlpipeline-metrics.json \
    && chown tfx /mlpipeline-ui-metadata.json /mlpipeline-metrics.json
WORKDIR /tfx-tpu-trainer
# pip's settings of the building machine (index, CA bundle), if any: build
# arguments, so they are not in the image's environment.
ARG PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_CERT
# The locked set, as tested; --no-deps installs exactly these versions.
# pyfarmhash (TFX's) is an sdist with a C++ extension: the compiler is
# there for this layer only.
COPY requirements.lock ./
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && python -m pip install --no-cache-dir --no-deps -r requirements.lock \
    && apt-get purge -y --auto-remove g++ \
    && rm -rf /var/lib/apt/lists/*
COPY --from=source /tfx-tpu-trainer ./
# Editable, so the bundled pipelines find components/ beside them.
RUN python -m pip install --no-cache-dir --no-deps -e . \
    && python -c "import tfx_tpu_trainer.executor"
# Beam's SDK container boot, after the packages (a new boot keeps their
# layers). Boot makes a venv per worker under /opt/apache/beam-venv (boot.go's
# setupVenv), which the non-root user must be able to create.
COPY --from=beam-sdk /opt/apache/beam /opt/apache/beam
RUN mkdir /opt/apache/beam-venv && chown "${USER_UID}" /opt/apache/beam-venv
# Module files import their siblings (taxi_features), and Transform names
# its preprocessing_fn by import path (taxi_preprocessing.preprocessing_fn).
# The compiled pipelines set the same PYTHONPATH on every step.
ENV PYTHONPATH=/tfx-tpu-trainer/components
USER ${USER_UID}
ENTRYPOINT ["/opt/apache/beam/boot"]

FROM image AS tpu
ARG USER_UID=1000
# TensorFlow 2.15's TPU VM build. Google's instructions for TF 2.15 in a
# container (Vertex AI, "Training with TPU accelerators") install the 2.15.0
# wheel and libtpu 1.9.0 by these URLs. Google's TPU software versions list
# tpu-vm-tf-2.15.1-se/-pjrt too, but no 2.15.1 wheel URL was found in any
# source, so 2.15.0 stays: it replaces the lock's CPU tensorflow 2.15.1 (same
# minor); tensorflow-estimator 2.15.0 stays.
ARG TF_TPU_VERSION=2.15.0
ARG LIBTPU_VERSION=1.9.0
ARG TF_TPU_WHEEL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/tensorflow/tf-${TF_TPU_VERSION}/tensorflow-${TF_TPU_VERSION}-cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
ARG LIBTPU_URL=https://storage.googleapis.com/cloud-tpu-tpuvm-artifacts/libtpu/${LIBTPU_VERSION}/libtpu.so
ARG PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_CERT
USER 0
# The wheel is pinned by its URL (version in the file name).
# hadolint ignore=DL3013
RUN python -m pip install --no-cache-dir --no-deps --force-reinstall \
      "${TF_TPU_WHEEL}" \
    && python -c "import urllib.request, sys; urllib.request.urlretrieve(sys.argv[1], '/lib/libtpu.so')" "${LIBTPU_URL}" \
    && python -c "import tensorflow as tf, tensorflow_estimator; assert tf.__version__ == '${TF_TPU_VERSION}', tf.__version__"
# A bare libtpu.so records no version; tpu-check reports this one.
ENV TFX_TPU_TRAINER_LIBTPU_VERSION=${LIBTPU_VERSION}
USER ${USER_UID}

# StreamExecutor: TensorFlow loads /lib/libtpu.so itself.
FROM tpu AS tpu-se
ARG USER_UID=1000
ENV TFX_TPU_TRAINER_TPU_RUNTIME=se
USER ${USER_UID}

# PJRT: libtpu as a pluggable device (Google's two variables for TF 2.15 on
# TPU v5e).
FROM tpu AS tpu-pjrt
ARG USER_UID=1000
ENV NEXT_PLUGGABLE_DEVICE_USE_C_API=true \
    TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so \
    TFX_TPU_TRAINER_TPU_RUNTIME=pjrt
USER ${USER_UID}
