"""Step time, tokens per second and MFU.

Two models, chosen by ``cluster.time_model``: ``kernels`` (the default,
:func:`kernel_step_time`: every kernel of the layer timed from its shape on the GPU profile,
:mod:`.kernels`, and communication hidden per axis as the engines do; docs/performance.md) and
``seed`` (:func:`seed_step_time`, the worked examples' formula below (docs/references.md),
which the seed tests assert).

Seed model. Per pipeline stage ``r`` (its GPUs share the stage's work, ``world / pp`` of them):

* compute ``C_r`` = the stage's executed FLOPs (model FLOPs of its layers, logits on the last stage,
  plus recomputation) / (``compute_efficiency`` x ``n / (n + gemm_half_efficiency_tokens)`` x
  ``peak_tflops``), with ``n = seq_length / cp x micro_batch_size`` tokens per micro batch (small
  micro batches starve the GEMMs), plus ``layer_overhead_us`` per layer, micro batch and pass
  (forward, backward, and the recompute forward);
* exposed communication ``X_r`` = (1 - ``comm_overlap``) x (TP + CP + EP seconds) + PP p2p seconds
  (the p2p sits on the critical path of the schedule);
* the pipeline stretches the per-micro-batch work by the bubble: ``(C_r + X_r) / (1 - bubble)``
  (the bubble fraction is idle time over the whole pipelined phase, :mod:`.bubble`);
* the data-parallel reduction runs once after the flush: + (1 - ``comm_overlap``) x DP seconds.

``step_time = max_r`` of that; ``tokens/s = global_batch x seq / step_time``;
``MFU = model FLOPs per step / (step_time x world x peak)`` (Megatron's throughput definition,
Megatron-LM core_v0.16.1 ``megatron/training/training.py::num_floating_point_operations`` over
``t_iter x 1e12 x W``, over the peak), clamped to [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.decide import DpSync, Sharding, traits, zero_layout
from trainc.compiler.derive import tp_in_nvlink_domain
from trainc.compiler.estimate.comm import StageComm
from trainc.compiler.estimate.engines import ESTIMATES
from trainc.compiler.estimate.flops import model_flop_terms
from trainc.compiler.estimate.fsdp_ac import recompute_parts
from trainc.compiler.estimate.host import (
    CPU_ADAM_BYTES_PER_PARAM,
    HOST_MEMORY_BYTES_PER_S,
    PCIE_BYTES_PER_S,
)
from trainc.compiler.estimate.kernels import Hw, hardware, layer_precision, layer_time, logits_time
from trainc.compiler.estimate.params import (
    StageParams,
    is_moe_layer,
    plan_rerun_masks,
    plan_stage_layers,
    stage_params,
)
from trainc.compiler.ir import Plan, filled
from trainc.schemas import (
    Fp8Format,
    Offload,
    Optimizer,
    Precision,
    Recompute,
    StateDtype,
    TimeModel,
    TrainSpec,
)


def layer_flops(spec: TrainSpec, moe: bool, tokens: float, s2: float) -> float:
    """Model FLOPs of one layer over ``tokens`` tokens and ``s2 = sum(seq^2)`` (Megatron's
    per-layer terms of ``transformer_flops``, :func:`.flops.model_flop_terms`)."""
    t = model_flop_terms(spec, 1, int(moe), 0)
    return tokens * t.per_token_layers + s2 * t.core_per_s2


@dataclass(frozen=True, slots=True)
class StepTime:
    """The time model's outputs (seconds unless named otherwise)."""

    step_time_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    bubble_seconds: float
    critical_stage: int
    tokens_per_second: float
    mfu: float
    compute_by_kind: dict[str, float] = field(default_factory=dict)
    offload_seconds: float = 0.0
    """CPU offload's exposed seconds per step: DeepSpeed's (:func:`offload_seconds`) or the
    engine's own (FSDP2's ``CPUOffloadPolicy``, :func:`.fsdp.offload_seconds`)."""


#: Bytes of one element of an optimizer buffer by its dtype (fp8 is stored as uint8).
_STATE_BYTES = {StateDtype.fp32: 4, StateDtype.bf16: 2, StateDtype.fp16: 2, StateDtype.fp8: 1}


