"""What every engine's training loop shares: the worker's :class:`Settings` (read from plan.json
and the command line by :func:`read_settings`), its log lines, torch.distributed and Megatron-Core
parallel_state set-up, the runner capability check, dims and precision resolution,
checkpoint-or-stop after each step (SIGUSR1, agreed on by every rank) and the ``--resume-check``
replay (:func:`resume_check`). The step line itself is :mod:`trainc.launch.worker.steplog`'s.

This module imports no compiler internals (only :mod:`trainc.capabilities` and
:mod:`trainc.schemas`) and no torch at import time, so ``python -m trainc.launch.worker --help``
stays cheap; the engines (:mod:`trainc.launch.worker.engines.megatron`,
:mod:`trainc.launch.worker.engines.deepspeed`, :mod:`trainc.launch.worker.engines.fsdp`) import it,
never the other way round.

SIGUSR1 (Slurm's ``--signal`` before the time limit): save a checkpoint after the current step
and stop cleanly. The generated scripts ignore USR1 in the shell and torchrun; the worker handles
it here (:func:`install_signal_handler`).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from trainc.launch import STOPPED_MARKER, worker_engine
from trainc.launch.shrink import Dims, full_dims, shrink

_stop_requested = False


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


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the run needs, read from plan.json (the compiler filled every value: no
    fallbacks here) and the command line (which may override the device, iterations, lr and
    paths, each announced) by :func:`read_settings`, the one place that fills it."""

    #: plan.json as read (``spec``, ``derived``, ``engines``, ...).
    plan: dict[str, Any]
    plan_path: str
    #: ``spec.engine`` (``"megatron"``, ``"deepspeed"``, ``"fsdp"``).
    engine: str
    #: ``"cuda"`` or ``"cpu"`` (``--device``, else ``launch.device``).
    device: str
    shrink: bool
    #: Optimizer steps of the run (``--train-iters``, else ``training.train_iters``).
    train_iters: int
    #: The lr decay length this run uses (steps); ``decay_follows``: it differs from the
    #: compiled schedule's because ``--train-iters`` changed the run's length (see
    #: :func:`decay_length`).
    lr_decay_iters: int
    decay_follows: bool
    #: ``--lr`` (the peak learning rate), or None for the plan's.
    lr_override: float | None
    #: Folder the checkpoints are saved to.
    save: str
    save_interval: int
    #: Folder to resume from (``--load``; ``auto``: :attr:`save`; else ``resume.load_dir``).
    load: str | None
    data_path: str | None
    log_interval: int
    seed: int
    #: ``--reference``: one process, every parallel degree 1, the same model and data.
    reference: bool
    #: ``--resume-check STEP``: after training, reload STEP's checkpoint and replay.
    resume_check: int | None
    precision: str
    micro_batch_size: int
    global_batch_size: int
    #: The parallel degrees ``tp pp vpp cp ep dp etp`` (ints) and ``sp`` (bool) this process
    #: runs (all 1 and False for the reference).
    layout: dict[str, Any]
    #: Microbatches per optimizer step on this rank (times dp for the reference).
    num_microbatches: int
    distributed_optimizer: bool
    #: torch.distributed's collective timeout (seconds).
    timeout_s: float


#: The parallel degrees the worker reads from plan.json ``derived`` (and ``sequence_parallel``).
LAYOUT_DEGREES = ("tp", "pp", "vpp", "cp", "ep", "dp", "etp")


