"""Benchmark harness: TPUTrainer vs the stock TFX Trainer vs raw input."""
