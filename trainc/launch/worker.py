"""The trainc worker: what every rank runs (``python -m trainc.launch.worker --plan plan.json``).

It reads plan.json only (no compiler imports), initialises torch.distributed from the torchrun
environment (NCCL on CUDA, gloo on CPU), Megatron-Core's parallel_state with exactly the plan's
tp/pp/vpp/cp/ep/etp (order tp-cp-ep-dp-pp), builds the GPTModel chunks, wraps them in Megatron DDP
and the Megatron optimizer (distributed optimizer when the plan says so), and trains with
Megatron-Core's schedules (:mod:`trainc.launch.engines.megatron`); engine=deepspeed goes through
:mod:`trainc.launch.engines.deepspeed`, engine=fsdp (FSDP2 on a DeviceMesh) through
:mod:`trainc.launch.engines.fsdp`. This module only parses the command line and dispatches;
what the engines share is :mod:`trainc.launch.runtime`.

Log lines (stdout): ``trainc-worker: ...`` for setup (every override the worker applies is one
``trainc-worker: override: ...`` line), ``trainc-worker: groups rank=R tp=[...] ...`` once per
rank, and per optimizer step on the last pipeline stage's first rank (the contract)::

    step=<n> loss=<float> grad_norm=<float> step_time_s=<float> tokens_per_s=<float> lr=<float>

``--reference`` runs the same model and data on one process with every parallel degree 1 (the
layout-equivalence baseline the end-to-end tests compare against).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from trainc.launch import runtime

EXIT_OK = 0

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The worker's command line (the generated scripts pass ``--plan``; the rest is optional)."""
    p = argparse.ArgumentParser(prog="trainc.launch.worker", description=__doc__.split("\n")[0])
    p.add_argument("--plan", required=True, help="plan.json written by trainc compile")
    p.add_argument("--device", choices=("cuda", "cpu"), help="default: spec.launch.device")
    p.add_argument("--shrink", action="store_true", default=None,
                   help="tiny dimensions, same layout (default: spec.launch.shrink)")
    p.add_argument("--train-iters", type=int, help="default: spec.training.train_iters")
    p.add_argument("--save", help="checkpoint directory (default: spec.launch.save_dir, else "
                   "<plan dir>/checkpoints)")
    p.add_argument("--save-interval", type=int, help="default: spec.launch.save_interval")
    p.add_argument("--load", help="resume from the latest checkpoint in this directory; 'auto': "
                   "the checkpoint directory (--save), when it holds one (launch.requeue)")
    p.add_argument("--data-path", help="indexed dataset prefix (default: spec.launch.data_path, "
                   "else Megatron-Core's mock dataset)")
    p.add_argument("--lr", type=float, help="default: spec.training.lr")
    p.add_argument("--resume-check", type=int, metavar="STEP",
                   help="after training, reload the checkpoint of STEP and replay the remaining "
                   "steps, logging them as 'resume-check step=...' (a resume self-test)")
    p.add_argument("--reference", action="store_true",
                   help="one process, every parallel degree 1, same model and data")
    p.add_argument("--timeout-s", type=float,
                   help="collective timeout (default 120 on cpu, 1800 on cuda)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; returns the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    # TRAINC_WORKER_ARGS: extra worker flags through the environment (the generated scripts
    # forward their own arguments too); command-line flags win, since they come last.
    extra = shlex.split(os.environ.get("TRAINC_WORKER_ARGS", ""))
    args = parse_args([*extra, *argv])
    s = runtime.setup(args)
    with runtime.distributed(s):
        # the engine's loop (imported here: torch, Megatron-Core, DeepSpeed load only now)
        if s.engine == "deepspeed":
            from trainc.launch.engines import deepspeed

            deepspeed.run(s)
        elif s.engine == "fsdp":
            from trainc.launch.engines import fsdp

            fsdp.run(s)
        else:
            from trainc.launch.engines import megatron

            megatron.run(s)
    runtime.log("done")
    return EXIT_OK


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown: with torch, Megatron and gloo loaded it spends
    # seconds collecting objects after the job is over (the process group is already destroyed,
    # checkpoints are closed files, and the streams are flushed here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
