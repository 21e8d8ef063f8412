"""``trainc run OUTDIR``: start the generated ``torchrun.sh`` on this machine."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from trainc.cli._common import EXIT_ENV


def _run(args: argparse.Namespace) -> int:
    """Start OUTDIR/torchrun.sh here; its output streams through; return its exit code.

    Extra worker flags go through the environment (``TRAINC_WORKER_ARGS``, which the worker
    reads), so the generated script runs unchanged. Exit 4 when the script is missing or cannot
    be started (the environment refused).
    """
    script = os.path.join(args.outdir, "torchrun.sh")
    if not os.path.isfile(script):
        print(f"trainc run: {script}: not found (run `trainc compile SPEC -o {args.outdir}` "
              "first)", file=sys.stderr)
        return EXIT_ENV
    extra = [a for a in args.worker_args if a != "--"]
    env = dict(os.environ)
    if extra:
        env["TRAINC_WORKER_ARGS"] = " ".join(
            x for x in (env.get("TRAINC_WORKER_ARGS", ""), shlex.join(extra)) if x)
    try:
        proc = subprocess.Popen(["bash", script], env=env)
    except OSError as e:
        print(f"trainc run: cannot start {script}: {e}", file=sys.stderr)
        return EXIT_ENV
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 130
