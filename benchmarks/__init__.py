"""Benchmark harness: TPUTrainer vs the stock TFX Trainer vs raw input.

Entry point: `python -m benchmarks.run_benchmark` (`make bench`).
"""
