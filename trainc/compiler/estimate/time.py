"""Step time, tokens per second and MFU.

Per pipeline stage ``r`` (its GPUs share the stage's work, ``world / pp`` of them):

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
megatron_rules.md §4.5: ``F / (t_iter x 1e12 x W)`` over the peak), clamped to [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.compiler.estimate.comm import StageComm
from trainc.compiler.estimate.params import is_moe_layer, plan_rerun_masks, plan_stage_layers
from trainc.compiler.ir import Plan, filled
from trainc.schemas import Activation, Recompute, TrainSpec


def layer_flops(spec: TrainSpec, moe: bool, tokens: float, s2: float) -> float:
    """Model FLOPs of one layer over ``tokens`` tokens and ``s2 = sum(seq^2)`` (Megatron's
    per-layer terms of ``transformer_flops``, megatron_rules.md §4.5)."""
    m = spec.model
    h, a = m.hidden_size, m.num_attention_heads
    g = filled(m.num_query_groups, "model.num_query_groups")
    d = filled(m.kv_channels, "model.kv_channels")
    c_f = 3 if m.activation is Activation.swiglu else 2
    q = a * d
    attn = 6 * (h * (q + 2 * g * d) + q * h)
    if moe:
        mlp = 6 * h * c_f * (filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size")
                             * m.moe_router_topk
                             + (m.moe_shared_expert_intermediate_size or 0))
    else:
        mlp = 6 * h * c_f * filled(m.ffn_hidden_size, "model.ffn_hidden_size")
    return tokens * (attn + mlp) + s2 * 6 * q


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
        core = s2 * 6 * spec.model.num_attention_heads * (
            filled(spec.model.kv_channels, "model.kv_channels"))
        if tr.recompute is Recompute.full:
            f += sum(fl for fl, re in zip(per_layer, reruns[r], strict=True) if re) / 3
        elif tr.recompute is Recompute.selective:
            f += core * len(idx) / 3
        if r == len(stages) - 1:
            f += tokens * 6 * spec.model.hidden_size * d.padded_vocab_size
        out.append(f)
    return out


def step_time(spec: TrainSpec, plan: Plan, comms: list[StageComm], bubble: float,
              model_flops: float) -> StepTime:
    """Predicted step time of the slowest stage (see the module docstring)."""
    d, cl = plan.derived, spec.cluster
    world, p = d.world_size, d.pp
    peak = filled(cl.peak_tflops, "cluster.peak_tflops") * 1e12
    eff = cl.compute_efficiency if cl.compute_efficiency and cl.compute_efficiency > 0 else 1.0
    overlap = min(max(cl.comm_overlap or 0.0, 0.0), 1.0)
    gpus_per_stage = max(world // max(p, 1), 1)
    tokens_mb = spec.model.seq_length / max(d.cp, 1) * spec.training.micro_batch_size
    eff *= tokens_mb / (tokens_mb + max(cl.gemm_half_efficiency_tokens, 0))
    reruns = plan_rerun_masks(plan)
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
        total = compute + exposed + idle + (1 - overlap) * sec["dp"]
        if best is None or total > best.step_time_seconds:
            best = StepTime(total, compute, exposed + (1 - overlap) * sec["dp"], idle, r, 0.0,
                            0.0)
    assert best is not None
    t = best.step_time_seconds
    tokens = spec.training.global_batch_size * spec.model.seq_length
    tps = tokens / t if t > 0 else 0.0
    mfu = model_flops / (t * world * peak) if t > 0 and peak > 0 else 0.0
    return StepTime(t, best.compute_seconds, best.exposed_comm_seconds, best.bubble_seconds,
                    best.critical_stage, tps, min(max(mfu, 0.0), 1.0))
