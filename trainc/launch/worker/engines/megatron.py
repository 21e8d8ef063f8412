"""engine=megatron: the worker's Megatron-Core training loop (GPTModel chunks, Megatron DDP, the
Megatron optimizer and scheduler, ``get_forward_backward_func`` schedules), built from plan.json's
``engines.megatron_core`` and cross-checked against it."""

from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from trainc.launch.shrink import Dims
from trainc.launch.worker import checkpoint
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


def _loss_func(loss_mask: torch.Tensor, output: torch.Tensor):  # type: ignore[no-untyped-def]
    """(sum of token losses, token count, log dict): the schedule divides by the count and the
    number of microbatches, and DDP averages over dp x cp, so every layout optimises the global
    token mean. (The 2-value form multiplies by cp, which assumes a CP-global denominator.)"""
    mask = loss_mask.view(-1).float()
    total = (output.float().view(-1) * mask).sum()
    count = mask.sum().to(torch.int)
    return total, count, {"lm loss": (total / count.clamp(min=1)).detach().clone()}


def _forward_step(cp: int, data_iterator, model):  # type: ignore[no-untyped-def]
    from megatron.core.utils import get_batch_on_this_cp_rank

    batch = next(data_iterator)
    if cp > 1:
        batch = get_batch_on_this_cp_rank(dict(batch))
    out = model(
        batch["tokens"], batch["position_ids"], batch.get("attention_mask"), labels=batch["labels"]
    )
    return out, partial(_loss_func, batch["loss_mask"])


def refuse_low_precision_on_cpu(core: dict[str, Any]) -> None:
    """Stop (SystemExit, naming the keys) when a plan asks for FP8/FP4 GEMMs or the
    precision-aware optimizer on CPU: both are Transformer Engine kernels that need CUDA, and
    dropping them would train another model than the plan (trainc's TRC330 refuses such a
    plan at compile time; this catches ``--device cpu`` on a CUDA plan)."""
    tc, opt = core["TransformerConfig"], core["OptimizerConfig"]
    asked = [f"TransformerConfig.{k}={tc[k]}" for k in ("fp8", "fp4") if tc.get(k)]
    if opt.get("use_precision_aware_optimizer"):
        asked.append("OptimizerConfig.use_precision_aware_optimizer=True")
    if asked:
        raise SystemExit(
            "trainc-worker: --device cpu cannot run "
            + ", ".join(asked)
            + " (Transformer Engine needs CUDA); run on a GPU, or compile the spec "
            "without training.fp8_format / fp4_format / the optimizer state dtypes"
        )


def init_tp_comm_overlap(core: dict[str, Any], micro_batch_size: int) -> None:
    """Transformer Engine's userbuffers for ``tp_comm_overlap`` (CUDA only), before the model is
    built, as Megatron-LM's ``megatron/training/initialize.py`` ``_initialize_tp_communicators``
    does with TE >= 1.9: one buffer of ``[seq x micro_batch / cp, hidden]``, the TP size, FP8
    when the plan trains in FP8, TE's default userbuffer configs, NCCL bootstrap. Not run on
    the CPU test machines (no GPU was available when it was written)."""
    from transformer_engine.pytorch import module as te_module

    tc = core["TransformerConfig"]
    shape = [
        core["forward_backward_func"]["seq_length"]
        * micro_batch_size
        // tc["context_parallel_size"],
        tc["hidden_size"],
    ]
    te_module.base.initialize_ub(
        shape=shape,
        tp_size=tc["tensor_model_parallel_size"],
        use_fp8=tc.get("fp8") is not None,
        ub_cfgs={},
        bootstrap_backend="nccl",
    )


@dataclass
class _Model:
    """What :func:`build_model` built: the TransformerConfig (with the kwargs it was made from
    and the changes the worker announced) and the model chunks (one per virtual stage)."""

    config: Any
    tc_kwargs: dict[str, Any]
    changes: list[str]
    chunks: list[Any]