def read_settings(plan: dict[str, Any], args: argparse.Namespace, plan_path: str) -> Settings:
    """The run's :class:`Settings` from plan.json (``plan``, read from ``plan_path``) and the
    worker's command line (``args``, :func:`trainc.launch.worker_args.parse_args`): announces
    what the command line changes (:func:`decay_length`). Raises KeyError for a plan.json the
    compiler did not write, SystemExit for a ``--train-iters`` the lr schedule cannot follow."""
    spec, d = plan["spec"], plan["derived"]
    launch, train = spec["launch"], spec["training"]
    engine: str = spec["engine"]
    device: str = args.device or launch["device"]
    shrink_dims = bool(args.shrink if args.shrink is not None else launch["shrink"])
    train_iters: int = args.train_iters or train["train_iters"]
    lr_decay_iters, decay_follows = decay_length(
        train, (plan.get("spec_as_written") or {}).get("training") or {}, args.train_iters
    )
    save: str = (
        args.save
        or launch["save_dir"]
        or os.path.join(os.path.dirname(os.path.abspath(plan_path)), "checkpoints")
    )
    save_interval: int = args.save_interval or launch["save_interval"]
    load: str | None = (
        save if args.load == "auto" else (args.load or (spec.get("resume") or {}).get("load_dir"))
    )
    data_path: str | None = args.data_path or launch["data_path"]
    log_interval: int = launch["log_interval"]
    seed: int = train["seed"]
    precision: str = train["precision"]
    micro_batch_size: int = train["micro_batch_size"]
    global_batch_size: int = train["global_batch_size"]
    layout: dict[str, Any] = {k: int(d[k]) for k in LAYOUT_DEGREES}
    layout["sp"] = bool(d["sequence_parallel"])
    num_microbatches: int = d["num_microbatches"]
    distopt = bool(d["distributed_optimizer"])
    if args.reference:  # same model and data on one rank
        num_microbatches = num_microbatches * layout["dp"]
        layout = {k: 1 for k in LAYOUT_DEGREES} | {"sp": False}
        distopt = False
    return Settings(
        plan=plan,
        plan_path=plan_path,
        engine=engine,
        device=device,
        shrink=shrink_dims,
        train_iters=train_iters,
        lr_decay_iters=lr_decay_iters,
        decay_follows=decay_follows,
        lr_override=args.lr,
        save=save,
        save_interval=save_interval,
        load=load,
        data_path=data_path,
        log_interval=log_interval,
        seed=seed,
        reference=args.reference,
        resume_check=args.resume_check,
        precision=precision,
        micro_batch_size=micro_batch_size,
        global_batch_size=global_batch_size,
        layout=layout,
        num_microbatches=num_microbatches,
        distributed_optimizer=distopt,
        timeout_s=args.timeout_s or (120.0 if device == "cpu" else 1800.0),
    )


def decay_length(
    train: dict[str, Any], written: dict[str, Any], train_iters: int | None
) -> tuple[int, bool]:
    """The lr decay length (steps) for a run of ``train_iters`` steps (``--train-iters``; None:
    the plan's ``training.train_iters``), and whether it differs from the compiled one.

    As in Megatron-LM (``megatron/training/training.py::get_optimizer_param_scheduler``, core_r0.16:
    ``if args.lr_decay_iters is None: args.lr_decay_iters = args.train_iters``): a spec that
    left ``training.lr_decay_iters`` unset (``written``, plan.json ``spec_as_written.training``)
    decays over the run, so the decay length follows ``--train-iters`` (announced); one the spec
    wrote is kept, as Megatron-LM keeps an explicit ``--lr-decay-iters`` whatever
    ``--train-iters`` says (announced too). ``train``: plan.json ``spec.training``.
    Raises SystemExit when the followed length leaves no decay: ``lr_warmup_iters`` must be
    below it (Megatron-Core's ``OptimizerParamScheduler`` asserts ``lr_warmup_steps <
    lr_decay_steps``) and ``lr_wsd_decay_iters`` at most it (the WSD anneal starts at
    ``lr_decay_steps - wsd_decay_steps``).
    """
    compiled = int(train["lr_decay_iters"])
    if train_iters is None or train_iters == train["train_iters"]:
        return compiled, False
    if written.get("lr_decay_iters") is not None:
        log(
            f"--train-iters {train_iters}: lr_decay_iters stays {compiled} as the spec writes it "
            "(as Megatron-LM keeps an explicit --lr-decay-iters)"
        )
        return compiled, False
    warmup, wsd = int(train["lr_warmup_iters"]), train.get("lr_wsd_decay_iters")
    if warmup >= train_iters:
        raise SystemExit(
            f"trainc-worker: --train-iters {train_iters} is not above "
            f"training.lr_warmup_iters ({warmup}): the lr decay length follows "
            "--train-iters and Megatron-Core's OptimizerParamScheduler needs the "
            f"warm-up below it; pass --train-iters {warmup + 1} or more, or set "
            "training.lr_warmup_iters / training.lr_decay_iters in the spec and "
            "compile again"
        )
    if wsd is not None and int(wsd) > train_iters:
        raise SystemExit(
            f"trainc-worker: --train-iters {train_iters} is below "
            f"training.lr_wsd_decay_iters ({wsd}): the lr decay length follows "
            "--train-iters and the WSD anneal must fit in it; pass --train-iters "
            f"{wsd} or more, or set training.lr_decay_iters in the spec and compile "
            "again"
        )
    override(
        f"lr_decay_iters {compiled} -> {train_iters} (--train-iters; the spec leaves "
        "lr_decay_iters to follow train_iters, as Megatron-LM does)"
    )
    return train_iters, True


