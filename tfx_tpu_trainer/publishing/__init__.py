"""What a run hands on: the dual-tag SavedModel, its serving input, and the metrics."""
