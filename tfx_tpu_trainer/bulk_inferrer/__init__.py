"""TPUBulkInferrer: TFX's BulkInferrer that scores on the TPU the model was trained for."""
