"""engine=deepspeed: the same GPTModel handed to ``deepspeed.initialize`` with the emitted
``ds_config.json`` (the plan folder's), Megatron-Core's parallel_state as the model-parallel unit.

On CPU (``DS_ACCELERATOR=cpu``, gloo): DeepSpeed's JIT C++ builds are avoided, each change
announced as an override: the shm communication op is not built (gloo does every collective),
the optimizer is torch's AdamW (``torch_adam``) instead of FusedAdam, and with optimizer offload
the DeepSpeed CPUAdam requirement is lifted (``zero_force_ds_cpu_optimizer: false``). fp16 has no
CPU kernels here and becomes bf16.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainc.launch.worker.runtime import (
    Settings,
    checkpoint_or_stop,
    emit,
    init_parallel_state,
    log,
    override,
    resolve_dims,
    resolve_precision,
    resume_check,
)
from trainc.launch.worker.steplog import format_step_line


def load_config(s: Settings) -> dict[str, Any]:
    """``plan.json``'s ``engines.deepspeed`` (what ds_config.json shows), with the CPU
    substitutions, each announced: bf16 for fp16, torch's AdamW instead of the FusedAdam JIT
    build, no DeepSpeedCPUAdam for offloaded states, no pinned host memory; and, for the
    one-process reference, the accumulation that gives the same global batch; the scheduler's
    ``total_num_steps`` when the decay length follows ``--train-iters``
    (:func:`trainc.launch.worker.runtime.decay_length`)."""
    cfg = copy.deepcopy(s.plan["engines"]["deepspeed"])
    if cfg is None:
        raise SystemExit(
            "trainc-worker: plan.json has no DeepSpeed config (engine is not "
            "deepspeed); compile the spec with engine: deepspeed"
        )
    if s.device == "cpu":
        if "fp16" in cfg and cfg["fp16"].get("enabled"):
            override("deepspeed fp16 -> bf16 (fp16 is rejected on this CPU)")
            cfg.pop("fp16")
            cfg["bf16"] = {"enabled": True}
        opt = cfg["optimizer"]
        if opt["type"] == "AdamW":
            override(
                "deepspeed optimizer.params.torch_adam=true (torch AdamW, no FusedAdam JIT build)"
            )
            opt["params"]["torch_adam"] = True
            opt["params"]["adam_w_mode"] = True
        if cfg["zero_optimization"].get("offload_optimizer"):
            override(
                "deepspeed zero_force_ds_cpu_optimizer=false (offloaded states stepped by "
                "torch AdamW on CPU, no DeepSpeedCPUAdam JIT build)"
            )
            cfg["zero_force_ds_cpu_optimizer"] = False
            for k in ("offload_optimizer", "offload_param"):
                block = cfg["zero_optimization"].get(k)
                if block and block.get("pin_memory"):
                    override(f"deepspeed {k}.pin_memory=false (no CUDA host pinning on CPU)")
                    block["pin_memory"] = False
    if s.lr_override is not None:
        override(
            f"deepspeed optimizer.params.lr {cfg['optimizer']['params']['lr']} -> "
            f"{s.lr_override} (--lr)"
        )
        cfg["optimizer"]["params"]["lr"] = s.lr_override
        sched = cfg["scheduler"]["params"]
        for key in ("warmup_max_lr",):
            if key in sched:
                sched[key] = s.lr_override
    sched = cfg["scheduler"]["params"]
    if s.decay_follows and "total_num_steps" in sched:
        override(
            f"deepspeed scheduler.params.total_num_steps {sched['total_num_steps']} -> "
            f"{s.lr_decay_iters} (--train-iters)"
        )
        sched["total_num_steps"] = s.lr_decay_iters
    if s.reference:
        gas = s.global_batch_size // s.micro_batch_size
        if cfg["gradient_accumulation_steps"] != gas:
            override(f"reference run: gradient_accumulation_steps -> {gas} on one process")
        cfg["gradient_accumulation_steps"] = gas
        cfg["train_batch_size"] = s.global_batch_size
    cfg["steps_per_print"] = 10**9  # the worker logs its own step lines
    return cfg


class MegatronMpu:
    """DeepSpeed's ``mpu`` interface over Megatron-Core's parallel_state: DeepSpeed's "model
    parallel" axis is Megatron's tensor-parallel group (the engine has no pipeline here)."""

    def __init__(self) -> None:
        from megatron.core import parallel_state as ps

        self.get_model_parallel_rank = ps.get_tensor_model_parallel_rank
        self.get_model_parallel_world_size = ps.get_tensor_model_parallel_world_size
        self.get_model_parallel_group = ps.get_tensor_model_parallel_group
        self.get_tensor_model_parallel_rank = ps.get_tensor_model_parallel_rank
        self.get_tensor_model_parallel_world_size = ps.get_tensor_model_parallel_world_size
        self.get_tensor_model_parallel_group = ps.get_tensor_model_parallel_group
        self.get_tensor_model_parallel_src_rank = ps.get_tensor_model_parallel_src_rank
        self.get_data_parallel_rank = ps.get_data_parallel_rank
        self.get_data_parallel_world_size = ps.get_data_parallel_world_size
        self.get_data_parallel_group = ps.get_data_parallel_group


