"""The trainc worker: what every rank runs (``python -m trainc.launch.worker --plan plan.json``).

It reads plan.json only (no compiler imports), initialises torch.distributed from the torchrun
environment (NCCL on CUDA, gloo on CPU), Megatron-Core's parallel_state with exactly the plan's
tp/pp/vpp/cp/ep/etp (order tp-cp-ep-dp-pp), builds the GPTModel chunks, wraps them in Megatron DDP
and the Megatron optimizer (distributed optimizer when the plan says so), and trains with
Megatron-Core's schedules (:mod:`trainc.launch.worker.engines.megatron`); engine=deepspeed goes
through :mod:`trainc.launch.worker.engines.deepspeed`, engine=fsdp (FSDP2 on a DeviceMesh) through
:mod:`trainc.launch.worker.engines.fsdp`. This module only parses the command line and dispatches
through :data:`trainc.launch.WORKER_ENGINES` (the engine's module); what the engines share is
:mod:`trainc.launch.worker.runtime`.

Log lines (stdout): ``trainc-worker: ...`` for setup (every override the worker applies is one
``trainc-worker: override: ...`` line), ``trainc-worker: groups rank=R tp=[...] ...`` once per
rank, and per optimizer step on the last pipeline stage's first rank (the contract, formatted and
parsed by :mod:`trainc.launch.worker.steplog`)::

    step=<n> loss=<float> grad_norm=<float> step_time_s=<float> tokens_per_s=<float> lr=<float>

``--reference`` runs the same model and data on one process with every parallel degree 1 (the
layout-equivalence baseline the end-to-end tests compare against).
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys

from trainc.launch import worker_engine
from trainc.launch.worker import runtime
from trainc.launch.worker_args import parse_args

EXIT_OK = 0


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
        importlib.import_module(worker_engine(s.engine).module).run(s)
    runtime.log("done")
    return EXIT_OK
