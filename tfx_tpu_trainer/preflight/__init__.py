"""The TPU preflight: checks on CPU that a model_fn would run on a TPU.

  checks       runs the train, eval and export steps as a TPU would (entry
               points `run_preflight` and `check_before_training`).
  cpu_graphs   the executor's check off TPU: the eval and export graphs
               TPUEstimator builds on CPU, built before training.
  graph        the static graph checks and the XLA compile of one step.
  spec_checks  what the model_fn returned against what TPUEstimator takes.
  sample       the sample batch a preflight feeds.
  report       findings (as data; text rendered last) and the report.
"""