def check_runner(plan: dict[str, Any]) -> None:
    """Refuse a plan the engine's runner cannot run (the same table the compiler's rules use,
    :mod:`trainc.capabilities`; trainc compile rejects such a spec, so this only catches a
    hand-edited plan.json). Raises SystemExit with the reason."""
    from trainc.capabilities import capability, unsupported_axes
    from trainc.schemas import Engine, Entrypoint

    d = plan["derived"]
    cap = capability(Engine(plan["spec"]["engine"]), Entrypoint.trainc)
    assert cap is not None
    bad = unsupported_axes(cap, {k: int(d[k]) for k in ("tp", "pp", "vpp", "cp", "ep", "dp")})
    if bad:
        raise SystemExit(
            f"trainc-worker: {cap.runner} cannot split "
            + ", ".join(f"{a}={d[a]}" for a in bad)
            + f": {cap.why}"
        )


def setup(args: argparse.Namespace) -> Settings:
    """Read the plan named by ``args.plan``, check that its engine's runner can run it, and
    prepare the process: SIGUSR1 handler, CPU environment (no CUDA devices, DeepSpeed's CPU
    accelerator, torch threads from ``OMP_NUM_THREADS``, :mod:`trainc.launch.worker.cpu_compat`
    for the Megatron-Core engines, not for engine=fsdp, whose worker imports no Megatron-Core).
    Returns the run's settings; raises SystemExit for a plan the runner cannot run."""
    install_signal_handler()
    with open(args.plan) as f:
        plan = json.load(f)
    check_runner(plan)
    s = read_settings(plan, args, args.plan)
    engine = worker_engine(s.engine)
    if s.device == "cpu":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        for key, value in engine.cpu_env:
            os.environ.setdefault(key, value)
    log(
        f"plan={os.path.abspath(args.plan)} engine={s.engine} device={s.device} "
        f"shrink={s.shrink} reference={s.reference} train_iters={s.train_iters}"
    )
    import torch

    if s.device == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        if engine.megatron_core:  # the patches are Megatron-Core's; the FSDP2 worker is torch's
            from trainc.launch.worker import cpu_compat

            cpu_compat.apply()
    return s


def init_distributed(s: Settings) -> None:
    """torch.distributed from the torchrun environment (single process when absent). Raises
    SystemExit when the world size is not the plan's."""
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
        raise SystemExit(
            f"trainc-worker: world size {world} != the plan's {expected} "
            "(start the job with the generated torchrun.sh/sbatch.sh)"
        )
    log(
        f"distributed backend={backend} world_size={world} rank={dist.get_rank()} "
        f"timeout_s={s.timeout_s:g}"
    )


@contextlib.contextmanager
def distributed(s: Settings) -> Iterator[None]:
    """:func:`init_distributed`, then the body, then (whatever happened in it) Megatron-Core's
    parallel_state and the process group torn down, so the process can run another plan."""
    init_distributed(s)
    try:
        yield
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            try:
                from megatron.core import parallel_state as ps

                ps.destroy_model_parallel()
            except Exception as e:  # shutdown must not hide the real error
                log(f"destroy_model_parallel failed: {e}")
            dist.destroy_process_group()


#: ``initialize_model_parallel``'s sizes that are 1 for the one-process reference.
_REFERENCE_SIZES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
)


