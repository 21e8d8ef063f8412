"""engine=megatron: the worker's Megatron-Core training loop (GPTModel chunks, Megatron DDP, the
Megatron optimizer and scheduler, ``get_forward_backward_func`` schedules), built from plan.json's
``engines.megatron_core`` and cross-checked against it."""

from __future__ import annotations

import math
import time
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
)


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


def run(s: Settings) -> None:
    """Build model, DDP, optimizer; train; checkpoint."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel as DDP  # noqa: N817
    from megatron.core.distributed import DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from trainc.launch.worker import model as mb
    from trainc.launch.worker.data import Batches, build_dataset

    dims = resolve_dims(s)
    precision = resolve_precision(s)
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
    config, tc_kwargs, changes = mb.transformer_config(
        s.plan, dims, L, cpu=cpu, precision=precision
    )
    for change in changes:
        override(f"TransformerConfig {change}")
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
    ddp_config = DistributedDataParallelConfig(**ddp_kw)
    chunks = [
        DDP(config=config, ddp_config=ddp_config, module=c, disable_bucketing=i > 0)
        for i, c in enumerate(chunks)
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
            "TransformerConfig": (config, tc_kwargs, {c.split(":")[0] for c in changes}),
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

    start = 0
    if s.load:
        got = checkpoint.load(s.load, chunks, opt, _ckpt_layout(s, dims))
        if got is None:
            log(f"no checkpoint in {s.load}; starting from step 0")
        else:
            start = got
            log(f"resumed from {s.load} at step {start}")

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

    def train_steps(first: int, prefix: str, save: bool) -> None:
        for step in range(first, s.train_iters):
            t0 = time.perf_counter()
            scheduler.num_steps = step  # the scheduler's state is the step (resume included)
            scheduler.step(0)
            lr = _lr_of(opt)
            for c in chunks:
                c.zero_grad_buffer()
            opt.zero_grad()
            iters: Any = (
                [batches.iterator(step) for _ in chunks]
                if len(chunks) > 1
                else batches.iterator(step)
            )
            losses = fb(
                forward_step_func=partial(_forward_step, L["cp"]),
                data_iterator=iters,
                model=chunks if len(chunks) > 1 else chunks[0],
                num_microbatches=s.num_microbatches,
                seq_length=dims.seq_length,
                micro_batch_size=s.micro_batch_size,
                decoder_seq_length=dims.seq_length,
                forward_only=False,
            )
            ok, grad_norm, _ = opt.step()
            if ddp_config.overlap_param_gather:
                # the next forward's pre-hooks gather the parameters; a checkpoint or the end of
                # training needs them now (Megatron-LM's disable_forward_pre_hook(param_sync))
                for c in chunks:
                    c.start_param_sync(force_sync=True)
            loss = float("nan")
            if last_stage:
                loss_t = torch.stack([x["lm loss"] for x in losses]).mean().reshape(1)
                group = ps.get_data_parallel_group(with_context_parallel=True)
                dist.all_reduce(loss_t, group=group)
                loss = loss_t.item() / dist.get_world_size(group)
            dt = time.perf_counter() - t0
            done = step + 1
            if logger and (done % s.log_interval == 0 or done == s.train_iters):
                gn = float(grad_norm) if grad_norm is not None else float("nan")
                emit(
                    f"{prefix}step={done} loss={loss:.9g} grad_norm={gn:.9g} "
                    f"step_time_s={dt:.4f} tokens_per_s={tokens / dt:.1f} lr={lr:.6g} "
                    f"skipped={int(not ok)}"
                )
            if save and checkpoint_or_stop(
                s, done, lambda n: checkpoint.save(s.save, n, chunks, opt, _ckpt_layout(s, dims))
            ):
                return

    train_steps(start, "", save=True)
    if s.resume_check is not None:
        # Reload the checkpoint of an earlier step into the (already further trained) objects and
        # replay: the replayed losses must equal the first pass's (tests compare the two).
        got = checkpoint.load(s.save, chunks, opt, _ckpt_layout(s, dims), step=s.resume_check)
        if got is None:
            raise SystemExit(
                f"trainc-worker: --resume-check: no checkpoint for step "
                f"{s.resume_check} in {s.save}"
            )
        log(f"resume-check: reloaded step {got} from {s.save}; replaying to {s.train_iters}")
        train_steps(got, "resume-check ", save=False)


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
    """A torch dtype by the name plan.json uses (``float32``), anything else as it is."""
    return str(v).removeprefix("torch.") if isinstance(v, torch.dtype) else v


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b)
    return bool(a == b)


def _ckpt_layout(s: Settings, dims: Dims) -> dict[str, Any]:
    return {**s.layout, "dims": dims.describe(), "distopt": s.distributed_optimizer}