@dataclass
class _Trainer:
    """What the training steps drive: the DDP-wrapped chunks, the optimizer and scheduler, the
    batches, Megatron-Core's schedule and who logs."""

    s: Settings
    dims: Dims
    chunks: list[Any]
    opt: Any
    scheduler: Any
    ddp_config: Any
    batches: Any
    fb: Any
    logger: bool
    last_stage: bool
    tokens: int


#: What the loop imports first, in this order (import-time patches and warnings come before
#: its first setup line).
_STACK = (
    "megatron.core.parallel_state",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.optimizer_param_scheduler",
    "megatron.core.pipeline_parallel",
    "megatron.core.tensor_parallel.random",
    "trainc.launch.worker.model",
    "trainc.launch.worker.data",
)


def run(s: Settings) -> None:
    """Build model, DDP, optimizer; train; checkpoint."""
    for name in _STACK:
        importlib.import_module(name)
    dims = resolve_dims(s)
    precision = resolve_precision(s)
    built = build_model(s, dims, precision)
    chunks, ddp_config, opt, scheduler = build_optimizer(s, built, precision)
    start = resume(s, dims, chunks, opt)
    t = prepare_training(s, dims, chunks, opt, scheduler, ddp_config)
    train_steps(t, start, replay=False)
    resume_check(
        s,
        lambda step: checkpoint.load(s.save, chunks, opt, _ckpt_layout(s, dims), step=step),
        lambda first: train_steps(t, first, replay=True),
    )


def prepare_device(s: Settings) -> bool:
    """Before the model: parallel_state and the model-parallel RNG, the CPU refusals and
    overrides or Transformer Engine's userbuffers (``tp_comm_overlap``) on CUDA. Returns whether
    the model uses Transformer Engine's layer spec."""
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from trainc.launch.worker import model as mb

    cpu = s.device == "cpu"
    init_parallel_state(s)
    model_parallel_cuda_manual_seed(s.seed, force_reset_rng=True)
    use_te = not cpu and mb.have_te()
    L = s.layout
    if cpu:
        refuse_low_precision_on_cpu(s.plan["engines"]["megatron_core"])
    elif s.plan["engines"]["megatron_core"]["TransformerConfig"].get("tp_comm_overlap"):
        init_tp_comm_overlap(
            s.plan["engines"]["megatron_core"],
            s.plan["engines"]["megatron_core"]["forward_backward_func"]["micro_batch_size"],
        )
    if cpu and L["cp"] > 1:
        override(
            "context-parallel core attention -> trainc.launch.worker.cp_attention "
            "(pure-torch all-gather stand-in; TE needs CUDA)"
        )
    if cpu:
        override(
            "layer spec -> local (Transformer Engine needs CUDA); "
            "use_cpu_initialization=True; fusions off"
        )
    return use_te


def build_model(s: Settings, dims: Dims, precision: str) -> _Model:
    """:func:`prepare_device`, the TransformerConfig (each change announced) and the GPTModel
    chunks with layout-independent initial weights, on the device."""
    from megatron.core import parallel_state as ps

    from trainc.launch.worker import model as mb

    use_te = prepare_device(s)
    cpu = s.device == "cpu"
    L = s.layout
    config, tc_kwargs, changes = mb.transformer_config(
        s.plan, dims, L, cpu=cpu, precision=precision
    )
    for change in changes:
        override(f"TransformerConfig {change}")
    log_model(s, dims, config, use_te)
    chunks = mb.build_chunks(s.plan, dims, config, use_te=use_te, cp=L["cp"])
    if (
        L["pp"] > 1
        and ps.get_tensor_model_parallel_rank() == 0
        and ps.get_context_parallel_rank() == 0
        and ps.get_data_parallel_rank() == 0
    ):
        built = [[layer.layer_number - 1 for layer in c.decoder.layers] for c in chunks]
        log(f"pp rank {ps.get_pipeline_model_parallel_rank()} built layers {built}", all_ranks=True)
    n = mb.deterministic_init(chunks, s.seed, std=config.init_method_std)
    log(
        f"deterministic layout-independent init of {n} matrices (seed {s.seed}, "
        f"std {config.init_method_std})"
    )
    if not cpu:
        for c in chunks:
            c.cuda(torch.cuda.current_device())
    return _Model(config, tc_kwargs, changes, chunks)


