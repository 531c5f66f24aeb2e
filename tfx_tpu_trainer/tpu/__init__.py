"""`tpu-check`'s library: does this machine's TPU run the trainer, and with which runtime."""
