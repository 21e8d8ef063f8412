"""The trainc worker: what every rank runs (``python -m trainc.launch.worker --plan plan.json``).

It reads plan.json only (no compiler imports), initialises torch.distributed from the torchrun
environment (NCCL on CUDA, gloo on CPU), Megatron-Core's parallel_state with exactly the plan's
tp/pp/vpp/cp/ep/etp (order tp-cp-ep-dp-pp), builds the GPTModel chunks, wraps them in Megatron DDP
and the Megatron optimizer (distributed optimizer when the plan says so), and trains with
Megatron-Core's schedules. engine=deepspeed goes through :mod:`trainc.launch.ds_engine`.

Log lines (stdout): ``trainc-worker: ...`` for setup (every override the worker applies is one
``trainc-worker: override: ...`` line), ``trainc-worker: groups rank=R tp=[...] ...`` once per
rank, and per optimizer step on the last pipeline stage's first rank (the contract)::

    step=<n> loss=<float> grad_norm=<float> step_time_s=<float> tokens_per_s=<float> lr=<float>

``--reference`` runs the same model and data on one process with every parallel degree 1 (the
layout-equivalence baseline the end-to-end tests compare against).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
from typing import Any

EXIT_OK = 0


def log(msg: str, all_ranks: bool = False) -> None:
    """One setup line on stdout, prefixed and flushed (by global rank 0 unless ``all_ranks``)."""
    if all_ranks or os.environ.get("RANK", "0") == "0":
        emit(f"trainc-worker: {msg}")


def emit(line: str) -> None:
    """Write one line with a single write() (atomic on a pipe shared by the ranks: print() writes
    the text and the newline separately, so two ranks' lines could interleave)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def override(msg: str) -> None:
    """Announce a setting the worker changed from what the plan says."""
    log(f"override: {msg}")


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


class Settings:
    """Everything the run needs, read from plan.json (the compiler filled every value: no
    fallbacks here) and the command line (which may override the device, iterations, lr and
    paths, each announced)."""

    def __init__(self, plan: dict[str, Any], args: argparse.Namespace, plan_path: str) -> None:
        spec, d = plan["spec"], plan["derived"]
        launch, train = spec["launch"], spec["training"]
        self.plan = plan
        self.plan_path = plan_path
        self.engine: str = spec["engine"]
        self.device: str = args.device or launch["device"]
        self.shrink = bool(args.shrink if args.shrink is not None else launch["shrink"])
        self.train_iters: int = args.train_iters or train["train_iters"]
        self.lr_override: float | None = args.lr
        self.save: str = args.save or launch["save_dir"] or os.path.join(
            os.path.dirname(os.path.abspath(plan_path)), "checkpoints")
        self.save_interval: int = args.save_interval or launch["save_interval"]
        self.load: str | None = self.save if args.load == "auto" else args.load
        self.data_path: str | None = args.data_path or launch["data_path"]
        self.log_interval: int = launch["log_interval"]
        self.seed: int = train["seed"]
        self.reference: bool = args.reference
        self.resume_check: int | None = args.resume_check
        self.precision: str = train["precision"]
        self.micro_batch_size: int = train["micro_batch_size"]
        self.global_batch_size: int = train["global_batch_size"]
        self.layout: dict[str, Any] = {k: int(d[k]) for k in ("tp", "pp", "vpp", "cp", "ep", "dp",
                                                              "etp")}
        self.layout["sp"] = bool(d["sequence_parallel"])
        self.num_microbatches: int = d["num_microbatches"]
        self.distributed_optimizer: bool = bool(d["distributed_optimizer"])
        self.timeout_s: float = args.timeout_s or (120.0 if self.device == "cpu" else 1800.0)
        if self.reference:  # same model and data on one rank
            self.num_microbatches = self.num_microbatches * self.layout["dp"]
            self.layout = {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "dp": 1, "etp": 1,
                           "sp": False}
            self.distributed_optimizer = False


def check_runner(plan: dict[str, Any]) -> None:
    """Refuse a plan the engine's runner cannot run (the same table the compiler's rules use,
    :mod:`trainc.capabilities`; trainc compile rejects such a spec, so this only catches a
    hand-edited plan.json)."""
    from trainc.capabilities import capability, unsupported_axes
    from trainc.schemas import Engine, Entrypoint

    d = plan["derived"]
    cap = capability(Engine(plan["spec"]["engine"]), Entrypoint.trainc)
    assert cap is not None
    bad = unsupported_axes(cap, {k: int(d[k]) for k in ("tp", "pp", "vpp", "cp", "ep", "dp")})
    if bad:
        raise SystemExit(f"trainc-worker: {cap.runner} cannot split "
                         + ", ".join(f"{a}={d[a]}" for a in bad) + f": {cap.why}")


def init_distributed(s: Settings) -> None:
    """torch.distributed from the torchrun environment (single process when absent)."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    backend = "gloo" if s.device == "cpu" else "nccl"
    if s.device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=s.timeout_s))
    world = dist.get_world_size()
    expected = 1 if s.reference else s.plan["derived"]["world_size"]
    if world != expected:
        raise SystemExit(f"trainc-worker: world size {world} != the plan's {expected} "
                         "(start the job with the generated torchrun.sh/sbatch.sh)")
    log(f"distributed backend={backend} world_size={world} rank={dist.get_rank()} "
        f"timeout_s={s.timeout_s:g}")


def init_parallel_state(s: Settings) -> None:
    """Megatron-Core parallel_state with the plan's degrees; logs this rank's groups."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    L = s.layout
    ps.initialize_model_parallel(
        tensor_model_parallel_size=L["tp"], pipeline_model_parallel_size=L["pp"],
        virtual_pipeline_model_parallel_size=L["vpp"] if L["vpp"] > 1 else None,
        context_parallel_size=L["cp"], expert_model_parallel_size=L["ep"],
        expert_tensor_parallel_size=L["etp"],
        distributed_timeout_minutes=max(1, int(s.timeout_s // 60)), order="tp-cp-ep-dp-pp")
    groups = {
        "tp": ps.get_tensor_model_parallel_group(), "pp": ps.get_pipeline_model_parallel_group(),
        "dp": ps.get_data_parallel_group(), "cp": ps.get_context_parallel_group(),
        "dp_cp": ps.get_data_parallel_group(with_context_parallel=True),
        "ep": ps.get_expert_model_parallel_group(),
        "etp": ps.get_expert_tensor_parallel_group(),
        "edp": ps.get_expert_data_parallel_group(),
    }
    parts = [f"{k}={json.dumps(dist.get_process_group_ranks(g), separators=(',', ':'))}"
             for k, g in groups.items()]
    log(f"groups rank={dist.get_rank()} " + " ".join(parts), all_ranks=True)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; returns the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    # TRAINC_WORKER_ARGS: extra worker flags through the environment (the generated scripts
    # forward their own arguments too); command-line flags win, since they come last.
    extra = shlex.split(os.environ.get("TRAINC_WORKER_ARGS", ""))
    args = parse_args([*extra, *argv])
    from trainc.launch import signals

    signals.install()
    with open(args.plan) as f:
        plan = json.load(f)
    check_runner(plan)
    s = Settings(plan, args, args.plan)
    if s.device == "cpu":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        if s.engine == "deepspeed":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
    log(f"plan={os.path.abspath(args.plan)} engine={s.engine} device={s.device} "
        f"shrink={s.shrink} reference={s.reference} train_iters={s.train_iters}")
    import torch

    if s.device == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        from trainc.launch import cpu_compat

        cpu_compat.apply()
    init_distributed(s)
    try:
        if s.engine == "deepspeed":
            from trainc.launch import ds_engine

            ds_engine.run(s)
        else:
            from trainc.launch import train

            train.run(s)
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                from megatron.core import parallel_state as ps

                ps.destroy_model_parallel()
            except Exception as e:  # shutdown must not hide the real error
                log(f"destroy_model_parallel failed: {e}")
            dist.destroy_process_group()
    log("done")
    return EXIT_OK


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's teardown: with torch, Megatron and gloo loaded it spends
    # seconds collecting objects after the job is over (the process group is already destroyed,
    # checkpoints are closed files, and the streams are flushed here).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
