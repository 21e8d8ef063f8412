"""The Megatron-Core training loop of the worker (engine=megatron)."""

from __future__ import annotations

import math
import time
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from trainc.launch import checkpoint
from trainc.launch.shrink import Dims, full_dims, shrink
from trainc.launch.worker import Settings, emit, init_parallel_state, log, override


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
    out = model(batch["tokens"], batch["position_ids"], batch.get("attention_mask"),
                labels=batch["labels"])
    return out, partial(_loss_func, batch["loss_mask"])


def _lr_at(s: Settings, step: int) -> float:
    """Linear warmup over training.lr_warmup_iters, then cosine decay from lr to min_lr by
    training.train_iters (Megatron's ``cosine`` style)."""
    if step < s.warmup_iters:
        return s.lr * (step + 1) / s.warmup_iters
    frac = min((step - s.warmup_iters) / max(s.decay_iters - s.warmup_iters, 1), 1.0)
    return s.min_lr + 0.5 * (s.lr - s.min_lr) * (1 + math.cos(math.pi * frac))


def _set_lr(opt: Any, lr: float) -> None:
    for o in getattr(opt, "chained_optimizers", None) or [opt]:
        for g in o.param_groups:
            g["lr"] = lr


def run(s: Settings) -> None:
    """Build model, DDP, optimizer; train; checkpoint."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel as DDP
    from megatron.core.distributed import DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    from trainc.launch import model as mb
    from trainc.launch.data import Batches, build_dataset

    dims = resolve_dims(s)
    precision = resolve_precision(s)
    cpu = s.device == "cpu"
    init_parallel_state(s)
    model_parallel_cuda_manual_seed(s.seed, force_reset_rng=True)
    use_te = not cpu and mb.have_te()
    L = s.layout
    if cpu and L["cp"] > 1:
        override("context-parallel core attention -> trainc.launch.cp_attention "
                 "(pure-torch all-gather stand-in; TE needs CUDA)")
    if cpu:
        override("layer spec -> local (Transformer Engine needs CUDA); "
                 "use_cpu_initialization=True; fusions off")
    if dims.num_experts:
        log(f"moe dispatcher={s.dispatcher} experts={dims.num_experts} "
            f"topk={dims.moe_router_topk} aux_loss=off")
    config = mb.transformer_config(s.plan, dims, L, cpu=cpu, precision=precision,
                                   dispatcher=s.dispatcher)
    log(f"layout tp={L['tp']} pp={L['pp']} vpp={L['vpp']} cp={L['cp']} ep={L['ep']} "
        f"etp={L['etp']} dp={L['dp']} sp={L['sp']} num_microbatches={s.num_mb} "
        f"distributed_optimizer={s.distopt} overlap_p2p_comm={config.overlap_p2p_comm} "
        f"batch_p2p_comm={config.batch_p2p_comm} spec={'te' if use_te else 'local'}")
    if not s.reference:
        cross_check(s, config)
    chunks = mb.build_chunks(s.plan, dims, config, use_te=use_te, cp=L["cp"])
    if L["pp"] > 1 and ps.get_tensor_model_parallel_rank() == 0 and \
            ps.get_context_parallel_rank() == 0 and ps.get_data_parallel_rank() == 0:
        built = [[layer.layer_number - 1 for layer in c.decoder.layers] for c in chunks]
        log(f"pp rank {ps.get_pipeline_model_parallel_rank()} built layers {built}",
            all_ranks=True)
    n = mb.deterministic_init(chunks, s.seed)
    log(f"deterministic layout-independent init of {n} matrices (seed {s.seed})")
    if not cpu:
        for c in chunks:
            c.cuda(torch.cuda.current_device())
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False,
        use_distributed_optimizer=s.distopt)
    chunks = [DDP(config=config, ddp_config=ddp_config, module=c, disable_bucketing=i > 0)
              for i, c in enumerate(chunks)]
    config.finalize_model_grads_func = finalize_model_grads
    t = s.plan["spec"]["training"]
    opt = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=s.lr, min_lr=s.min_lr, weight_decay=t.get("weight_decay", 0.0),
        adam_beta1=s.adam_beta1, adam_beta2=s.adam_beta2, adam_eps=s.adam_eps, clip_grad=t.get("grad_clip", 1.0),
        bf16=precision == "bf16", fp16=precision == "fp16", params_dtype=config.params_dtype,
        use_distributed_optimizer=s.distopt), chunks)

    start = 0
    if s.load:
        got = checkpoint.load(s.load, chunks, opt, _ckpt_layout(s, dims))
        if got is None:
            log(f"no checkpoint in {s.load}; starting from step 0")
        else:
            start = got
            log(f"resumed from {s.load} at step {start}")

    dp_rank = 0 if s.reference else ps.get_data_parallel_rank()
    dataset = build_dataset(s.train_iters * s.gbs + s.gbs, dims.seq_length, dims.vocab_size,
                            s.seed, s.data_path)
    batches = Batches(dataset, s.gbs, s.mbs, s.num_mb, dp_rank)
    fb = get_forward_backward_func()
    logger = (ps.is_pipeline_last_stage(ignore_virtual=True) and ps.get_tensor_model_parallel_rank()
              == 0 and ps.get_context_parallel_rank() == 0 and dp_rank == 0)
    last_stage = ps.is_pipeline_last_stage(ignore_virtual=True)
    tokens = s.gbs * dims.seq_length

    def train_steps(first: int, prefix: str, save: bool) -> None:
        for step in range(first, s.train_iters):
            t0 = time.perf_counter()
            lr = _lr_at(s, step)
            _set_lr(opt, lr)
            for c in chunks:
                c.zero_grad_buffer()
            opt.zero_grad()
            iters: Any = ([batches.iterator(step) for _ in chunks] if len(chunks) > 1
                          else batches.iterator(step))
            losses = fb(forward_step_func=partial(_forward_step, L["cp"]), data_iterator=iters,
                        model=chunks if len(chunks) > 1 else chunks[0],
                        num_microbatches=s.num_mb, seq_length=dims.seq_length,
                        micro_batch_size=s.mbs, decoder_seq_length=dims.seq_length,
                        forward_only=False)
            ok, grad_norm, _ = opt.step()
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
                emit(f"{prefix}step={done} loss={loss:.9g} grad_norm={gn:.9g} "
                     f"step_time_s={dt:.4f} tokens_per_s={tokens / dt:.1f} lr={lr:.6g} "
                     f"skipped={int(not ok)}")
            if save and checkpoint_or_stop(s, done, lambda n: checkpoint.save(
                    s.save, n, chunks, opt, _ckpt_layout(s, dims))):
                return

    train_steps(start, "", save=True)
    if s.resume_check is not None:
        # Reload the checkpoint of an earlier step into the (already further trained) objects and
        # replay: the replayed losses must equal the first pass's (tests compare the two).
        got = checkpoint.load(s.save, chunks, opt, _ckpt_layout(s, dims), step=s.resume_check)
        if got is None:
            raise SystemExit(f"trainc-worker: --resume-check: no checkpoint for step "
                             f"{s.resume_check} in {s.save}")
        log(f"resume-check: reloaded step {got} from {s.save}; replaying to {s.train_iters}")
        train_steps(got, "resume-check ", save=False)


def cross_check(s: Settings, config: Any) -> None:
    """Compare the layout the worker built with megatron_core.yaml next to plan.json (when the
    compiler wrote one): parallel sizes, p2p mode, sequence parallel, microbatches."""
    import os

    import yaml

    path = os.path.join(os.path.dirname(os.path.abspath(s.plan_path)), "megatron_core.yaml")
    if not os.path.exists(path):
        return
    with open(path) as f:
        y = yaml.safe_load(f) or {}
    tc, fb = y.get("TransformerConfig", {}), y.get("forward_backward_func", {})
    keys = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
            "virtual_pipeline_model_parallel_size", "context_parallel_size",
            "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
            "overlap_p2p_comm", "batch_p2p_comm")
    mine = {k: getattr(config, k) for k in keys if k in tc}
    theirs = {k: tc[k] for k in mine}
    if "num_microbatches" in fb:
        mine["num_microbatches"], theirs["num_microbatches"] = s.num_mb, fb["num_microbatches"]
    bad = {k: (theirs[k], mine[k]) for k in mine if theirs[k] != mine[k]}
    if bad:
        raise SystemExit(f"trainc-worker: megatron_core.yaml disagrees with the layout built "
                         f"from plan.json (key: (yaml, worker)): {bad}")
    log(f"cross-checked {len(mine)} layout keys with {path}: all agree")


def checkpoint_or_stop(s: Settings, done: int, write: Any) -> bool:
    """After step ``done`` (both engines' loops): save at ``launch.save_interval`` and, when any
    rank got SIGUSR1, save, leave the stop marker and return True (the loop ends there).
    ``write(step)`` saves a checkpoint and returns where it went."""
    stop = _agree_to_stop()
    if (s.save_interval and done % s.save_interval == 0 or stop) and not s.reference:
        log(f"saved checkpoint step={done} to {write(done)}")
    if stop:
        log(f"SIGUSR1: stopping after step {done}")
        from trainc.launch import signals

        signals.mark_stopped(s.save, dist.get_rank())
    return stop


def _agree_to_stop() -> bool:
    """True on every rank once any rank got SIGUSR1 (ranks must stop at the same step)."""
    from trainc.launch import signals

    flag = torch.tensor([1.0 if signals.stop_requested() else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _ckpt_layout(s: Settings, dims: Dims) -> dict[str, Any]:
    return {**s.layout, "dims": dims.describe(), "distopt": s.distopt}
