"""The Kubeflow compile choices, defined once for the library and the CLI."""

__all__ = ['RUNNERS', 'TPU_STYLES', 'DEFAULT_IMAGE']

RUNNERS = ('kubeflow', 'kubeflow_v2')
TPU_STYLES = ('tpu-vm', 'tpu-node')
# A placeholder: build the Dockerfile's image, push it, and pass its name.
DEFAULT_IMAGE = 'gcr.io/YOUR_PROJECT/tfx-tpu-trainer:latest'
