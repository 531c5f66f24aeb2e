"""Kubeflow Pipelines support: TPU scheduling and the trainer step's outputs."""
