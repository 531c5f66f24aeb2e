"""`python -m tfx_tpu_trainer.tpu.worker`: the earlier name of slice/worker.py.

Hosts set up by hand before the slice had its folder run this command; it
runs the same worker server.
"""

from tfx_tpu_trainer.slice import worker

if __name__ == '__main__':
  worker.main()