def log_model(s: Settings, dims: Dims, config: Any, use_te: bool) -> None:
    """The setup lines on the model: the fusions, the MoE routing, the layout."""
    from trainc.launch.worker import model as mb

    L = s.layout
    log(
        "TransformerConfig fusions (speed only): "
        + ", ".join(f"{k}={v}" for k, v in mb.WORKER_FUSIONS.items())
    )
    if dims.num_experts:
        log(
            f"moe dispatcher={config.moe_token_dispatcher_type} experts={dims.num_experts} "
            f"topk={dims.moe_router_topk} "
            f"load_balancing={config.moe_router_load_balancing_type} "
            f"aux_loss_coeff={config.moe_aux_loss_coeff}"
        )
    log(
        f"layout tp={L['tp']} pp={L['pp']} vpp={L['vpp']} cp={L['cp']} ep={L['ep']} "
        f"etp={L['etp']} dp={L['dp']} sp={L['sp']} num_microbatches={s.num_microbatches} "
        f"distributed_optimizer={s.distributed_optimizer} "
        f"overlap_p2p_comm={config.overlap_p2p_comm} "
        f"batch_p2p_comm={config.batch_p2p_comm} spec={'te' if use_te else 'local'}"
    )


def ddp_kwargs(s: Settings, cpu: bool) -> tuple[dict[str, Any], set[str]]:
    """``DistributedDataParallelConfig``'s keyword arguments: plan.json's, with the reference
    run's changes (no distributed optimizer, no overlap) and Megatron-FSDP replaced by the
    distributed optimizer where it cannot run (CPU, the reference), each announced. Returns
    the arguments and the set of changed keys."""
    core = s.plan["engines"]["megatron_core"]
    ddp_kw, ddp_changed = _changed(
        core["DistributedDataParallelConfig"],
        "DistributedDataParallelConfig",
        {
            "use_distributed_optimizer": False,
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
        }
        if s.reference
        else {},
        "reference run",
    )
    if ddp_kw.get("use_megatron_fsdp") and (cpu or s.reference):
        # Megatron-FSDP builds a CUDA device mesh and CUDA streams (mcore_fsdp_adapter.py); on
        # CPU the distributed optimizer runs the same math with the weights replicated (TRC383)
        ddp_kw, extra = _changed(
            ddp_kw,
            "DistributedDataParallelConfig",
            {"use_megatron_fsdp": False, "data_parallel_sharding_strategy": "no_shard"},
            "reference run" if s.reference else "Megatron-FSDP needs CUDA",
        )
        ddp_changed |= extra
    return ddp_kw, ddp_changed


def optimizer_kwargs(s: Settings, precision: str, config: Any) -> tuple[dict[str, Any], set[str]]:
    """``OptimizerConfig``'s keyword arguments: plan.json's, with the reference run's (no
    distributed optimizer), the CPU precision's and ``--lr``'s changes, each announced, and the
    model's ``params_dtype``; the precision-aware optimizer's dtypes as torch dtypes. Returns
    the arguments and the set of changed keys (``params_dtype`` not included)."""
    core = s.plan["engines"]["megatron_core"]
    opt_kw, opt_changed = _changed(
        core["OptimizerConfig"],
        "OptimizerConfig",
        {"use_distributed_optimizer": False} if s.reference else {},
        "reference run",
    )
    if precision != s.precision:
        more, why = {"bf16": precision == "bf16", "fp16": precision == "fp16"}, "precision"
        opt_kw, extra = _changed(opt_kw, "OptimizerConfig", more, why)
        opt_changed |= extra
    if s.lr_override is not None:
        opt_kw, extra = _changed(opt_kw, "OptimizerConfig", {"lr": s.lr_override}, "--lr")
        opt_changed |= extra
    opt_kw["params_dtype"] = config.params_dtype
    for key in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        if key in opt_kw:  # the precision-aware optimizer's buffers: torch dtypes by name
            opt_kw[key] = getattr(torch, opt_kw[key])
    return opt_kw, opt_changed