def _skip_shm_build() -> None:
    # `import deepspeed.comm.torch as m` would bind the torch module (attribute shadowing);
    # sys.modules has the real submodule.
    mod = sys.modules.get("deepspeed.comm.torch")
    if mod is not None and hasattr(mod, "build_shm_op"):
        mod.build_shm_op = lambda: None  # type: ignore[attr-defined]
        override(
            "deepspeed shm communication op not built (JIT C++ build avoided; gloo "
            "does every collective)"
        )


def _forget_groups() -> None:
    """Drop DeepSpeed's cached process groups, so the worker can run again in the same process
    after the process group is destroyed (the one-process reference runs several plans)."""
    from deepspeed.comm import comm
    from deepspeed.utils import groups

    for name, val in list(vars(groups).items()):
        if name.startswith("_") and name.isupper():
            if isinstance(val, dict):
                val.clear()
            elif name.endswith(("_GROUP", "_WORLD_SIZE", "_RANK")):
                setattr(groups, name, None)
    comm.cdb = None


@dataclass
class _Trainer:
    """What the training steps drive: the DeepSpeed engine, the batches of this data-parallel
    rank, the group the loss is averaged over and who logs."""

    s: Settings
    engine: Any
    batches: Any
    gas: int
    group: Any
    logger: bool
    tokens: int


#: What the loop imports first, in this order (deepspeed before :func:`_skip_shm_build`, which
#: patches its comm module; import-time warnings come before the first setup line).
_STACK = (
    "deepspeed",
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel.random",
    "trainc.launch.worker.model",
    "trainc.launch.worker.checkpoint",
    "trainc.launch.worker.data",
)


def run(s: Settings) -> None:
    """Build the model, initialise the DeepSpeed engine, train, checkpoint."""
    try:
        _run(s)
    finally:
        _forget_groups()


def _run(s: Settings) -> None:
    """:func:`run` without the clean-up: the named steps in order."""
    for name in _STACK:
        importlib.import_module(name)
    if s.device == "cpu":
        _skip_shm_build()
    dims = resolve_dims(s)
    precision = resolve_precision(s)
    model = build_model(s, dims, precision)
    engine, sched = build_engine(s, model)
    gas = engine.gradient_accumulation_steps()
    start = 0
    if s.load:
        got = load_checkpoint(s, engine, None)
        start = got or 0
        log(f"resumed from {s.load} at step {start}" if got else f"no checkpoint in {s.load}")
    t = prepare_training(s, dims, engine, gas)
    train_steps(t, start, replay=False)
    resume_check(
        s,
        lambda step: load_checkpoint(s, engine, f"iter_{step:07d}"),
        lambda first: train_steps(t, first, replay=True),
    )
    del sched


def build_model(s: Settings, dims: Any, precision: str) -> Any:
    """parallel_state, the model-parallel RNG, the TransformerConfig (each change announced)
    and the one GPTModel chunk with layout-independent initial weights."""
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from trainc.launch.worker import model as mb

    init_parallel_state(s)
    model_parallel_cuda_manual_seed(s.seed, force_reset_rng=True)
    cpu = s.device == "cpu"
    config, _, changes = mb.transformer_config(s.plan, dims, s.layout, cpu=cpu, precision=precision)
    for change in changes:
        override(f"TransformerConfig {change}")
    model = mb.build_chunks(s.plan, dims, config, use_te=not cpu and mb.have_te(), cp=1)[0]
    n = mb.deterministic_init([model], s.seed, std=config.init_method_std)
    log(
        f"deterministic layout-independent init of {n} matrices (seed {s.seed}, "
        f"std {config.init_method_std})"
    )
    return model


