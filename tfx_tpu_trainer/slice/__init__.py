"""Training on several hosts: a TPU slice's driver, its workers and their pods, and TF_CONFIG clusters."""
