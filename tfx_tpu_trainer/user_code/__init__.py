"""User code: named by import path (`run_fn=`/`trainer_fn=`), packaged as wheels."""