def optimizer_bytes_per_param(spec: TrainSpec) -> float:
    """HBM bytes the optimizer step reads and writes per parameter it updates (bytes).

    The step is memory-bound element-wise work: Megatron-Core's distributed optimizer, DeepSpeed
    and torch's fused AdamW run one multi-tensor kernel that reads the gradient, the main
    (master) parameter and the moments and writes the main parameter and the moments back, then
    casts the main parameter into the model's copy (apex / TE ``multi_tensor_adam``,
    megatron-core 0.16.1 ``optimizer/distrib_optimizer.py`` ``step_with_ready_grads`` and
    ``_copy_main_params_to_model_params``). Gradient clipping reads the gradient once more for
    its norm (``clip_grads.py`` ``get_grad_norm_fp32``). Per parameter: ``2 g`` (the norm and
    Adam's read) ``+ 2 m`` (main parameter read and write; none in fp32 training, where the
    model's copy is the main one) ``+ 2 (e1 + e2)`` (each moment read and written; SGD has one)
    ``+ p`` (the model copy written: 2 bytes in BF16/FP16, 1 with ``fp8_param_gather``, whose
    FP8 copy is written instead). ``g``, ``m``, ``e1``, ``e2`` are the dtypes of
    ``training.main_grads_dtype``, ``main_params_dtype``, ``exp_avg_dtype``,
    ``exp_avg_sq_dtype``. The defaults (fp32 states, BF16 model): 8 + 8 + 16 + 2 = 34 bytes.
    """
    t = spec.training
    g = _STATE_BYTES[t.main_grads_dtype]
    e1 = _STATE_BYTES[t.exp_avg_dtype]
    e2 = _STATE_BYTES[t.exp_avg_sq_dtype] if t.optimizer is Optimizer.adam else 0
    if t.precision is Precision.fp32:
        return 2 * g + 2 * 4 + 2 * (e1 + e2)
    m = _STATE_BYTES[t.main_params_dtype]
    p = 1 if t.fp8_param_gather and t.fp8_format is not Fp8Format.none else 2
    return 2 * g + 2 * m + 2 * (e1 + e2) + p


def optimizer_step_seconds(
    spec: TrainSpec,
    dense: float,
    expert: float,
    shard: int,
    expert_shard: int,
    hbm_bytes_per_s: float,
) -> float:
    """Seconds of one optimizer step on one GPU of a stage holding ``dense`` and ``expert``
    parameters (counts, after the TP/PP/EP split): the parameters this GPU updates (its
    ``1 / shard`` of the dense ones and ``1 / expert_shard`` of the experts' where the optimizer
    is sharded: Megatron's distributed optimizer over DP x CP and expert DP, ZeRO >= 1, FSDP2's
    sharded parameters; 1 otherwise) x :func:`optimizer_bytes_per_param` over the achievable
    HBM bandwidth (``hbm_bytes_per_s``, B/s: the profile's bandwidth x ``memory_efficiency``).
    The step follows the last gradient reduction and nothing overlaps it. Example: 8e9
    parameters over 64 ranks at 34 B each and 6.4e12 B/s (a B200's 8 TB/s x 0.8): 0.66 ms.
    """
    if hbm_bytes_per_s <= 0:
        return 0.0
    updated = dense / max(shard, 1) + expert / max(expert_shard, 1)
    return updated * optimizer_bytes_per_param(spec) / hbm_bytes_per_s


def optimizer_shards(spec: TrainSpec, plan: Plan) -> tuple[int, int]:
    """(dense, expert) ranks the optimizer states are sharded over: Megatron's distributed
    optimizer (and Megatron-FSDP) over DP x CP / expert DP; DeepSpeed ZeRO >= 1 over DP x CP;
    FSDP2 over its data-parallel mesh; (1, 1) when every rank steps every parameter."""
    d = plan.derived
    n, n_e = max(d.dp * d.cp, 1), max(d.expert_dp or 1, 1)
    sharding = zero_layout(spec).optimizer_sharding
    if sharding is Sharding.replicated:
        return 1, 1
    if sharding is Sharding.dp_cp:
        return n, n
    return n, n_e


def step_fixed_seconds(
    spec: TrainSpec, plan: Plan, dense: float, expert: float, hbm_bytes_per_s: float
) -> float:
    """What a step costs besides its micro-batches and their collectives (seconds, one GPU):
    the optimizer step (:func:`optimizer_step_seconds`; none on the GPU with DeepSpeed's CPU
    optimizer offload, whose host step :func:`offload_seconds` counts, nor with FSDP2's CPU
    offload, :func:`.fsdp.offload_seconds`) and ``cluster.step_overhead_us`` of host time per
    step."""
    host = max(spec.cluster.step_overhead_us, 0.0) * 1e-6
    if (
        not spec.cluster.optimizer_step
        or spec.training.offload_optimizer is not Offload.none
        or ESTIMATES[spec.engine].optimizer_on_host(spec)
    ):
        return host
    shard, eshard = optimizer_shards(spec, plan)
    return optimizer_step_seconds(spec, dense, expert, shard, eshard, hbm_bytes_per_s) + host


