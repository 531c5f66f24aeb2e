"""Reading the pipeline's examples: schemas, input functions and the checks of the first batches."""
