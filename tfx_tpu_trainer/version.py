"""The version of tfx-tpu-trainer: one source, read by setup.py and the CLI."""

__all__ = ['__version__']

__version__ = '0.1.0'
