"""The TPU: its facts, runtimes, checks and worker servers."""
