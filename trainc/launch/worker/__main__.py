"""``python -m trainc.launch.worker --plan plan.json``: what every rank runs (see :mod:`.main`)."""

import os
import sys

from trainc.launch.worker.main import main

code = main()
# Leave without the interpreter's teardown: with torch, Megatron and gloo loaded it spends
# seconds collecting objects after the job is over (the process group is already destroyed,
# checkpoints are closed files, and the streams are flushed here).
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
