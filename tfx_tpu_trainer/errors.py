"""The base of the errors TPUTrainer raises for bad input."""


class TPUTrainerError(ValueError):
  """Bad input to TPUTrainer: the message says what, where and what to do."""
