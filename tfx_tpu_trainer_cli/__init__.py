"""The `tfx-tpu-trainer` command line: above the library and the pipelines."""
