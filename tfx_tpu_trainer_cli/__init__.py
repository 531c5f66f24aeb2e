"""The `tfx-tpu-trainer` command line: above the library and the pipelines.

It imports `tfx_tpu_trainer` (the library) and `pipelines` (the bundled taxi
pipelines); neither imports it.
"""