def build_optimizer(s: Settings, built: _Model, precision: str) -> tuple[list[Any], Any, Any, Any]:
    """Megatron DDP around each chunk (overlap hooks wired), the Megatron optimizer and its
    scheduler, cross-checked against plan.json (:func:`cross_check`) and logged. Returns (the
    wrapped chunks, the DDP config, the optimizer, the scheduler)."""
    from megatron.core.distributed import DistributedDataParallel as DDP  # noqa: N817
    from megatron.core.distributed import DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    config = built.config
    core = s.plan["engines"]["megatron_core"]
    ddp_kw, ddp_changed = ddp_kwargs(s, s.device == "cpu")
    opt_kw, opt_changed = optimizer_kwargs(s, precision, config)
    ddp_config = DistributedDataParallelConfig(**ddp_kw)
    chunks = [
        DDP(config=config, ddp_config=ddp_config, module=c, disable_bucketing=i > 0)
        for i, c in enumerate(built.chunks)
    ]
    _wire_overlap(config, chunks, ddp_config)
    config.finalize_model_grads_func = finalize_model_grads
    opt_config = OptimizerConfig(**opt_kw)
    opt = get_megatron_optimizer(opt_config, chunks)
    sched_kw, sched_changed = scheduler_kwargs(s, core["OptimizerParamScheduler"])
    scheduler = OptimizerParamScheduler(opt, **sched_kw)
    cross_check(
        s,
        {
            "TransformerConfig": (
                config,
                built.tc_kwargs,
                {c.split(":")[0] for c in built.changes},
            ),
            "DistributedDataParallelConfig": (ddp_config, ddp_kw, ddp_changed),
            "OptimizerConfig": (opt_config, opt_kw, opt_changed | {"params_dtype"}),
            "OptimizerParamScheduler": (scheduler, sched_kw, sched_changed),
        },
    )
    log(
        f"optimizer {opt_config.optimizer} lr={opt_config.lr} min_lr={opt_config.min_lr} "
        f"betas=({opt_config.adam_beta1}, {opt_config.adam_beta2}) eps={opt_config.adam_eps} "
        f"weight_decay={opt_config.weight_decay} clip_grad={opt_config.clip_grad} "
        f"schedule={sched_kw['lr_decay_style']} warmup={sched_kw['lr_warmup_steps']} "
        f"decay_steps={sched_kw['lr_decay_steps']} overlap_grad_reduce="
        f"{ddp_config.overlap_grad_reduce} overlap_param_gather="
        f"{ddp_config.overlap_param_gather} grad_reduce_in_fp32={ddp_config.grad_reduce_in_fp32}"
    )
    return chunks, ddp_config, opt, scheduler


def resume(s: Settings, dims: Dims, chunks: list[Any], opt: Any) -> int:
    """The step to start from: the latest checkpoint of ``--load`` loaded into ``chunks`` and
    ``opt`` (announced), else 0."""
    start = 0
    if s.load:
        got = checkpoint.load(s.load, chunks, opt, _ckpt_layout(s, dims))
        if got is None:
            log(f"no checkpoint in {s.load}; starting from step 0")
        else:
            start = got
            log(f"resumed from {s.load} at step {start}")
    return start


def prepare_training(
    s: Settings, dims: Dims, chunks: list[Any], opt: Any, scheduler: Any, ddp_config: Any
) -> _Trainer:
    """The data (this data-parallel rank's microbatches), Megatron-Core's schedule and the rank
    that logs the step lines (the last pipeline stage's first rank)."""
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

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
    batches = Batches(dataset, s.global_batch_size, s.micro_batch_size, s.num_microbatches, dp_rank)
    fb = get_forward_backward_func()
    logger = (
        ps.is_pipeline_last_stage(ignore_virtual=True)
        and ps.get_tensor_model_parallel_rank() == 0
        and ps.get_context_parallel_rank() == 0
        and dp_rank == 0
    )
    last_stage = ps.is_pipeline_last_stage(ignore_virtual=True)
    tokens = s.global_batch_size * dims.seq_length
    return _Trainer(
        s, dims, chunks, opt, scheduler, ddp_config, batches, fb, logger, last_stage, tokens
    )


