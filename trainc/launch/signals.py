"""SIGUSR1 (Slurm's ``--signal`` before the time limit): save a checkpoint after the current step
and stop cleanly. The generated scripts ignore USR1 in the shell and torchrun; the worker handles
it here (a separate module so ``python -m trainc.launch.worker`` and its importers share the flag).
"""

from __future__ import annotations

import signal

_requested = False


def _handler(signum, frame):  # type: ignore[no-untyped-def]
    global _requested
    _requested = True


def install() -> None:
    """Handle SIGUSR1 (where the platform has it)."""
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, _handler)


def stop_requested() -> bool:
    """True once SIGUSR1 arrived."""
    return _requested


#: Written into the checkpoint folder when the worker stopped on SIGUSR1; sbatch.sh (with
#: launch.requeue) requeues the job when it finds it.
STOPPED_MARKER = ".stopped-by-signal"


def mark_stopped(save_dir: str, rank: int) -> None:
    """Rank 0 leaves :data:`STOPPED_MARKER` in ``save_dir`` after the SIGUSR1 checkpoint."""
    import os

    if rank == 0:
        os.makedirs(save_dir, exist_ok=True)
        with open(os.path.join(save_dir, STOPPED_MARKER), "w") as f:
            f.write("stopped by SIGUSR1 after its checkpoint\n")

