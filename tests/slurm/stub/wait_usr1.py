"""Stands in for torchrun: waits for SIGUSR1 like trainc's worker does (a Python handler, which
overrides the SIG_IGN that torchrun.sh's `trap '' USR1` passes down), then exits 0.

Prints ``usr1: node=I after_s=T`` when the signal came, ``usr1: node=I none`` if it did not
within TRAINC_STUB_WAIT_S seconds (exit 1).
"""

import os
import signal
import sys
import time

got: list[float] = []
t0 = time.monotonic()
signal.signal(signal.SIGUSR1, lambda *_: got.append(time.monotonic() - t0))
node = os.environ.get("SLURM_NODEID")
print(f"usr1: node={node} waiting", flush=True)
deadline = t0 + float(os.environ.get("TRAINC_STUB_WAIT_S", "150"))
while not got and time.monotonic() < deadline:
    time.sleep(0.2)
print(f"usr1: node={node} " + (f"after_s={got[0]:.0f}" if got else "none"), flush=True)
sys.exit(0 if got else 1)