def train_steps(t: _Trainer, first: int, replay: bool) -> None:
    """Optimizer steps ``first`` .. ``train_iters - 1``, each logged (``replay``: as the
    ``--resume-check`` replay, without saving); saves and stops as
    :func:`trainc.launch.worker.runtime.checkpoint_or_stop` says."""
    s = t.s
    for step in range(first, s.train_iters):
        t0 = time.perf_counter()
        lr, ok, grad_norm, loss = train_step(t, step)
        dt = time.perf_counter() - t0
        done = step + 1
        if t.logger and (done % s.log_interval == 0 or done == s.train_iters):
            gn = float(grad_norm) if grad_norm is not None else float("nan")
            emit(
                format_step_line(
                    done,
                    loss=loss,
                    grad_norm=gn,
                    step_time_s=dt,
                    tokens=t.tokens,
                    lr=lr,
                    skipped=not ok,
                    resume_check=replay,
                )
            )
        if not replay and checkpoint_or_stop(
            s,
            done,
            lambda n: checkpoint.save(s.save, n, t.chunks, t.opt, _ckpt_layout(s, t.dims)),
        ):
            return


def train_step(t: _Trainer, step: int) -> tuple[float, bool, Any, float]:
    """One optimizer step (0-based ``step``): the scheduler's lr, the schedule's forward and
    backward over the microbatches, the optimizer step, the loss averaged over dp x cp on the
    last stage (nan elsewhere). Returns (lr, whether the step was applied, the grad norm, the
    loss)."""
    from megatron.core import parallel_state as ps

    s, chunks, opt, L = t.s, t.chunks, t.opt, t.s.layout
    t.scheduler.num_steps = step  # the scheduler's state is the step (resume included)
    t.scheduler.step(0)
    lr = _lr_of(opt)
    for c in chunks:
        c.zero_grad_buffer()
    opt.zero_grad()
    iters: Any = (
        [t.batches.iterator(step) for _ in chunks] if len(chunks) > 1 else t.batches.iterator(step)
    )
    losses = t.fb(
        forward_step_func=partial(_forward_step, L["cp"]),
        data_iterator=iters,
        model=chunks if len(chunks) > 1 else chunks[0],
        num_microbatches=s.num_microbatches,
        seq_length=t.dims.seq_length,
        micro_batch_size=s.micro_batch_size,
        decoder_seq_length=t.dims.seq_length,
        forward_only=False,
    )
    ok, grad_norm, _ = opt.step()
    if t.ddp_config.overlap_param_gather:
        # the next forward's pre-hooks gather the parameters; a checkpoint or the end of
        # training needs them now (Megatron-LM's disable_forward_pre_hook(param_sync))
        for c in chunks:
            c.start_param_sync(force_sync=True)
    loss = float("nan")
    if t.last_stage:
        loss_t = torch.stack([x["lm loss"] for x in losses]).mean().reshape(1)
        group = ps.get_data_parallel_group(with_context_parallel=True)
        dist.all_reduce(loss_t, group=group)
        loss = loss_t.item() / dist.get_world_size(group)
    return lr, ok, grad_norm, loss


