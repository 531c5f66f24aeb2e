"""tfx-tpu-trainer."""