def stage_compute_flops(spec: TrainSpec, plan: Plan) -> list[float]:
    """Executed FLOPs of each stage for one step (whole stage, all its GPUs)."""
    d, tr = plan.derived, spec.training
    gbs, s = tr.global_batch_size, spec.model.seq_length
    tokens, s2 = gbs * s, gbs * s * s
    out = []
    stages, reruns = plan_stage_layers(plan), plan_rerun_masks(plan)
    for r, idx in enumerate(stages):
        per_layer = [layer_flops(spec, is_moe_layer(spec, i), tokens, s2) for i in idx]
        f = sum(per_layer)
        core = s2 * model_flop_terms(spec, 1, 0, 0).core_per_s2
        parts = recompute_parts(spec, len(idx))
        if parts is not None:  # engine=fsdp: torchtitan's modes (fsdp_ac.recompute_parts)
            f += (
                sum(
                    (fl - core) * g + core * at
                    for fl, (g, at, _) in zip(per_layer, parts, strict=True)
                )
                / 3
            )
        elif tr.recompute is Recompute.full:
            f += sum(fl for fl, re in zip(per_layer, reruns[r], strict=True) if re) / 3
        elif tr.recompute is Recompute.selective:
            f += core * len(idx) / 3
        if r == len(stages) - 1:
            f += tokens * 6 * spec.model.hidden_size * d.padded_vocab_size
        out.append(f)
    return out


def offload_seconds(
    spec: TrainSpec,
    zero: int,
    offload_optimizer: bool,
    offload_param: bool,
    params: float,
    shard: int,
    num_microbatches: int,
) -> float:
    """Exposed seconds per step that DeepSpeed's CPU / NVMe offload adds on one GPU of a stage
    with ``params`` parameters (per GPU, after TP / PP), its ZeRO partition being
    ``1 / shard`` of them (``shard`` = dp x cp).

    * optimizer offload (ZeRO >= 1): after the backward the CPU Adam step over the rank's
      partition, at :data:`CPU_ADAM_BYTES_PER_PARAM` through the node's host memory bandwidth
      shared by its GPUs (:data:`HOST_MEMORY_BYTES_PER_S`), then the updated 16-bit partition
      copied to the GPU over PCIe (:data:`PCIE_BYTES_PER_S`). The gradients' copy to the host
      overlaps the backward; the CPU step and the copy back sit between one step's backward
      and the next forward (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840, its single-GPU
      schedule). NVMe adds disk reads, not counted.
    * parameter offload (ZeRO-3): every micro-batch copies the partition to the GPU before its
      forward and backward all-gathers: ``2 M`` PCIe copies of 2 bytes per parameter.

    The copies to the GPU are of the training dtype: 2 bytes per parameter, 4 in fp32 (also
    the copy the CPU step writes).

    The host figures are round numbers, not cluster keys: read the result as a floor (0 without
    offload or with another engine)."""
    if not traits(spec).zero_offload or shard < 1:
        return 0.0
    part = params / shard
    gpn = max(spec.cluster.gpus_per_node, 1)
    pb = 4 if spec.training.precision is Precision.fp32 else 2  # the GPU's parameter copy
    out = 0.0
    if offload_optimizer and zero >= 1:
        adam = CPU_ADAM_BYTES_PER_PARAM - 2 + pb
        out += part * adam / (HOST_MEMORY_BYTES_PER_S / gpn)
        out += part * pb / PCIE_BYTES_PER_S
    if offload_param and zero >= 3:
        out += 2 * num_microbatches * part * pb / PCIE_BYTES_PER_S
    return out


def _plan_offload_seconds(spec: TrainSpec, plan: Plan, sp: StageParams, compute: float) -> float:
    """:func:`offload_seconds` for the plan's ZeRO stage and offload keys, plus the engine's own
    offload (:attr:`.engines.EngineEstimate.offload_seconds`, FSDP2's ``CPUOffloadPolicy``) for
    a stage holding ``sp`` whose compute takes ``compute`` seconds per step."""
    t, d = spec.training, plan.derived
    own = ESTIMATES[spec.engine].offload_seconds(spec, plan, sp, compute)
    return own + offload_seconds(
        spec,
        zero_layout(spec).zero_stage,
        t.offload_optimizer is not Offload.none,
        t.offload_param is not Offload.none,
        sp.total,
        d.dp * d.cp,
        d.num_microbatches,
    )