def scheduler_kwargs(s: Settings, compiled: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """``OptimizerParamScheduler``'s keyword arguments: ``compiled`` (plan.json
    ``engines.megatron_core.OptimizerParamScheduler``) with the command line's changes, each
    announced: ``--lr`` sets max_lr (and min_lr when above it); a ``--train-iters`` the decay
    length follows (:func:`trainc.launch.worker.runtime.decay_length`) sets lr_decay_steps, and
    wd_incr_steps follows the run's length as Megatron-LM's ``get_optimizer_param_scheduler``
    sets it from ``--train-iters``. Returns the arguments and the set of changed keys."""
    kw: dict[str, Any] = dict(compiled)
    changed: set[str] = set()
    if s.lr_override is not None:
        kw, changed = _changed(
            kw,
            "OptimizerParamScheduler",
            {"max_lr": s.lr_override, "min_lr": min(compiled["min_lr"], s.lr_override)},
            "--lr",
        )
    if s.decay_follows:
        kw, more = _changed(
            kw,
            "OptimizerParamScheduler",
            {"lr_decay_steps": s.lr_decay_iters, "wd_incr_steps": s.train_iters},
            "--train-iters",
        )
        changed |= more
    return kw, changed


def _changed(
    kwargs: dict[str, Any], group: str, values: dict[str, Any], why: str
) -> tuple[dict[str, Any], set[str]]:
    """A copy of ``kwargs`` (of ``group``) with ``values`` set; each real change is announced
    (an ``override:`` log line) and returned in the set of changed keys."""
    kw = dict(kwargs)
    changed = {k for k, v in values.items() if kw.get(k) != v}
    for k in sorted(changed):
        override(f"{why}: {group} {k} {kw.get(k)!r} -> {values[k]!r}")
    kw.update(values)
    return kw, changed


def _lr_of(opt: Any) -> float:
    for o in getattr(opt, "chained_optimizers", None) or [opt]:
        for g in o.param_groups:
            return float(g["lr"])
    return float("nan")


def _wire_overlap(config: Any, chunks: list[Any], ddp_config: Any) -> None:
    """What Megatron-LM's ``training.py::setup_model_and_optimizer`` wires for overlapped DDP:
    the schedules' ``no_sync`` / ``grad_sync`` hooks for ``overlap_grad_reduce`` and the
    ``param_sync`` hooks for ``overlap_param_gather`` (one function, or one per chunk)."""

    def one_or_list(fns: list[Any]) -> Any:
        return fns[0] if len(fns) == 1 else fns

    if ddp_config.overlap_grad_reduce:
        config.no_sync_func = one_or_list([c.no_sync for c in chunks])
        config.grad_sync_func = one_or_list([c.start_grad_sync for c in chunks])
    if ddp_config.overlap_param_gather:
        config.param_sync_func = one_or_list([c.start_param_sync for c in chunks])


def cross_check(s: Settings, built: dict[str, tuple[Any, dict[str, Any], set[str]]]) -> None:
    """Every key of ``plan.json``'s ``engines.megatron_core`` groups must reach the object the
    worker built: ``built`` maps a group to (the object, the kwargs passed, the keys whose change
    the worker announced). A key passed with another value than the plan's without an announced
    change, or an object attribute that differs from what was passed, stops the worker."""
    core = s.plan["engines"]["megatron_core"]
    bad: dict[str, tuple[Any, Any, Any]] = {}
    checked = 0
    for group, (obj, passed, announced) in built.items():
        for key, want in core[group].items():
            sent = _plain(passed.get(key, want))
            if not hasattr(obj, key):  # a setting the object does not keep cannot be checked
                bad[f"{group}.{key}"] = (want, sent, "<no such attribute>")
                continue
            got = _plain(getattr(obj, key))
            if (sent != want and key not in announced) or not _same(got, sent):
                bad[f"{group}.{key}"] = (want, sent, got)
            checked += 1
    if bad:
        raise SystemExit(
            f"trainc-worker: the Megatron-Core objects differ from plan.json's "
            f"engines.megatron_core (key: (plan, passed, built)): {bad}"
        )
    log(f"cross-checked {checked} Megatron-Core settings with plan.json: all agree")


def _plain(v: Any) -> Any:
    """A torch dtype by the name plan.json uses (``float32``), a tuple as the list JSON stores
    (``window_size``), anything else as it is."""
    if isinstance(v, tuple):
        return list(v)
    return str(v).removeprefix("torch.") if isinstance(v, torch.dtype) else v


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b)
    return bool(a == b)


def _ckpt_layout(s: Settings, dims: Dims) -> dict[str, Any]:
    return {**s.layout, "dims": dims.describe(), "distopt": s.distributed_optimizer}
