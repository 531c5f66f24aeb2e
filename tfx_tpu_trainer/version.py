"""The version of tfx-tpu-trainer: one source, read by setup.py and the CLI."""

__version__ = '0.1.0'
