"""Kubeflow Pipelines support: TPU scheduling and the trainer step's outputs.

  options       the compile choices (runners, TPU styles, default image);
                imports nothing heavy, so the command line can use it.
  scheduling    TPU resources, node selectors and tolerations on the trainer
                step (KFP v1 operator functions, KFP v2 resource specs).
  step_outputs  the trainer step's KFP UI outputs and its entrypoint wrapper.
"""
