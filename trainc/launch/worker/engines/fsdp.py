"""engine=fsdp: PyTorch FSDP2 (``fully_shard``) on a DeviceMesh, with DTensor tensor parallelism,
built from ``plan.json``'s ``engines.fsdp`` (the values ``torchtitan_args.txt`` shows).

Steps: ``init_device_mesh`` with the plan's five dimensions (pp, dp_replicate, dp_shard, cp, tp);
the plain-torch GPT of :mod:`trainc.launch.worker.torch_gpt` with layout-independent initial
weights;
``parallelize_module`` over the tp dimension (tp > 1); activation checkpointing per block
(torchtitan's modes: full, per-op selective, every N-th block, memory budget);
``fully_shard`` per block and on the root over the dp dimensions (a 2-D
``(dp_replicate, dp_shard)`` mesh is HSDP) with the plan's ``MixedPrecisionPolicy`` and offload
policy; AdamW / SGD with Megatron-Core's parameter groups (no weight decay on biases and norms)
and its learning-rate schedule; gradient clipping over DTensor gradients;
``torch.distributed.checkpoint`` (DCP) checkpoints of the model and optimizer state dicts
(``get_state_dict`` / ``set_state_dict``) plus each rank's random-number state (dropout), which
resume bit for bit; each records the model
shape and optimizer it was written for (``trainc_layout.json``), and a resume into another
model stops with one ``trainc-worker:`` line (rank 0's) instead of DCP's size-mismatch
tracebacks.

The built layout is checked against the plan before training (:func:`cross_check`): mesh shape
and names, and that every parameter is a DTensor on the planned mesh dimensions.

On CPU (gloo) FSDP2's all-gather / reduce-scatter and DTensor's collectives run as they do on
NCCL. Not run by this worker (rejected at compile time, TRC313 / TRC344): pipeline schedules,
context parallelism, experts, torch.compile on CPU.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainc.launch.worker.checkpoint import rng_file, rng_state, set_rng_state
from trainc.launch.worker.runtime import (
    Settings,
    checkpoint_or_stop,
    emit,
    log,
    override,
    resolve_dims,
    resume_check,
)
from trainc.launch.worker.steplog import format_step_line


def lr_schedule(cfg: dict[str, Any], s: Settings) -> dict[str, Any]:
    """The run's lr schedule (the keys :func:`lr_at` reads): plan.json ``engines.fsdp``
    ``lr_schedule`` with the command line's changes, each announced: ``--lr`` sets the peak lr,
    a ``--train-iters`` the decay length follows (:func:`trainc.launch.worker.runtime.decay_length`)
    sets ``decay_iters``."""
    sched = dict(cfg["lr_schedule"])
    if s.lr_override is not None:
        override(f"fsdp optimizer lr {cfg['optimizer']['lr']} -> {s.lr_override} (--lr)")
        sched["lr"] = s.lr_override
    if s.decay_follows and sched["decay_iters"] != s.lr_decay_iters:
        override(
            f"fsdp lr_schedule decay_iters {sched['decay_iters']} -> {s.lr_decay_iters} "
            "(--train-iters)"
        )
        sched["decay_iters"] = s.lr_decay_iters
    return sched


def lr_at(sched: dict[str, Any], step: int) -> float:
    """Learning rate of optimizer step ``step`` (0-based), as Megatron-Core 0.16.1's
    ``OptimizerParamScheduler.get_lr``: linear warm-up from 0 over ``warmup_iters``, then
    constant / linear / cosine from ``lr`` to ``min_lr`` by ``decay_iters``, ``min_lr`` after.

    >>> s = {"style": "cosine", "lr": 1.0, "min_lr": 0.0, "warmup_iters": 2, "decay_iters": 6}
    >>> [round(lr_at(s, i), 3) for i in range(7)]
    [0.0, 0.5, 1.0, 0.854, 0.5, 0.146, 0.0]
    """
    lr, lo, warm, decay = sched["lr"], sched["min_lr"], sched["warmup_iters"], sched["decay_iters"]
    if warm > 0 and step <= warm:
        return lr * step / warm
    if sched["style"] == "constant":
        return float(lr)
    if step > decay:
        return float(lo)
    ratio = (step - warm) / max(decay - warm, 1)
    coeff = 1.0 - ratio if sched["style"] == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1)
    return float(lo + coeff * (lr - lo))


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def build_mesh(s: Settings, cfg: dict[str, Any]) -> Any:
    """The DeviceMesh of ``cfg["mesh"]`` (all ones for the one-process reference)."""
    from torch.distributed.device_mesh import init_device_mesh

    m = cfg["mesh"]
    shape = [1] * len(m["shape"]) if s.reference else list(m["shape"])
    device = "cpu" if s.device == "cpu" else "cuda"
    return init_device_mesh(device, tuple(shape), mesh_dim_names=tuple(m["dim_names"]))


def apply_recompute(model: Any, ac: dict[str, Any]) -> str:
    """Activation checkpointing per block as ``engines.fsdp.activation_checkpoint`` says
    (``torchtitan_mode``, torchtitan's modes): ``full`` recomputes each block in backward,
    ``selective_op`` saves what torchtitan's per-op policy saves
    (``torch_gpt.selective_op_contexts``), ``selective_layer`` fully checkpoints every N-th
    block and keeps the others whole, ``memory_budget`` sets the compiler partitioner's budget
    (``torch._functorch.config.activation_memory_budget``; the blocks are compiled). Returns
    what it applied, for the log."""
    mode = ac["torchtitan_mode"]
    blocks = list(model.layers.values())
    if mode == "memory_budget":
        import torch._functorch.config

        torch._functorch.config.activation_memory_budget = float(ac["memory_budget"])
    for k, block in enumerate(blocks):
        if mode == "selective_layer":
            block.recompute = "full" if (k + 1) % int(ac["every_n_layers"]) == 0 else "none"
        else:
            block.recompute = mode if mode in ("full", "selective_op") else "none"
    return mode + (f"(every {ac['every_n_layers']})" if mode == "selective_layer" else "")


def param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Megatron-Core's default groups (``megatron/core/optimizer/__init__.py``
    ``_get_param_groups``, 0.16.1): weight decay on matrices, none on biases and norm weights."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def grad_norm_and_clip(model: Any, max_norm: float) -> float:
    """Global L2 norm of the gradients (DTensors on any mesh: each local norm reduced by DTensor)
    and, with ``max_norm`` > 0, scale them as ``torch.nn.utils.clip_grad_norm_`` does."""
    from torch.distributed.tensor import DTensor

    sq = torch.zeros((), dtype=torch.float64)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    for g in grads:
        n = g.float().norm(2)
        if isinstance(n, DTensor):
            n = n.full_tensor()
        sq += n.double().cpu() ** 2
    total = float(sq.sqrt())
    if max_norm > 0:
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)
    return total


def shard(model: Any, mesh: Any, cfg: dict[str, Any]) -> None:
    """``parallelize_module`` over tp, then ``fully_shard`` per block and on the root."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
    from torch.distributed.fsdp import fully_shard as fsdp_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from trainc.launch.worker.torch_gpt import tp_plan

    tp = mesh["tp"].size()
    if tp > 1:
        root, block = tp_plan(bool(cfg["tensor_parallel"]["sequence_parallel"]))
        if not model.opts["gated"]:
            block.pop("feed_forward.w3")
        parallelize_module(model, mesh["tp"], root)
        for b in model.layers.values():
            parallelize_module(b, mesh["tp"], block)
    fs = cfg["fully_shard"]
    dims = tuple(fs["mesh_dims"])
    dp_mesh = mesh[dims] if len(dims) > 1 else mesh[dims[0]]
    mp = fs["mp_policy"]  # exactly the plan's (fp16 is refused at compile time, TRC342)
    policy = MixedPrecisionPolicy(
        param_dtype=_dtype(mp["param_dtype"]), reduce_dtype=_dtype(mp["reduce_dtype"])
    )
    off = fs["offload_policy"]
    offload: Any = (
        CPUOffloadPolicy(pin_memory=bool(off["pin_memory"])) if off["cpu"] else OffloadPolicy()
    )
    for b in model.layers.values():
        fsdp_shard(
            b,
            mesh=dp_mesh,
            reshard_after_forward=bool(fs["reshard_after_forward"]),
            mp_policy=policy,
            offload_policy=offload,
        )
    fsdp_shard(
        model,
        mesh=dp_mesh,
        reshard_after_forward=bool(fs["root_reshard_after_forward"]),
        mp_policy=policy,
        offload_policy=offload,
    )


def cross_check(model: Any, mesh: Any, cfg: dict[str, Any], s: Settings) -> dict[str, Any]:
    """The layout the worker built, compared with the plan's: mesh names and shape, and every
    parameter a DTensor whose mesh dimensions are the fully_shard dims (plus tp when tp > 1).
    Returns the built layout; raises SystemExit on a difference."""
    from torch.distributed.tensor import DTensor

    names = list(mesh.mesh_dim_names)
    shape = list(mesh.mesh.shape)
    want_shape = [1] * len(shape) if s.reference else list(cfg["mesh"]["shape"])
    problems = []
    if names != list(cfg["mesh"]["dim_names"]) or shape != want_shape:
        problems.append(f"mesh {names} {shape} != plan {cfg['mesh']['dim_names']} {want_shape}")
    want_dims = list(cfg["fully_shard"]["mesh_dims"])
    tp = mesh["tp"].size()
    sharded = 0
    for name, p in model.named_parameters():
        if not isinstance(p, DTensor):
            problems.append(f"{name} is not sharded (not a DTensor)")
            continue
        dims = list(p.device_mesh.mesh_dim_names or ())
        tp_dims = ["tp"] if tp > 1 and "tp" in dims else []
        if dims[: len(want_dims)] != want_dims or dims[len(want_dims) :] not in ([], tp_dims):
            problems.append(f"{name} is on mesh dims {dims}, plan {want_dims} (+tp)")
        sharded += 1
    if problems:
        raise SystemExit(
            "trainc-worker: the FSDP2 layout differs from the plan: " + "; ".join(problems[:5])
        )
    return {
        "mesh_dim_names": names,
        "mesh_shape": shape,
        "fsdp_dims": want_dims,
        "tp": tp,
        "sharded_params": sharded,
    }


#: The file next to a DCP checkpoint's shards that records what wrote it.
LAYOUT_FILE = "trainc_layout.json"


def checkpoint_layout(dims: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint must match to be loaded: the model's shape (``Dims`` fields, the
    shrunk ones on a shrunk run) and the optimizer class. The mesh is recorded but not
    compared: DCP reshards a checkpoint onto another mesh (``torch.distributed.checkpoint``
    ``load`` reads each rank's slice from the saved global tensors)."""
    import dataclasses

    return {
        "model": dataclasses.asdict(dims),
        "optimizer": cfg["optimizer"]["class"],
        "mesh": dict(zip(cfg["mesh"]["dim_names"], cfg["mesh"]["shape"], strict=True)),
    }


def layout_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``"key saved -> now"`` for every model dimension or the optimizer that differs.

    >>> layout_differences({"model": {"hidden_size": 64}, "optimizer": "AdamW"},
    ...                    {"model": {"hidden_size": 128}, "optimizer": "AdamW"})
    ['hidden_size 64 -> 128']
    """
    out = [
        f"{k} {saved['model'].get(k)} -> {v}"
        for k, v in now["model"].items()
        if saved.get("model", {}).get(k) != v
    ]
    if saved.get("optimizer") != now["optimizer"]:
        out.append(f"optimizer {saved.get('optimizer')} -> {now['optimizer']}")
    return out


def check_checkpoint(path: str, now: dict[str, Any], rank: int = 0) -> None:
    """Raise SystemExit when the checkpoint at ``path`` was written for another model or
    optimizer than this run's: with the ``trainc-worker:`` line that names the differences on
    global rank 0, with status 1 and no message on the others (every rank reads the same file,
    so the job prints the line once, not once per rank). A checkpoint without the layout file
    (an older trainc) is loaded as is."""
    import json

    try:
        with open(os.path.join(path, LAYOUT_FILE)) as f:
            saved = json.load(f)
    except FileNotFoundError:
        return
    diff = layout_differences(saved, now)
    if diff and rank != 0:
        raise SystemExit(1)
    if diff:
        raise SystemExit(
            f"trainc-worker: checkpoint {path} was written for another model than "
            f"this run's (checkpoint -> this run: {'; '.join(diff)}); resume with "
            "the spec that wrote it, or start without --load"
        )


def refuse_float8(cfg: dict[str, Any]) -> None:
    """Stop (SystemExit naming the plan key) when ``engines.fsdp.float8.converters`` asks for
    torchao float8 / MX linears: the trainc FSDP2 worker builds BF16/FP32 linears only, and
    dropping the converters would train another model than the plan (TRC330 says so at
    compile time; torchtitan runs them: launch.entrypoint=torchtitan)."""
    conv = (cfg.get("float8") or {}).get("converters") or []
    if conv:
        raise SystemExit(
            "trainc-worker: engines.fsdp.float8.converters="
            f"{conv} needs torchao's float8 / MX linears, which the trainc FSDP2 "
            "worker does not build; run the plan's torchtitan_args.txt with "
            "torchtitan (launch.entrypoint=torchtitan), or compile the spec with "
            "training.fp8_format=none"
        )


@dataclass
class _Trainer:
    """What the training steps drive: the sharded model, its optimizer and lr schedule, the
    batches of this data-parallel rank and what a checkpoint records."""

    s: Settings
    model: Any
    opt: Any
    sched: dict[str, Any]
    batches: Any
    gas: int
    device: torch.device
    clip: float
    tokens: int
    layout: dict[str, Any]


#: What the loop imports first, in this order (import-time warnings come before its first
#: setup line).
_STACK = (
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint.state_dict",
    "trainc.launch.worker.torch_gpt",
    "trainc.launch.worker.data",
)


def run(s: Settings) -> None:
    """Build, shard, train, checkpoint (see the module docstring)."""
    for name in _STACK:
        importlib.import_module(name)
    cfg = s.plan["engines"].get("fsdp")
    if cfg is None:
        raise SystemExit(
            "trainc-worker: plan.json has no FSDP settings (engine is not fsdp); "
            "compile the spec with engine: fsdp"
        )
    refuse_float8(cfg)
    dims = resolve_dims(s)
    mesh = build_mesh(s, cfg)
    model = build_model(s, dims, mesh, cfg)
    sched = lr_schedule(cfg, s)
    opt = build_optimizer(model, cfg["optimizer"], sched["lr"])
    t = prepare_training(s, dims, mesh, cfg, model, opt, sched)
    start = 0
    if s.load:
        got = load_checkpoint(t, s.load, None)
        start = got or 0
        log(f"resumed from {s.load} at step {start}" if got else f"no checkpoint in {s.load}")
    train_steps(t, start, replay=False)
    resume_check(
        s,
        lambda step: load_checkpoint(t, s.save, step),
        lambda first: train_steps(t, first, replay=True),
    )


def build_model(s: Settings, dims: Any, mesh: Any, cfg: dict[str, Any]) -> Any:
    """The plain-torch GPT with layout-independent initial weights, its activation
    checkpointing (and compiled blocks), sharded on ``mesh`` and checked against the plan
    (:func:`cross_check`); each step logged."""
    from trainc.launch.worker import torch_gpt

    torch.manual_seed(s.seed)
    model = torch_gpt.GPT(dims, torch_gpt.options(s.plan))
    n = torch_gpt.deterministic_init(model, s.seed)
    log(f"deterministic layout-independent init of {n} matrices (seed {s.seed})")
    ac = apply_recompute(model, cfg["activation_checkpoint"])
    if cfg["compile"]:  # TRC344 refuses it with launch.device cpu
        for b in model.layers.values():
            b.compile()
    shard(model, mesh, cfg)
    built = cross_check(model, mesh, cfg, s)
    log("fsdp layout " + " ".join(f"{k}={v}".replace(" ", "") for k, v in built.items()))
    log(
        f"fsdp reshard_after_forward={cfg['fully_shard']['reshard_after_forward']} "
        f"mp_policy={cfg['fully_shard']['mp_policy']} "
        f"cpu_offload={cfg['fully_shard']['offload_policy']['cpu']} activation_checkpoint={ac}"
    )
    return model


def build_optimizer(model: Any, oc: dict[str, Any], lr: float) -> Any:
    """AdamW or SGD (``engines.fsdp.optimizer``) over :func:`param_groups`, at ``lr``."""
    if oc["class"] == "AdamW":
        opt: Any = torch.optim.AdamW(
            param_groups(model, oc["weight_decay"]),
            lr=lr,
            betas=tuple(oc["betas"]),
            eps=oc["eps"],
        )
    else:
        opt = torch.optim.SGD(
            param_groups(model, oc["weight_decay"]), lr=lr, momentum=oc["momentum"]
        )
    return opt


def prepare_training(
    s: Settings,
    dims: Any,
    mesh: Any,
    cfg: dict[str, Any],
    model: Any,
    opt: Any,
    sched: dict[str, Any],
) -> _Trainer:
    """The data of this data-parallel rank (the reference accumulates dp times as many
    microbatches, announced), the device and what a checkpoint records."""
    from trainc.launch.worker.data import Batches, build_dataset

    gas = cfg["batch"]["gradient_accumulation_steps"]
    dp_rank = 0
    if not s.reference:
        rep, shd = mesh["dp_replicate"], mesh["dp_shard"]
        dp_rank = rep.get_local_rank() * shd.size() + shd.get_local_rank()
    else:
        gas = gas * int(s.plan["derived"]["dp"])
        if gas != cfg["batch"]["gradient_accumulation_steps"]:
            override(f"reference run: gradient_accumulation_steps -> {gas} on one process")
    gbs, mbs = s.global_batch_size, s.micro_batch_size
    dataset = build_dataset(
        s.train_iters * gbs + gbs,
        dims.seq_length,
        dims.vocab_size,
        s.seed,
        s.data_path,
        s.plan["spec"].get("data"),
    )
    batches = Batches(dataset, gbs, mbs, gas, dp_rank)
    tokens = gbs * dims.seq_length
    device = (
        torch.device("cpu")
        if s.device == "cpu"
        else torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    )
    clip = float(cfg["grad_clip"])
    layout = checkpoint_layout(dims, cfg)
    return _Trainer(s, model, opt, sched, batches, gas, device, clip, tokens, layout)


def save_checkpoint(t: _Trainer, done: int) -> str:
    """DCP checkpoint of step ``done`` (model and optimizer state dicts, each rank's RNG state,
    the layout record; ``latest`` updated by rank 0). Returns its folder."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    s = t.s
    path = os.path.join(s.save, f"iter_{done:07d}")
    msd, osd = get_state_dict(t.model, t.opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    # dropout's generators, per rank (not sharded state: a file each)
    torch.save(rng_state(tracker=False), os.path.join(path, rng_file(dist.get_rank())))
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(path, LAYOUT_FILE), "w") as f:
            json.dump(t.layout, f, sort_keys=True)
        with open(os.path.join(s.save, "latest.tmp"), "w") as f:
            f.write(f"{done}\n")
        os.replace(os.path.join(s.save, "latest.tmp"), os.path.join(s.save, "latest"))
    dist.barrier()
    return path


def load_checkpoint(t: _Trainer, directory: str, step: int | None) -> int | None:
    """Load the checkpoint of ``step`` (None: ``directory``'s ``latest``) into the model, the
    optimizer and the RNGs, after :func:`check_checkpoint` (a checkpoint of another model stops
    every rank with rank 0's one line). Returns the step, or None when there is no ``latest``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    if step is None:
        try:
            with open(os.path.join(directory, "latest")) as f:
                step = int(f.read().strip())
        except FileNotFoundError:
            return None
    path = os.path.join(directory, f"iter_{step:07d}")
    try:
        check_checkpoint(path, t.layout, rank=dist.get_rank())
    except SystemExit as stop:
        if isinstance(stop.code, str):  # rank 0: the one line, before anyone exits
            sys.stderr.write(stop.code + "\n")
            sys.stderr.flush()
        dist.barrier()  # no rank exits (and makes torchrun stop the rest) before it
        raise SystemExit(1) from None
    msd, osd = get_state_dict(t.model, t.opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=path)
    set_state_dict(t.model, t.opt, model_state_dict=msd, optim_state_dict=osd)
    rng = os.path.join(path, rng_file(dist.get_rank()))
    if os.path.exists(rng):  # absent in checkpoints of an older trainc
        set_rng_state(torch.load(rng, weights_only=False))
    return step


def train_steps(t: _Trainer, first: int, replay: bool) -> None:
    """Optimizer steps ``first`` .. ``train_iters - 1``, logged on global rank 0 (``replay``:
    as the ``--resume-check`` replay, without saving); saves and stops as
    :func:`trainc.launch.worker.runtime.checkpoint_or_stop` says."""
    s = t.s
    logger = dist.get_rank() == 0
    for step in range(first, s.train_iters):
        t0 = time.perf_counter()
        lr = lr_at(t.sched, step)
        for g in t.opt.param_groups:
            g["lr"] = lr
        loss_v, gn = train_step(t, step)
        dt = time.perf_counter() - t0
        done = step + 1
        if logger and (done % s.log_interval == 0 or done == s.train_iters):
            emit(
                format_step_line(
                    done,
                    loss=loss_v,
                    grad_norm=gn,
                    step_time_s=dt,
                    tokens=t.tokens,
                    lr=lr,
                    resume_check=replay,
                )
            )
        if not replay and checkpoint_or_stop(s, done, lambda n: save_checkpoint(t, n)):
            return


def train_step(t: _Trainer, step: int) -> tuple[float, float]:
    """One optimizer step (0-based ``step``) over ``gas`` microbatches: the masked token mean
    loss, backward, clipping, the optimizer step. Returns (the loss averaged over every rank,
    the gradient norm before clipping)."""
    model, device, gas = t.model, t.device, t.gas
    total = torch.zeros((), dtype=torch.float64)
    for m in range(gas):
        b = t.batches.microbatch(step, m)
        logits = model(b["tokens"].to(device))
        loss_tok = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.shape[-1]),
            b["labels"].to(device).view(-1),
            reduction="none",
        )
        mask = b["loss_mask"].to(device).view(-1)
        loss = (loss_tok * mask).sum() / mask.sum().clamp(min=1)
        (loss / gas).backward()
        total += loss.detach().double().cpu()
    gn = grad_norm_and_clip(model, t.clip)
    t.opt.step()
    t.opt.zero_grad(set_to_none=True)
    loss_t = (total / gas).reshape(1)
    dist.all_reduce(loss_t)
    return float(loss_t.item()) / dist.get_world_size(), gn