def init_parallel_state(s: Settings) -> None:
    """Megatron-Core parallel_state with plan.json's ``engines.megatron_core``
    ``initialize_model_parallel`` keyword arguments (the degrees and the rank order; every
    degree 1 for the reference) and the run's timeout; logs this rank's groups."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    kwargs = dict(s.plan["engines"]["megatron_core"]["initialize_model_parallel"])
    if s.reference:  # every degree 1 on one process (Settings.layout)
        kwargs |= {k: 1 for k in _REFERENCE_SIZES} | {"virtual_pipeline_model_parallel_size": None}
    ps.initialize_model_parallel(
        **kwargs, distributed_timeout_minutes=max(1, int(s.timeout_s // 60))
    )
    groups = {
        "tp": ps.get_tensor_model_parallel_group(),
        "pp": ps.get_pipeline_model_parallel_group(),
        "dp": ps.get_data_parallel_group(),
        "cp": ps.get_context_parallel_group(),
        "dp_cp": ps.get_data_parallel_group(with_context_parallel=True),
        "ep": ps.get_expert_model_parallel_group(),
        "etp": ps.get_expert_tensor_parallel_group(),
        "edp": ps.get_expert_data_parallel_group(),
    }
    parts = [
        f"{k}={json.dumps(dist.get_process_group_ranks(g), separators=(',', ':'))}"
        for k, g in groups.items()
    ]
    log(f"groups rank={dist.get_rank()} " + " ".join(parts), all_ranks=True)


def resolve_dims(s: Settings) -> Dims:
    """The plan's dims, or the shrunk ones (printed either way)."""
    dims = shrink(s.plan) if s.shrink else full_dims(s.plan)
    log(("shrunk dims: " if s.shrink else "dims: ") + dims.describe())
    return dims


def resolve_precision(s: Settings) -> str:
    """fp16 has no CPU kernels on these machines: bf16 instead (announced)."""
    if s.device == "cpu" and s.precision == "fp16":
        override("precision fp16 -> bf16 (no fp16 CPU kernels; DeepSpeed/mkldnn reject fp16)")
        return "bf16"
    return s.precision


def _on_sigusr1(signum: int, frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True


def install_signal_handler() -> None:
    """Handle SIGUSR1 (where the platform has it): the training loops stop after the step."""
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, _on_sigusr1)


def stop_requested() -> bool:
    """True once SIGUSR1 arrived in this process."""
    return _stop_requested


def mark_stopped(save_dir: str, rank: int) -> None:
    """Rank 0 leaves :data:`STOPPED_MARKER` in ``save_dir`` after the SIGUSR1 checkpoint."""
    if rank == 0:
        os.makedirs(save_dir, exist_ok=True)
        with open(os.path.join(save_dir, STOPPED_MARKER), "w") as f:
            f.write("stopped by SIGUSR1 after its checkpoint\n")


def checkpoint_or_stop(s: Settings, done: int, write: Callable[[int], str]) -> bool:
    """After step ``done`` (both engines' loops): save at ``launch.save_interval``, after the last
    step (as Megatron-LM's ``training.py`` saves when the last iteration is not a multiple of the
    interval: a job of 1500 steps with an interval of 1000 keeps its last 500) and, when any
    rank got SIGUSR1, save, leave the stop marker and return True (the loop ends there).
    ``write(step)`` saves a checkpoint and returns where it went."""
    import torch.distributed as dist

    stop = agree_to_stop()
    due = bool(s.save_interval and done % s.save_interval == 0) or done == s.train_iters
    if (due or stop) and not s.reference:
        log(f"saved checkpoint step={done} to {write(done)}")
    if stop:
        log(f"SIGUSR1: stopping after step {done}")
        mark_stopped(s.save, dist.get_rank())
    return stop


def agree_to_stop() -> bool:
    """True on every rank once any rank got SIGUSR1 (ranks must stop at the same step): a MAX
    all-reduce of this rank's flag over the default process group."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if stop_requested() else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def resume_check(
    s: Settings, load: Callable[[int], int | None], train: Callable[[int], None]
) -> None:
    """``--resume-check STEP`` (every engine's loop, after training): reload the checkpoint of
    STEP from :attr:`Settings.save` into the (already further trained) objects with
    ``load(step)`` (the step it restored, or None when there is no such checkpoint) and replay
    from there to ``train_iters`` with ``train(first_step)``, which logs ``resume-check`` step
    lines: the replayed losses must equal the first pass's (the end-to-end tests compare the
    two). Does nothing without ``--resume-check``; raises SystemExit when the checkpoint is
    missing."""
    if s.resume_check is None:
        return
    got = load(s.resume_check)
    if got is None:
        raise SystemExit(
            f"trainc-worker: --resume-check: no checkpoint for step {s.resume_check} in {s.save}"
        )
    log(f"resume-check: reloaded step {got} from {s.save}; replaying to {s.train_iters}")
    train(got)
