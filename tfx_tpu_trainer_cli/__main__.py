"""`python -m tfx_tpu_trainer_cli`: the `tfx-tpu-trainer` command."""

import sys

from tfx_tpu_trainer_cli import main

sys.exit(main.main())