def seed_step_time(
    spec: TrainSpec,
    plan: Plan,
    comms: list[StageComm],
    bubble: float,
    model_flops: float,
    *,
    sps: list[StageParams] | None = None,
) -> StepTime:
    """The step time of ``cluster.time_model: seed`` (see the module docstring)."""
    d, cl = plan.derived, spec.cluster
    world, p = d.world_size, d.pp
    peak = filled(cl.peak_tflops, "cluster.peak_tflops") * 1e12
    eff = cl.compute_efficiency if cl.compute_efficiency and cl.compute_efficiency > 0 else 1.0
    overlap = min(max(cl.comm_overlap or 0.0, 0.0), 1.0)
    gpus_per_stage = max(world // max(p, 1), 1)
    tokens_mb = spec.model.seq_length / max(d.cp, 1) * spec.training.micro_batch_size
    eff *= tokens_mb / (tokens_mb + max(cl.gemm_half_efficiency_tokens, 0))
    reruns = plan_rerun_masks(plan)
    sps = stage_params(spec, plan) if sps is None else sps
    best: StepTime | None = None
    for r, (fl, sc) in enumerate(zip(stage_compute_flops(spec, plan), comms, strict=True)):
        passes = 2 * d.layers_per_stage[r] + sum(reruns[r])
        launch = passes * d.num_microbatches * cl.layer_overhead_us * 1e-6
        compute = (fl / gpus_per_stage / (eff * peak) if peak > 0 else 0.0) + launch
        sec = sc.seconds_by_axis()
        exposed = (1 - overlap) * (sec["tp"] + sec["cp"] + sec["ep"]) + sec["pp"]
        # the bubble's share of the stretched work: (C + X) b / (1 - b), exactly 0 for b = 0
        # (``piped - compute - exposed`` left a rounding residue such as -1.1e-16 s)
        idle = max((compute + exposed) * bubble / (1 - bubble), 0.0)
        off = _plan_offload_seconds(spec, plan, sps[r], compute)
        total = compute + exposed + idle + (1 - overlap) * sec["dp"] + off
        if best is None or total > best.step_time_seconds:
            best = StepTime(
                total,
                compute,
                exposed + (1 - overlap) * sec["dp"],
                idle,
                r,
                0.0,
                0.0,
                offload_seconds=off,
            )
    assert best is not None
    t = best.step_time_seconds
    tokens = spec.training.global_batch_size * spec.model.seq_length
    tps = tokens / t if t > 0 else 0.0
    mfu = model_flops / (t * world * peak) if t > 0 and peak > 0 else 0.0
    for c in comms[best.critical_stage].collectives.values():
        hide = 0.0 if c.axis == "pp" else overlap
        c.exposed_seconds = (1 - hide) * c.seconds
    return StepTime(
        t,
        best.compute_seconds,
        best.exposed_comm_seconds,
        best.bubble_seconds,
        best.critical_stage,
        tps,
        min(max(mfu, 0.0), 1.0),
        offload_seconds=best.offload_seconds,
    )


def step_time(
    spec: TrainSpec,
    plan: Plan,
    comms: list[StageComm],
    bubble: float,
    model_flops: float,
    *,
    sps: list[StageParams] | None = None,
) -> StepTime:
    """Predicted step time of the slowest stage: the kernel model (default) or the seed model.
    ``sps``: :func:`~.params.stage_params` of the plan when the caller has it already."""
    if spec.cluster.time_model is TimeModel.seed:
        return seed_step_time(spec, plan, comms, bubble, model_flops, sps=sps)
    return kernel_step_time(spec, plan, comms, bubble, model_flops, sps=sps)


#: Megatron-Core DDP's default bucket: max(40M, 1M x data-parallel size) parameters
#: (``distributed_data_parallel.py``, DistributedDataParallelConfig.bucket_size None).
BUCKET_MIN_PARAMS = 40_000_000


def _dp_exposed(
    spec: TrainSpec,
    plan: Plan,
    sc: StageComm,
    r: int,
    params: float,
    fwd_mb: float,
    bwd_mb: float,
    compute_step: float,
    n_layers: int,
) -> None:
    """Exposed seconds of the data-parallel collectives of stage ``r`` (sets each
    collective's ``exposed_seconds``).

    Megatron-Core DDP with ``overlap_grad_reduce``: gradients are reduced bucket by bucket while
    the last micro-batch's backward runs; the last bucket is exposed, and whatever does not fit
    in that backward. Stages after the first use one bucket (Megatron disables bucketing there:
    their DP communication overlaps the pipeline's drain, ``r`` backward slots). With
    ``overlap_param_gather`` the distributed optimizer's parameter all-gather overlaps the next
    step's first forward the same way (on stage ``r`` > 0 the ``r`` forward slots of the
    pipeline's warm-up). Without the switches the collectives are exposed.
    ZeRO-3 (engine=deepspeed): parameter all-gathers are prefetched a layer ahead and the
    gradient reduce-scatter runs behind backward, every micro-batch: exposed is what exceeds the
    compute, plus one layer's gather. Megatron-FSDP (zero_stage 3 on engine=megatron) prefetches
    the next TransformerLayer's gather and reduce-scatters behind the next layer's backward as
    FSDP2 does: :func:`_fsdp_exposed`. The hidden part is not free: the compute it overlaps runs
    slower (:func:`with_interference`), and that is part of the collective's exposed seconds.
    """
    _dp_overlap(spec, plan, sc, r, params, fwd_mb, bwd_mb, compute_step, n_layers)
    for c in sc.collectives.values():  # what the hidden part costs the compute it overlaps
        if c.axis == "dp":
            c.exposed_seconds = with_interference(c.seconds, c.exposed_seconds)


#: Compute slowdown while an NCCL collective runs concurrently (its kernels take SMs and HBM
#: bandwidth): 18.9 % on average over GPT and Llama training on A100, H100, MI250 and MI210
#: (Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated
#: Distributed Deep Learning", arXiv 2507.03114, abstract: average 18.9 %, at most 40 %).
OVERLAP_SLOWDOWN = 0.189


def with_interference(seconds: float, exposed: float) -> float:
    """A collective's cost to the step: its exposed seconds plus what its hidden part slows the
    compute it overlaps (:data:`OVERLAP_SLOWDOWN`): the work that runs during ``seconds -
    exposed`` at ``1 - OVERLAP_SLOWDOWN`` of its rate takes ``s / (1 - s)`` of that longer.

    >>> round(with_interference(1.0, 0.25), 4)  # 0.75 s hidden: 0.75 x 0.189 / 0.811
    0.4248
    """
    hidden = max(seconds - exposed, 0.0)
    return exposed + hidden * OVERLAP_SLOWDOWN / (1 - OVERLAP_SLOWDOWN)


def _dp_overlap(
    spec: TrainSpec,
    plan: Plan,
    sc: StageComm,
    r: int,
    params: float,
    fwd_mb: float,
    bwd_mb: float,
    compute_step: float,
    n_layers: int,
) -> None:
    """The exposed seconds of :func:`_dp_exposed` before the interference of the hidden part."""
    d, tr = plan.derived, spec.training
    zero = zero_layout(spec)
    if zero.dp_sync is DpSync.fsdp_units:
        _fsdp_exposed(sc, compute_step, n_layers)
        return
    group = max(d.dp * d.cp, 1)
    bucket = max(BUCKET_MIN_PARAMS, 1_000_000 * group)
    nb = max(math.ceil(params / bucket), 1) if r == 0 else 1
    drain = r * bwd_mb
    for c in sc.collectives.values():
        if c.axis != "dp":
            continue
        if zero.dp_sync is DpSync.zero:
            if zero.zero_stage >= 3:
                # the first layer's gather of every micro-batch has nothing to hide behind
                layer = c.seconds / max(n_layers, 1)
                c.exposed_seconds = min(max(c.seconds - compute_step, 0.0) + layer, c.seconds)
            elif r > 0:
                c.exposed_seconds = max(c.seconds - drain, 0.0)
            else:
                last = c.seconds / max(nb, 1)
                c.exposed_seconds = last + max(c.seconds - last - bwd_mb, 0.0)
            continue
        gather = "all_gather" in c.name
        on = bool(tr.overlap_param_gather) if gather else bool(tr.overlap_grad_reduce)
        if not on:
            c.exposed_seconds = c.seconds
            continue
        if r > 0:  # one bucket: the reduce behind the drain, the gather behind the warm-up
            c.exposed_seconds = max(c.seconds - (r * fwd_mb if gather else drain), 0.0)
            continue
        window = fwd_mb if gather else bwd_mb
        last = c.seconds / nb
        c.exposed_seconds = last + max(c.seconds - last - window, 0.0)


#: The TP collectives of Transformer Engine linears (what ``tp_comm_overlap`` overlaps).
_TE_TP_COLLECTIVES = ("all_gather+reduce_scatter",)


def tp_exposed_share(
    tp_mb: float, gemm_mb: float, tp: int, tp_comm_overlap: bool, comm_overlap: float
) -> float:
    """The exposed fraction (0..1) of one micro-batch's TP collectives (``tp_mb`` seconds) on a
    stage whose layers' GEMMs take ``gemm_mb`` seconds per micro-batch.

    Without ``tp_comm_overlap`` Megatron-Core runs the sequence-parallel all-gather /
    reduce-scatter between the GEMMs: exposed but for ``cluster.comm_overlap``, the fraction it
    stands for. With it, Transformer Engine splits each collective into ``tp`` ring steps
    pipelined with the GEMM's chunks (userbuffers; megatron-core 0.16.1
    ``extensions/transformer_engine.py``, TE ``initialize_ub``): the all-gather's chunks run
    under the GEMMs of the chunks already received, the reduce-scatter's last chunk is left, so
    about half a chunk of every collective stays exposed, ``tp_mb / (2 tp)``, plus what exceeds
    the GEMMs it hides behind."""
    if tp_mb <= 0:
        return 0.0
    if not tp_comm_overlap or tp <= 1:
        return 1 - comm_overlap
    exposed = tp_mb / (2 * tp) + max(tp_mb * (1 - 1 / (2 * tp)) - gemm_mb, 0.0)
    return min(exposed / tp_mb, 1.0)


def ep_exposed_share(
    ep_mb: float, compute_mb: float, num_microbatches: int, a2a_overlap: bool, comm_overlap: float
) -> float:
    """The exposed fraction (0..1) of the expert-parallel all-to-all (``ep_mb`` seconds per
    micro-batch) on a stage computing ``compute_mb`` seconds per micro-batch.

    Without ``overlap_moe_expert_parallel_comm`` the dispatch and combine wait on the network
    (``cluster.comm_overlap`` stands for any overlap). With it Megatron-Core's combined 1F1B
    schedule (``pipeline_parallel/combined_1f1b.py``) runs one micro-batch's forward with
    another's backward, each's A2A under the other's compute: the first forward's and the last
    backward's A2A have no partner (one micro-batch's worth of the step's ``M``), the rest is
    hidden up to the compute it runs under."""
    if ep_mb <= 0:
        return 0.0
    if not a2a_overlap:
        return 1 - comm_overlap
    M = max(num_microbatches, 1)
    steady = ep_mb * (M - 1) / M
    exposed = ep_mb / M + max(steady - compute_mb, 0.0)
    return min(exposed / ep_mb, 1.0)


def _fsdp_exposed(sc: StageComm, compute_step: float, n_layers: int) -> None:
    """engine=fsdp: FSDP2 prefetches each block's all-gather one block ahead (forward and
    backward) and reduce-scatters a block's gradients while the next block's backward runs
    (torch ``_fsdp_state.py`` implicit prefetching; Zhao et al. 2023, arXiv 2304.11277 §3.3),
    every micro-batch. The collectives share the network, so together they hide behind the
    stage's compute of the step: exposed is what exceeds it, plus the first block's share (its
    gather has nothing to run behind), spread over the collectives by their seconds."""
    cols = [c for c in sc.collectives.values() if c.axis == "dp"]
    total = sum(c.seconds for c in cols)
    if total <= 0:
        return
    exposed = min(max(total - compute_step, 0.0) + total / max(n_layers, 1), total)
    for c in cols:
        c.exposed_seconds = exposed * c.seconds / total


def kernel_step_time(
    spec: TrainSpec,
    plan: Plan,
    comms: list[StageComm],
    bubble: float,
    model_flops: float,
    *,
    sps: list[StageParams] | None = None,
) -> StepTime:
    """Step time from kernel times (:mod:`.kernels`) and per-axis overlap.

    Per stage and micro-batch: forward ``F`` and backward ``B`` of its layers (plus the output
    layer on the last stage), the recompute (full: the re-run layers' forward; selective: the
    attention core's forward), ``layer_overhead_us`` per layer and pass. Exposed communication
    per micro-batch: TP and EP as :func:`tp_exposed_share` / :func:`ep_exposed_share` leave them
    (``training.tp_comm_overlap`` and ``overlap_moe_expert_parallel_comm``; without them
    ``1 - comm_overlap``), CP what the ring's p2p does not hide behind the attention core (the next
    K/V block is sent while the current one is computed), PP p2p exposed with 1F1B and hidden by
    the interleaved schedule's overlapped p2p. The pipeline stretches ``M x (F + B + X)`` by the
    bubble; the data-parallel collectives add what their overlap leaves exposed
    (:func:`_dp_exposed`).
    """
    d, cl, tr = plan.derived, spec.cluster, spec.training
    world, M = d.world_size, d.num_microbatches
    hw = hardware(spec)
    overlap = min(max(cl.comm_overlap or 0.0, 0.0), 1.0)
    reruns = plan_rerun_masks(plan)
    sps = stage_params(spec, plan) if sps is None else sps
    # userbuffers exchange inside the NVLink domain only (TRC382)
    tp_overlap = bool(tr.tp_comm_overlap) and tp_in_nvlink_domain(
        spec.parallel.tp, cl.nvlink_domain_size, cl.gpus_per_node, world
    )
    cache: dict[tuple[bool, str], Any] = {}
    best: StepTime | None = None
    best_kinds: dict[str, float] = {}
    for r, (idx, sc) in enumerate(zip(plan_stage_layers(plan), comms, strict=True)):
        sk = _stage_kernels(spec, plan, hw, r, idx, reruns[r], cache)
        exposed_mb = _stage_exposed_per_microbatch(spec, plan, sc, sk, tp_overlap, overlap)
        compute = sk.compute_mb * M
        piped = compute + exposed_mb * M
        idle = max(piped * bubble / (1 - bubble), 0.0)
        _dp_exposed(spec, plan, sc, r, sps[r].total, sk.fwd, sk.bwd, compute, len(idx))
        dp_exp = sum(c.exposed_seconds for c in sc.collectives.values() if c.axis == "dp")
        off = _plan_offload_seconds(spec, plan, sps[r], compute)
        opt = step_fixed_seconds(spec, plan, sps[r].dense, sps[r].expert, hw.hbm)
        total = piped + idle + dp_exp + off + opt
        if best is None or total > best.step_time_seconds:
            best = StepTime(
                total,
                compute + opt,
                exposed_mb * M + dp_exp,
                idle,
                r,
                0.0,
                0.0,
                offload_seconds=off,
            )
            best_kinds = {k: v * M for k, v in sk.kinds.items()}
            best_kinds["optimizer"] = opt
    assert best is not None
    return _with_throughput(spec, best, best_kinds, model_flops, world)


@dataclass(slots=True)
class _StageKernels:
    """One stage's kernel seconds per micro-batch (:func:`_stage_kernels`)."""

    fwd: float
    """Forward of its layers (and the output layer on the last stage)."""
    bwd: float
    """Backward, with the recompute."""
    attn_core: float
    """The attention core's forward + backward (what the CP ring hides behind)."""
    gemm_mb: float
    """The layers' GEMMs, forward + backward (what TP userbuffers hide behind)."""
    launch: float
    """``layer_overhead_us`` per layer and pass."""
    kinds: dict[str, float]
    """Seconds by kernel kind: gemm, attention, elementwise, fixed, recompute."""

    @property
    def compute_mb(self) -> float:
        """Compute seconds of one micro-batch: forward + backward + launch overhead."""
        return self.fwd + self.bwd + self.launch


def _stage_kernels(
    spec: TrainSpec,
    plan: Plan,
    hw: Hw,
    r: int,
    idx: list[int],
    rerun: list[bool],
    cache: dict[tuple[bool, str], Any],
) -> _StageKernels:
    """Kernel seconds per micro-batch of stage ``r`` holding layers ``idx`` (``rerun``: the
    layers full recompute re-runs; ``cache``: :func:`layer_time` by (MoE, precision))."""
    tr, cl = spec.training, spec.cluster
    kinds = dict.fromkeys(("gemm", "attention", "elementwise", "fixed", "recompute"), 0.0)
    fwd = bwd = attn_core = gemm_mb = 0.0
    parts = recompute_parts(spec, len(idx))
    for k, (i, re) in enumerate(zip(idx, rerun, strict=True)):
        key = (is_moe_layer(spec, i), layer_precision(spec, i))
        if key not in cache:
            cache[key] = layer_time(spec, plan, hw, *key)
        lt = cache[key]
        fwd += lt.forward
        bwd += lt.backward
        attn_core += lt.attn_f + lt.attn_b
        kinds["gemm"] += lt.gemm_f + lt.gemm_b
        gemm_mb += lt.gemm_f + lt.gemm_b
        kinds["attention"] += lt.attn_f + lt.attn_b
        kinds["elementwise"] += lt.elem_f + lt.elem_b
        kinds["fixed"] += lt.fixed_f + lt.fixed_b
        extra = 0.0
        if parts is not None:  # torchtitan's modes (fsdp_ac.recompute_parts)
            g, at, e = parts[k]
            extra = g * lt.gemm_f + at * lt.attn_f + e * (lt.elem_f + lt.fixed_f)
        elif tr.recompute is Recompute.full and re:
            extra = lt.forward
        elif tr.recompute is Recompute.selective:
            extra = lt.attn_f
        bwd += extra
        kinds["recompute"] += extra
    if r == plan.derived.pp - 1:
        lf, lb = logits_time(spec, plan, hw)
        fwd, bwd = fwd + lf, bwd + lb
        kinds["gemm"] += lf + lb
    passes = 2 * len(idx) + sum(rerun)
    launch = passes * cl.layer_overhead_us * 1e-6
    kinds["fixed"] += launch
    return _StageKernels(fwd, bwd, attn_core, gemm_mb, launch, kinds)


def _stage_exposed_per_microbatch(
    spec: TrainSpec,
    plan: Plan,
    sc: StageComm,
    sk: _StageKernels,
    tp_overlap: bool,
    overlap: float,
) -> float:
    """Exposed TP, EP, CP and PP seconds of one micro-batch of a stage (see
    :func:`kernel_step_time`); sets each of those collectives' ``exposed_seconds`` (per step)."""
    d, tr = plan.derived, spec.training
    M = d.num_microbatches
    sec = sc.seconds_by_axis()
    cp_exposed = max(sec["cp"] / max(M, 1) - sk.attn_core, 0.0)
    pp_exposed = sec["pp"] / max(M, 1) if d.vpp <= 1 else 0.0
    # tp_comm_overlap hides the attention / dense MLP blocks' collectives (TE linears),
    # not the experts' ETP block or the embedding / output layer's
    tp_te = sum(
        c.seconds
        for c in sc.collectives.values()
        if c.axis == "tp" and c.name in _TE_TP_COLLECTIVES
    )
    share = {
        "tp": tp_exposed_share(
            tp_te / max(M, 1), sk.gemm_mb, spec.parallel.tp, tp_overlap, overlap
        ),
        "tp_rest": 1 - overlap,
        "ep": ep_exposed_share(
            sec["ep"] / max(M, 1),
            sk.fwd + sk.bwd,
            M,
            bool(tr.overlap_moe_expert_parallel_comm),
            overlap,
        ),
    }
    exposed_mb = (
        (share["tp"] * tp_te + share["tp_rest"] * (sec["tp"] - tp_te) + share["ep"] * sec["ep"])
        / max(M, 1)
        + cp_exposed
        + pp_exposed
    )
    for c in sc.collectives.values():
        if c.axis == "tp":
            c.exposed_seconds = (
                share["tp" if c.name in _TE_TP_COLLECTIVES else "tp_rest"] * c.seconds
            )
        elif c.axis == "ep":
            c.exposed_seconds = share["ep"] * c.seconds
        elif c.axis == "cp":
            c.exposed_seconds = cp_exposed * M
        elif c.axis == "pp":
            c.exposed_seconds = pp_exposed * M
    return exposed_mb


def _with_throughput(
    spec: TrainSpec,
    best: StepTime,
    kinds: dict[str, float],
    model_flops: float,
    world: int,
) -> StepTime:
    """The critical stage's :class:`StepTime` with tokens/s, MFU and compute by kind."""
    cl, tr = spec.cluster, spec.training
    t = best.step_time_seconds
    tokens = tr.global_batch_size * spec.model.seq_length
    peak = filled(cl.peak_tflops, "cluster.peak_tflops") * 1e12
    mfu = model_flops / (t * world * peak) if t > 0 and peak > 0 else 0.0
    return StepTime(
        t,
        best.compute_seconds,
        best.exposed_comm_seconds,
        best.bubble_seconds,
        best.critical_stage,
        tokens / t if t > 0 else 0.0,
        min(max(mfu, 0.0), 1.0),
        kinds,
        best.offload_seconds,
    )
