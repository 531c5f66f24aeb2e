"""Pipeline definitions and runners of tfx-tpu-trainer."""
