"""``trainc run OUTDIR``: start the generated ``torchrun.sh`` on this machine (the checks and the
launch are in :mod:`trainc.launch.host.local`)."""

from __future__ import annotations

import argparse
import sys

#: trainc run's own options, also recognised after OUTDIR (before a ``--``), where argparse's
#: REMAINDER would hand them to the worker.
_OWN = {"--node-rank": "node_rank", "--master-addr": "master_addr"}


def own_options(args: argparse.Namespace) -> list[str]:
    """Move ``--node-rank I`` / ``--master-addr HOST`` written after OUTDIR (and before ``--``)
    from the worker flags to ``args``; returns the remaining worker flags."""
    rest = list(args.worker_args)
    out: list[str] = []
    i = 0
    while i < len(rest):
        item = rest[i]
        if item == "--":
            out += rest[i:]
            break
        name, eq, value = item.partition("=")
        if name in _OWN and (eq or i + 1 < len(rest)):
            if not eq:
                value, i = rest[i + 1], i + 1
            setattr(args, _OWN[name], int(value) if name == "--node-rank" else value)
        else:
            out.append(item)
        i += 1
    return out


def _run(args: argparse.Namespace) -> int:
    """Start OUTDIR/torchrun.sh here with this trainc's interpreter; return its exit code."""
    from trainc.launch.host.local import run

    try:
        worker_args = own_options(args)
    except ValueError:
        print("trainc run: --node-rank takes a node number", file=sys.stderr)
        return 2
    return run(args.outdir, worker_args, node_rank=args.node_rank, master_addr=args.master_addr)
