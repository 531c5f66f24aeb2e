# Image for Kubeflow steps: TFX 1.15.1 plus this package, so the TPUTrainer
# executor class (ExecutorClassSpec) imports inside the cluster, and the
# bundled module files exist at the path the compiled pipeline names when
# UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES=1 is used at compile time.
FROM tensorflow/tfx:1.15.1

WORKDIR /tfx-tpu-trainer
COPY setup.py README.md ./
COPY tfx_tpu_trainer ./tfx_tpu_trainer
COPY components ./components
COPY pipelines ./pipelines
# The base image already holds TFX, TF and Beam at the pinned versions;
# --no-deps keeps them exactly as they are.
RUN python -m pip install --no-cache-dir --no-deps . \
    && python -c "import tfx_tpu_trainer.executor"
ENV PYTHONPATH=/tfx-tpu-trainer