def build_engine(s: Settings, model: Any) -> tuple[Any, Any]:
    """``deepspeed.initialize`` with :func:`load_config`'s config (Megatron-Core's tensor-parallel
    group as the model-parallel unit when tp > 1); logged. Returns (the engine, its lr
    scheduler)."""
    import deepspeed

    cfg = load_config(s)
    log(
        f"deepspeed config from plan.json engines.deepspeed (= ds_config.json): "
        f"optimizer={cfg['optimizer']['type']} scheduler={cfg['scheduler']['type']}"
    )
    engine, _, _, sched = deepspeed.initialize(
        model=model,
        model_parameters=[p for p in model.parameters() if p.requires_grad],
        config=cfg,
        mpu=MegatronMpu() if s.layout["tp"] > 1 else None,
    )
    log(
        f"deepspeed engine zero_stage={engine.zero_optimization_stage()} "
        f"dp={engine.dp_world_size} gradient_accumulation_steps="
        f"{engine.gradient_accumulation_steps()} "
        f"optimizer={type(engine.optimizer).__name__} "
        f"offload_optimizer={bool(cfg.get('zero_optimization', {}).get('offload_optimizer'))}"
    )
    return engine, sched


def load_checkpoint(s: Settings, engine: Any, tag: str | None) -> int | None:
    """Load the checkpoint ``tag`` of :attr:`Settings.save` (None: the latest of ``--load``)
    into the engine and this rank's RNG state. Returns its step, or None when there is none."""
    from trainc.launch.worker.checkpoint import rng_file, set_rng_state

    path, client = engine.load_checkpoint(s.load if tag is None else s.save, tag=tag)
    if path is None:
        return None
    rng = os.path.join(os.path.dirname(path), rng_file(dist.get_rank()))
    if os.path.exists(rng):  # absent in checkpoints of an older trainc
        set_rng_state(torch.load(rng, weights_only=False))
    return int(client["step"])


def save_checkpoint(s: Settings, engine: Any, done: int) -> str:
    """The engine's checkpoint of step ``done`` (tag ``iter_NNNNNNN``, the step in its client
    state) and this rank's RNG state beside it. Returns its folder."""
    from trainc.launch.worker.checkpoint import rng_file, rng_state

    engine.save_checkpoint(s.save, tag=f"iter_{done:07d}", client_state={"step": done})
    # dropout's generators, a file per rank (DeepSpeed writes the client state once per
    # model-parallel rank)
    torch.save(rng_state(), os.path.join(s.save, f"iter_{done:07d}", rng_file(dist.get_rank())))
    return f"{s.save}/iter_{done:07d}"


def prepare_training(s: Settings, dims: Any, engine: Any, gas: int) -> _Trainer:
    """The data of this data-parallel rank, the group the loss is averaged over and the rank
    that logs (global rank 0)."""
    from megatron.core import parallel_state as ps

    from trainc.launch.worker.data import Batches, build_dataset

    dp_rank = 0 if s.reference else ps.get_data_parallel_rank()
    gbs = s.global_batch_size
    dataset = build_dataset(
        s.train_iters * gbs + gbs,
        dims.seq_length,
        dims.vocab_size,
        s.seed,
        s.data_path,
        s.plan["spec"].get("data"),
    )
    batches = Batches(dataset, s.global_batch_size, s.micro_batch_size, gas, dp_rank)
    group = ps.get_data_parallel_group()
    logger = dist.get_rank() == 0
    tokens = s.global_batch_size * dims.seq_length
    return _Trainer(s, engine, batches, gas, group, logger, tokens)


def train_steps(t: _Trainer, first: int, replay: bool) -> None:
    """Optimizer steps ``first`` .. ``train_iters - 1``, each logged (``replay``: as the
    ``--resume-check`` replay, without saving); saves and stops as
    :func:`trainc.launch.worker.runtime.checkpoint_or_stop` says."""
    s, engine = t.s, t.engine
    for step in range(first, s.train_iters):
        t0 = time.perf_counter()
        lr = engine.get_lr()[0]
        losses = []
        for m in range(t.gas):
            b = t.batches.microbatch(step, m)
            out = engine(
                b["tokens"], b["position_ids"], b.get("attention_mask"), labels=b["labels"]
            )
            mask = b["loss_mask"].view(-1)
            loss = (out.float().view(-1) * mask).sum() / mask.sum().clamp(min=1)
            engine.backward(loss)
            engine.step()
            losses.append(loss.detach())
        loss_t = torch.stack(losses).mean().reshape(1)
        dist.all_reduce(loss_t, group=t.group)
        loss_v = loss_t.item() / dist.get_world_size(t.group)
        gn = engine.get_global_grad_norm()
        gn = float(gn) if gn is not None else float("nan")
        dt = time.perf_counter() - t0
        done = step + 1
        if t.logger and (done % s.log_interval == 0 or done == s.train_iters):
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
        if not replay and checkpoint_or_stop(s, done, lambda n: save_checkpoint(s, engine, n)):
            return
