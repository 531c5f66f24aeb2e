"""From a user module to the model_fn TPUEstimator runs.

  dispatch           `model_fn_for_module`: the model_fn of any kind of module.
  checked            wraps a module's own model_fn and checks what it returns.
  keras_adapter      a compiled Keras model as a TPU model_fn.
  keras_compile      reads a Keras model's compile settings (optimizer, loss,
                     metrics) into their TPU counterparts.
  estimator_adapter  an Estimator model_fn (EstimatorSpec) as a TPU model_fn.
  stock_trainer      a stock-Trainer module's (`trainer_fn`) estimator, adapted.
  patches            patches of TensorFlow scoped to one call in one thread.
"""
