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
COPY tfx_tpu_trainer_cli ./tfx_tpu_trainer_cli
# The base image already holds TFX, TF and Beam at the pinned versions;
# --no-deps keeps them exactly as they are. Editable, so the bundled
# pipelines find components/ beside them.
RUN python -m pip install --no-cache-dir --no-deps -e . \
    && python -c "import tfx_tpu_trainer.executor"
# Module files import their siblings (taxi_features) when loaded by path.
ENV PYTHONPATH=/tfx-tpu-trainer/components
