"""The TPU preflight: checks on CPU that a model_fn would run on a TPU.

  checks  runs the train, eval and export steps as a TPU would (entry points
          `run_preflight` and `check_before_training`).
  graph   the static graph checks and the XLA compile of one step.
  xla_errors  the user's line and the meaning of an XLA error.
  sample  the sample batch a preflight feeds.
  report  findings and the report.
"""
