"""``trainc run OUTDIR``: start the generated ``torchrun.sh`` on this machine (the checks and the
launch are in :mod:`trainc.launch.local`)."""

from __future__ import annotations

import argparse


def _run(args: argparse.Namespace) -> int:
    """Start OUTDIR/torchrun.sh here with this trainc's interpreter; return its exit code."""
    from trainc.launch.local import run

    return run(args.outdir, args.worker_args, node_rank=args.node_rank,
               master_addr=args.master_addr)
