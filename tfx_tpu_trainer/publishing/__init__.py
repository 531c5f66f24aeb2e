"""What a run hands on: the dual-tag SavedModel, its serving input, the metrics and the training report."""
