"""The `custom_config` keys of TPUTrainer, declared in groups by concern."""
