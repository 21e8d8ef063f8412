"""Closed-form per-candidate cost model used to *rank* layouts during the search.

It evaluates ~10^5 layouts per second in plain Python, so it keeps only the dominant terms of the
full estimator in :mod:`trainc.compiler.estimate` (which reports the numbers of the finalists):

* model states: Megatron DDP 18 B/param (bf16) or distributed optimizer 6 + 12/(dp*cp)
  (Megatron-LM core_v0.16.1 docs/user-guide/features/dist_optimizer.md); DeepSpeed ZeRO stages
  by the 2+2+12 B/param accounting (Rajbhandari et al. 2020, arXiv:1910.02054 §5 and Figure 1;
  worked example A, docs/references.md: stage 1 = 4 + 12/d, stage 2 = 2 + 14/d, stage 3 = 16/d);
* activations: the full estimator's per-layer bytes (:mod:`trainc.compiler.estimate.activations`:
  Korthikanti et al. 2022 Table 2 generalised to GQA, SwiGLU and MoE token copies; 2*s*b*h/tp
  per layer with full recompute), s divided by cp, MoE layers weighted by their share, times the
  in-flight micro batches of 1F1B on the first stage (min(pp, M)) and the interleaving factor
  1 + (pp-1)/(pp*vpp);
* time: Megatron's model FLOPs at compute_efficiency*peak, TP/CP/EP traffic on the NVLink or
  fabric bandwidth, bubble (pp-1)/(vpp*M + pp-1) (interleaved 1F1B, Narayanan et al. 2021,
  arXiv:2104.04473 §2.2), DP gradient
  reduce-scatter + all-gather (ring factor (d-1)/d) partly hidden by comm_overlap.

That is the ``cluster.time_model: seed`` path. With ``kernels`` (the default) the time terms are
the kernel model's (:func:`_kernel_grid`): :func:`trainc.compiler.estimate.kernels.layer_time_of`
once per (MoE, precision, tp, cp, ep, etp, sp, micro batch) class, memoised, and the
communication and DP overlap of :func:`trainc.compiler.estimate.time.kernel_step_time`
(docs/planner.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from trainc.compiler.derive import num_moe_layers, padded_vocab, tp_in_nvlink_domain
from trainc.compiler.estimate.activations import dense_layer_bytes, moe_mlp_extra_bytes
from trainc.compiler.estimate.comm import (
    EpDispatch,
    attention_tp_ratio,
    ep_dispatch_seconds,
    zero_dp_bytes,
)
from trainc.compiler.estimate.flops import mla_dims, model_flop_terms
from trainc.compiler.estimate.kernels import (
    LOW_PRECISIONS,
    Hw,
    LayerTime,
    activation_bytes,
    attention_kv_length,
    fused_attention,
    hardware,
    layer_precision,
    layer_time_of,
    logits_time_of,
)
from trainc.compiler.estimate.memory import megatron_bytes_per_param
from trainc.compiler.estimate.params import head_dims, layer_params
from trainc.compiler.estimate.time import (
    BUCKET_MIN_PARAMS,
    ep_exposed_share,
    offload_seconds,
    optimizer_step_seconds,
    tp_exposed_share,
    with_interference,
)
from trainc.compiler.normalize import default_tp_comm_overlap
from trainc.compiler.validate.util import divisors
from trainc.schemas import (
    Activation,
    CpCommType,
    Engine,
    Fp8Format,
    StateDtype,
    TimeModel,
    TrainSpec,
)

BYTES_BF16 = 2
#: Largest virtual pipeline degree and micro batch the search tries.
MAX_VPP = 8
MAX_MBS = 32


@dataclass(frozen=True, slots=True)
class ModelConsts:
    """Per-model constants, computed once per search (counts in parameters, FLOPs per step)."""

    p_layer_tp: float
    """Per layer, tensor-parallel-sharded dense params (attention + dense/shared MLP)."""
    p_layer_rep: float
    """Per layer, replicated params (norms, router)."""
    p_layer_experts: float
    """Per MoE layer, routed expert params (all experts)."""
    p_embedding: float
    """h * padded vocab (at tp=1; the padded vocab depends on tp only by < 0.5 %)."""
    moe_fraction: float
    """Fraction of layers that are MoE layers."""
    flops_per_step: float
    """Megatron num_floating_point_operations for the global batch (FLOPs)."""
    attn_core_fraction: float
    """Share of flops_per_step in the attention core (recomputed by selective recompute)."""
    logits_flops_per_step: float = 0.0
    """The output layer's share of flops_per_step (6 h V per token, on the last stage)."""


def model_consts(spec: TrainSpec) -> ModelConsts:
    """Parameter and FLOP constants of a normalized spec: the full estimator's per-layer counts
    (:func:`trainc.compiler.estimate.params.layer_params`) and Megatron's FLOPs
    (:func:`trainc.compiler.estimate.flops.model_flop_terms`, Megatron-LM core_v0.16.1
    ``num_floating_point_operations``)."""
    m, t = spec.model, spec.training
    L = m.num_layers
    n_moe = num_moe_layers(spec)
    moe_frac = n_moe / L
    dense = layer_params(spec, False)
    moe = layer_params(spec, True) if n_moe else dense
    p_tp = (1 - moe_frac) * dense.tp_sharded + moe_frac * moe.tp_sharded
    p_rep = (1 - moe_frac) * dense.replicated + moe_frac * moe.replicated
    V = m.vocab_size
    terms = model_flop_terms(spec, L, n_moe, V)
    B, s = t.global_batch_size, m.seq_length
    per_tok = terms.per_token_layers + terms.per_token_logits
    core = terms.core_per_s2 * s  # per token: S2 / T = s for unpacked sequences
    flops = B * s * (per_tok + core)
    return ModelConsts(
        p_tp,
        p_rep,
        float(moe.expert),
        m.hidden_size * V,
        moe_frac,
        float(flops),
        core / (per_tok + core),
        float(B * s * terms.per_token_logits),
    )


def _fsdp_state_bytes(
    zero: int, precision: str, shard: int, offload_opt: bool, offload_param: bool
) -> float:
    """engine=fsdp (:mod:`trainc.compiler.estimate.fsdp`): fp32 shards of params, grads and
    Adam moments, 16 B/param over ``shard`` ranks (the gathered blocks ignored)."""
    return 16.0 / shard


def _megatron_state_bytes(
    zero: int, precision: str, shard: int, offload_opt: bool, offload_param: bool
) -> float:
    """engine=megatron: DDP keeps params + grads + optimizer whole (18 B/param in bf16), the
    distributed optimizer (zero 1) shards the optimizer's 12 B/param, Megatron-FSDP (zero 3)
    shards everything (gathered layers ignored)."""
    whole = {"fp32": (8, 8), "fp16": (4, 16)}.get(precision, (6, 12))  # params+grads, opt
    if zero == 3:
        return (whole[0] + whole[1]) / shard
    return float(sum(whole)) if zero == 0 else whole[0] + whole[1] / shard


def _deepspeed_state_bytes(
    zero: int, precision: str, shard: int, offload_opt: bool, offload_param: bool
) -> float:
    """engine=deepspeed: ZeRO stage 0..3 by the 2 + 2 + 12 B/param accounting (Rajbhandari et
    al. 2020, arXiv:1910.02054 §5); an offloaded optimizer keeps no GPU bytes, an offloaded
    parameter (stage 3) none either."""
    opt = 0.0 if offload_opt else 12.0
    if zero == 0:
        return 4 + opt
    if zero == 1:
        return 4 + opt / shard
    if zero == 2:
        return 2 + (2 + opt) / shard
    return (0.0 if offload_param else 2 / shard) + (2 + opt) / shard


ENGINE_STATE_BYTES = {
    "fsdp": _fsdp_state_bytes,
    "megatron": _megatron_state_bytes,
    "deepspeed": _deepspeed_state_bytes,
}
"""engine name -> its model-state bytes per parameter on one GPU, ``f(zero, precision, shard,
offload_opt, offload_param)`` (B/param)."""


def state_bytes_per_param(
    engine: str, zero: int, precision: str, shard: int, offload_opt: bool, offload_param: bool
) -> float:
    """Model-state bytes per parameter on one GPU (params + grads + optimizer), by
    :data:`ENGINE_STATE_BYTES`.

    >>> state_bytes_per_param("megatron", 1, "bf16", 8, False, False)
    7.5
    >>> state_bytes_per_param("deepspeed", 3, "bf16", 16, False, False)
    1.0
    >>> state_bytes_per_param("fsdp", 1, "bf16", 16, False, False)  # fp32 shards: 4 + 4 + 8
    1.0
    >>> state_bytes_per_param("megatron", 3, "bf16", 18, False, False)  # Megatron-FSDP
    1.0
    """
    return ENGINE_STATE_BYTES.get(engine, _deepspeed_state_bytes)(
        zero, precision, shard, offload_opt, offload_param
    )


TERMS = (
    "compute",
    "tp",
    "cp",
    "ep",
    "pp",
    "dp",
    "bubble",
    "bubble_seconds",
    "tp_cross",
    "intra_over_inter",
    "lower_bound",
    "offload",
)
"""Names of the terms :func:`score_grid` yields per layout (seconds, except ``bubble`` (a
fraction), ``tp_cross`` (0/1) and ``intra_over_inter`` (a ratio)). ``lower_bound`` is
:func:`step_lower_bound`'s value: the planner's branch and bound prunes with it. ``offload``:
DeepSpeed CPU offload's seconds (:func:`trainc.compiler.estimate.time.offload_seconds`)."""


def step_lower_bound(
    flops_gpu: float,
    selective_extra: float,
    peak_eff: float,
    min_layers: int,
    microbatches: int,
    overhead_s: float,
    bubble: float,
) -> float:
    """A lower bound (seconds) of the full estimator's step time for one layout.

    The full estimator (:func:`trainc.compiler.estimate.time.step_time`) takes, over the
    pipeline stages r, ``(C_r + X_r) / (1 - bubble) + DP`` with ``C_r`` = the stage's executed
    FLOPs per GPU / (efficiency x peak) + ``layer_overhead_us`` x (2 x layers_r + reruns) x M and
    X_r, DP >= 0. The stage with the most FLOPs has at least the average FLOPs per GPU (the model
    FLOPs / world, at the unpadded vocabulary), plus the attention recompute of selective
    recompute (full recompute's rerun is left out: a bound), and every stage has at least
    ``min_layers`` layers, so ``(flops_gpu x (1 + selective_extra) / peak_eff + 2 x min_layers x
    M x overhead_s) / (1 - bubble)`` is below the full step time. ``peak_eff`` is FLOP/s
    (peak x compute_efficiency x the micro batch's GEMM efficiency)."""
    compute = (
        flops_gpu * (1 + selective_extra) / peak_eff + 2 * min_layers * microbatches * overhead_s
    )
    return compute / (1 - bubble)


class _SeedBandwidths(NamedTuple):
    """Bandwidths (B/s) the seed time model prices each axis at: NVLink (``intra``) when the
    axis' groups stay inside one NVLink domain, else the fabric (``inter``)."""

    intra: float
    inter: float
    tp: float
    cp: float
    ep: float
    dp: float
    pp: float


def _seed_bandwidths(
    spec: TrainSpec, W: int, dom: int, tp: int, cp: int, dp: int, ep: int, etp: int
) -> _SeedBandwidths:
    """Per-axis bandwidths of one grid (``dom``: GPUs per NVLink domain, ``W``: world size)."""
    c = spec.cluster
    eff_bw = c.comm_efficiency * 1e9
    intra, inter = (
        (c.intra_node_bandwidth_gbps or 1) * eff_bw,
        (c.inter_node_bandwidth_gbps or 1) * eff_bw,
    )
    bw_tp = intra if tp <= dom and dom % tp == 0 else inter
    bw_cp = intra if tp * cp <= dom and dom % (tp * cp) == 0 else inter
    bw_ep = intra if etp * ep <= dom and dom % (etp * ep) == 0 else inter
    # the full estimator prices an axis at the intra-domain bandwidth when its groups stay in
    # one NVLink domain (rank map: DP x CP groups span tp*cp*dp consecutive-stride ranks, PP
    # groups the whole world), not one node: on an NVL72 rack a 4-GPU tray is not the domain
    bw_dp = intra if tp * cp * dp <= dom and dom % (tp * cp * dp) == 0 else inter
    bw_pp = intra if W <= dom else inter
    return _SeedBandwidths(intra, inter, bw_tp, bw_cp, bw_ep, bw_dp, bw_pp)


def _grid_choices(
    spec: TrainSpec,
    fx: dict[str, Any],
    slots: tuple[int, ...],
    tp: int,
    cp: int,
    pp: int,
    dp: int,
) -> tuple[list[int], list[str], list[int]]:
    """The variable choices of one grid: (virtual pipeline degrees, cp_comm_types, micro
    batches), each the spec's fixed value when it sets one. A vpp divides every stage's
    ``slots``; engine=fsdp (torchtitan) has no cp_comm_type choice and an uneven split only with
    vpp 1 (TRC344; :func:`trainc.compiler.targets.fsdp.torchtitan_stage_split`); a2a needs the
    heads and KV groups per TP rank divisible by cp; a micro batch divides gbs / dp."""
    m = spec.model
    a = m.num_attention_heads
    g = m.num_query_groups or a
    fsdp = spec.engine is Engine.fsdp
    vpps = (
        [fx["parallel.vpp"]]
        if fx["parallel.vpp"] is not None
        else [
            v
            for v in range(1, MAX_VPP + 1)
            if all(n % v == 0 for n in slots)
            and (v == 1 or pp > 1)
            and (v == 1 or not fsdp or len(set(slots)) == 1)
        ]
    )
    cps = (
        [fx["parallel.cp_comm_type"]]
        if fx["parallel.cp_comm_type"] is not None
        else (
            ["p2p"]
            if cp == 1 or fsdp
            else ["p2p", "all_gather"]
            + (["a2a"] if (a // tp) % cp == 0 and max(g // tp, 1) % cp == 0 else [])
        )
    )
    mbss = (
        [fx["training.micro_batch_size"]]
        if fx["training.micro_batch_size"] is not None
        else [b for b in divisors(spec.training.global_batch_size // dp) if b <= MAX_MBS]
    )
    return vpps, cps, mbss


def _loaded_stage_params(
    spec: TrainSpec, k: ModelConsts, stages: tuple[int, ...], tp: int, pp: int, ep: int, etp: int
) -> tuple[float, float]:
    """(dense, expert) parameters per GPU of the most loaded pipeline stage: the first / last
    stage carry the embedding / output layer (the output on the last when untied or pp > 1)."""
    untied = spec.model.untie_embeddings_and_output_weights
    emb_first = k.p_embedding
    emb_last = k.p_embedding if (untied or pp > 1) else 0.0
    worst = 0.0
    for i, n in enumerate(stages):
        e = (emb_first if i == 0 else 0.0) + (emb_last if i == pp - 1 else 0.0)
        worst = max(worst, (n * k.p_layer_tp + e) / tp + n * k.p_layer_rep)
    return worst, max(stages) * k.moe_fraction * k.p_layer_experts / (ep * etp)


def _model_states(
    spec: TrainSpec,
    zeros: list[int],
    offloads: list[str],
    fx: dict[str, Any],
    pp: int,
    shard: int,
    edp: int,
    p_dense: float,
    p_exp: float,
    bw_dp: float,
) -> list[tuple[int, str, float, float]]:
    """The (ZeRO stage, optimizer offload) choices of one grid: ``(zero, offload, model-state
    bytes per GPU, seed-model exposed DP seconds)``. ``shard`` = dp x cp ranks the dense states
    shard over, ``edp`` the expert data-parallel ranks; ``p_dense`` / ``p_exp`` the most loaded
    stage's parameters per GPU; ``bw_dp`` B/s."""
    deepspeed = spec.engine is Engine.deepspeed
    hide = 1 - spec.cluster.comm_overlap
    precision = spec.training.precision.name
    red = (shard - 1) / shard if shard > 1 else 0.0
    grad_bytes = (p_dense + p_exp) * (4 if not deepspeed else 2)
    states = []
    zero_fixed = fx["parallel.zero_stage"] is not None
    for zero in zeros:
        if deepspeed and zero > 1 and pp > 1:
            continue
        # Megatron: the distributed optimizer (zero 1) moves fewer DP bytes (a reduce-scatter
        # of the grads + an all-gather of the bf16 params instead of an all-reduce of the
        # grads: Megatron-LM's dist_optimizer.md) and keeps less state, so without it a layout is
        # dominated whenever there is data parallelism to shard over; with none, zero 0 is the
        # same layout, simpler. Megatron-FSDP (zero 3) shards the weights and gradients too.
        if not deepspeed and not zero_fixed and zero not in ((1, 3) if shard > 1 else (0,)):
            continue
        # parameter offload (ZeRO-3 only) is not searched: the spec's value holds
        off_param = _param_offload(spec, zero)
        for off in offloads:
            if off != "none" and (not deepspeed or zero == 0):
                continue
            bpp = state_bytes_per_param(
                spec.engine.name, zero, precision, shard, off != "none", off_param
            )
            bpe = state_bytes_per_param(
                spec.engine.name, zero, precision, edp, off != "none", off_param
            )
            t_dp = hide * (red * grad_bytes * (1.5 if zero >= 1 else 2.0)) / bw_dp
            states.append((zero, off, p_dense * bpp + p_exp * bpe, t_dp))
    return states


def _act_layer(
    spec: TrainSpec, k: ModelConsts, tp: int, cp: int, sp: bool, etp: int, mbs: int
) -> tuple[float, float, float]:
    """Activation bytes per layer and micro batch of ``mbs`` sequences (full recompute, none,
    selective): the estimator's own per-layer formulas (GQA, SwiGLU, MoE), averaged over dense
    and MoE layers."""
    m = spec.model
    h, s, a = m.hidden_size, m.seq_length, m.num_attention_heads
    s_loc = s // cp
    f = m.ffn_hidden_size or 4 * h
    swiglu = m.activation is Activation.swiglu
    tsp = tp if sp else 1
    shape: dict[str, Any] = dict(
        s=s_loc,
        b=mbs,
        h=h,
        a=a,
        g=m.num_query_groups or a,
        d=m.kv_channels or h // a,
        f=f,
        t=tp,
        sp=sp,
        swiglu=swiglu,
        mla=mla_dims(spec),
        attn_dropout=m.attention_dropout > 0,
    )
    moe = 0.0
    if k.moe_fraction:
        moe = k.moe_fraction * (
            moe_mlp_extra_bytes(
                s=s_loc,
                b=mbs,
                h=h,
                t=tp,
                sp=sp,
                etp=etp,
                topk=m.moe_router_topk,
                f_e=m.moe_ffn_hidden_size or f,
                f_s=m.moe_shared_expert_intermediate_size or 0,
                num_experts=m.num_experts or 0,
                swiglu=swiglu,
            )
            - (6 if swiglu else 4) * s_loc * mbs * f / tp
        )
    lse = 4 * a * s_loc * mbs / tp
    flash = fused_attention(spec)
    none = dense_layer_bytes(**shape, with_scores=not flash) + (lse if flash else 0.0) + moe
    sel = dense_layer_bytes(**shape, with_scores=False) + moe
    return 2 * s_loc * mbs * h / tsp, none, sel


def _schedule_activations(
    rc: Any,
    frac: float,
    group: int,
    act_l: tuple[float, float, float],
    layers: int,
    inflight: float,
    buffers: float,
) -> float:
    """Activation bytes per GPU of one schedule: the per-layer bytes ``act_l`` (full
    recompute, none, selective; :func:`_act_layer`) under recompute choice ``rc`` (full
    recompute keeps one input per ``group`` layers for the ``frac`` of the layers it re-runs)
    times the stage's ``layers`` times ``inflight`` micro batches, plus the
    recomputed group's working set, plus ``buffers`` (embedding output / logits)."""
    full_l, none_l, sel_l = act_l
    per_layer = (
        frac * full_l / group + (1 - frac) * none_l
        if rc[0] == "full"
        else sel_l
        if rc[0] == "selective"
        else none_l
    )
    act = per_layer * layers * inflight
    if rc[0] == "full":
        act += sel_l * group  # the recomputed group's working set
    return act + buffers


def score_grid(
    spec: TrainSpec,
    k: ModelConsts,
    W: int,
    dom: int,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    stages: tuple[int, ...],
    ep: int,
    etp: int,
    sp: bool,
    zeros: list[int],
    recomputes: list[str],
    offloads: list[str],
    fx: dict[str, Any],
    limit: float,
    slots: tuple[int, ...] | None = None,
    cutoff: list[float] | None = None,
) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Score every (vpp, cp_comm_type, mbs, recompute, zero, offload) of one grid; yields
    (memory bytes, step seconds, the variable choices, the TERMS values), or once
    (None, number of layouts pruned, None, None) when no layout of the grid can fit.
    ``stages`` are the transformer layers per stage; ``slots`` the counts Megatron splits into
    virtual chunks (one more on the first/last stage with account_for_embedding/loss).
    ``cutoff`` (the kernel model only; read at every schedule, the caller may lower it between
    yields): a layout whose lower bound (TERMS ``lower_bound``, at most its step seconds) is at
    least ``cutoff[0]`` is not timed: it yields (memory bytes, None, None, the lower bound).

    Steps: the grid's choices (:func:`_grid_choices`), the most loaded stage's parameters
    (:func:`_loaded_stage_params`), the model states per (zero, offload)
    (:func:`_model_states`), then the time model's loop over the choices
    (:func:`_kernel_grid` or :func:`_seed_grid`)."""
    slots = slots or stages
    vpps, cps, mbss = _grid_choices(spec, fx, slots, tp, cp, pp, dp)
    p_dense, p_exp = _loaded_stage_params(spec, k, stages, tp, pp, ep, etp)
    bws = _seed_bandwidths(spec, W, dom, tp, cp, dp, ep, etp)
    edp = W // (etp * ep * pp)
    states = _model_states(spec, zeros, offloads, fx, pp, dp * cp, edp, p_dense, p_exp, bws.dp)
    cross = float(bws.tp == bws.inter and tp > 1)
    if not states or min(st[2] for st in states) > limit:
        # The model states alone exceed the GPU (fit rule TRC401): prune the whole grid.
        yield None, len(mbss) * len(vpps) * len(cps) * len(states) * 5, None, None
        return
    act_layer = functools.partial(_act_layer, spec, k, tp, cp, sp, etp)
    if spec.cluster.time_model is TimeModel.kernels:
        yield from _kernel_grid(
            spec,
            k,
            W,
            dom,
            tp,
            cp,
            pp,
            dp,
            stages,
            ep,
            etp,
            sp,
            mbss,
            vpps,
            cps,
            slots,
            states,
            recomputes,
            fx,
            act_layer,
            cross,
            cutoff or [math.inf],
        )
        return
    yield from _seed_grid(
        spec,
        k,
        W,
        tp,
        cp,
        pp,
        dp,
        stages,
        ep,
        sp,
        mbss,
        vpps,
        cps,
        slots,
        states,
        recomputes,
        fx,
        act_layer,
        cross,
        bws,
        p_dense + p_exp,
    )


def _seed_grid(
    spec: TrainSpec,
    k: ModelConsts,
    W: int,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    stages: tuple[int, ...],
    ep: int,
    sp: bool,
    mbss: list[int],
    vpps: list[int],
    cps: list[str],
    slots: tuple[int, ...],
    states: list[tuple[int, str, float, float]],
    recomputes: list[str],
    fx: dict[str, Any],
    act_layer: Any,
    cross: float,
    bws: _SeedBandwidths,
    n_params: float,
) -> Iterator[tuple[Any, Any, Any, Any]]:
    """:func:`score_grid` under ``cluster.time_model: seed`` (the module docstring's terms; TP/CP/
    EP at ``bws`` B/s; ``n_params``: the most loaded stage's parameters per GPU)."""
    m, c, h = spec.model, spec.cluster, spec.model.hidden_size
    g = m.num_query_groups or m.num_attention_heads
    d = m.kv_channels or h // m.num_attention_heads
    gbs = spec.training.global_batch_size
    intra, inter, bw_tp, bw_cp, bw_ep, _bw_dp, bw_pp = bws
    peak = (c.peak_tflops or 1) * 1e12 * c.compute_efficiency
    overhead = c.layer_overhead_us * 1e-6
    hide = 1 - c.comm_overlap
    n_max = max(stages)
    s_loc = m.seq_length // cp
    flops_gpu = k.flops_per_step / W
    gps = W // pp  # GPUs per stage
    flops_total = k.flops_per_step - k.logits_flops_per_step  # the layers' FLOPs per step
    layer_flops = flops_total / max(sum(stages), 1)
    per_layer_flops = layer_flops / gps
    logits = k.logits_flops_per_step / gps
    crit = sorted({(stages.index(max(stages)), max(stages)), (pp - 1, stages[-1])})
    for mbs in mbss:
        if (gbs // dp) % mbs:
            continue
        M = gbs // (dp * mbs)
        sbh = s_loc * mbs * h * 2  # one activation tensor in bf16 (bytes)
        tokens = s_loc * mbs
        gemm_eff = tokens / (tokens + c.gemm_half_efficiency_tokens)
        act_l = act_layer(mbs)
        for v, inflight, bubble, rc, frac, group in _schedules(
            vpps, M, pp, slots, recomputes, fx, spec.engine is Engine.fsdp
        ):
            # embedding output / logits buffers (order of magnitude): 4 * sbh / tp
            act = _schedule_activations(rc, frac, group, act_l, n_max, inflight, 4 * sbh / tp)
            extra = {"none": 0.0, "selective": k.attn_core_fraction / 3, "full": frac / 3}[rc[0]]
            lower = step_lower_bound(
                flops_gpu,
                extra if rc[0] == "selective" else 0.0,
                peak * gemm_eff,
                min(stages),
                M,
                overhead,
                bubble,
            )
            layers_steps = n_max * M  # layer-microbatches this stage runs per step
            # the critical stage, as the full estimator (time.step_time) takes it: the most
            # loaded of the stage with the most layers and the last (it runs the logits),
            # its recompute, and layer_overhead_us per layer, micro batch and pass
            x_l = extra * flops_total / layer_flops if rc[0] == "selective" else extra
            passes = 2 + (frac if rc[0] == "full" else 0)
            t_comp = max(
                (n * per_layer_flops * (1 + x_l) + (logits if i == pp - 1 else 0.0))
                / (peak * gemm_eff)
                + n * M * passes * overhead
                for i, n in crit
            )
            n_tp = 8 + (4 * frac if rc[0] == "full" else 0)
            t_tp = n_tp * (tp - 1) / tp * (sbh / 1) * layers_steps / bw_tp if tp > 1 else 0.0
            for cpt in cps:
                t_cp = _cp_time(cpt, cp, s_loc, mbs, g, d, layers_steps, bw_cp, tp)
                t_ep = 0.0
                if ep > 1:
                    tok = sbh / (tp if tp > 1 else 1) * (m.moe_router_topk)
                    t_ep = 4 * (ep - 1) / ep * tok * layers_steps * k.moe_fraction / bw_ep
                # p2p: a middle stage sends and receives one activation (gradient) per
                # virtual chunk and micro batch each way, on the critical path
                t_pp = 2 * v * M * (sbh / (tp if sp else 1)) / bw_pp if pp > 1 else 0.0
                work = t_comp + hide * (t_tp + t_cp + t_ep) + t_pp
                base = work / (1 - bubble)
                for zero, off, state_mem, t_dp in states:
                    t_off = offload_seconds(  # DeepSpeed offload, as time.seed_step_time
                        spec,
                        zero,
                        off != "none",
                        _param_offload(spec, zero),
                        n_params,
                        dp * cp,
                        M,
                    )
                    yield (
                        state_mem + act,
                        base + t_dp + t_off,
                        (v, cpt, mbs, rc, zero, off),
                        (
                            t_comp,
                            hide * t_tp,
                            hide * t_cp,
                            hide * t_ep,
                            t_pp,
                            t_dp,
                            bubble,
                            work * bubble / (1 - bubble),
                            cross,
                            intra / inter,
                            lower,
                            t_off,
                        ),
                    )


def _recompute_variants(
    recomputes: list[str], chunk: int, fx: dict[str, Any], fsdp: bool = False
) -> list[tuple[str, str | None, int | None]]:
    """(granularity, method, num_layers): full recompute as uniform/1 and as block over a
    quarter, half and three quarters of each chunk's layers (Megatron recompute_method);
    engine=fsdp (``fsdp``) checkpoints every block on its own: uniform/1 only (TRC344)."""
    out: list[tuple[str, str | None, int | None]] = []
    for rc in recomputes:
        if rc != "full":
            out.append((rc, None, None))
            continue
        if fx["training.recompute_method"] is not None:
            out.append(
                ("full", fx["training.recompute_method"], fx["training.recompute_num_layers"] or 1)
            )
            continue
        for n in (1, 2, 4):  # uniform: keep one input per group of n layers
            if n == 1 or (n < chunk and not fsdp):
                out.append(("full", "uniform", n))
        if fsdp:
            continue
        for n in sorted({chunk // 4, chunk // 2, 3 * chunk // 4} - {0, chunk}):
            out.append(("full", "block", n))
    return out


def _cp_time(
    kind: str, cp: int, s_loc: int, mbs: int, g: int, d: int, layers_steps: int, bw: float, tp: int
) -> float:
    if cp == 1:
        return 0.0
    kv = 2 * s_loc * mbs * max(g // tp, 1) * d * 2  # K and V of one CP chunk, bf16
    if kind == "p2p":  # ring: each step's KV transfer overlaps a block of attention compute
        vol = 0.5 * 3 * (cp - 1) * kv
    elif kind == "all_gather":  # gathered before attention: exposed
        vol = 3 * (cp - 1) * kv
    else:  # a2a: q, k, v, o re-partitioned twice per layer pass
        vol = 6 * (cp - 1) / cp * kv * 2
    return vol * layers_steps / bw


# --- the kernel time model (cluster.time_model: kernels) -----------------------------------

_HW: dict[int, tuple[TrainSpec, Hw, dict[tuple[Any, ...], Any]]] = {}


def _hw(spec: TrainSpec) -> tuple[Hw, dict[tuple[Any, ...], Any]]:
    """The spec's GPU figures and a memo of kernel times (per spec object)."""
    got = _HW.get(id(spec))
    if got is None or got[0] is not spec:
        _HW.clear()
        got = (spec, hardware(spec), {})
        _HW[id(spec)] = got
    return got[1], got[2]


def _opt_shards(spec: TrainSpec, zero: int, n: int, n_e: int) -> tuple[int, int]:
    """(dense, expert) optimizer shards of a layout with ZeRO stage ``zero`` (as
    :func:`trainc.compiler.estimate.time.optimizer_shards`: Megatron's distributed optimizer is
    ``zero >= 1`` here)."""
    if spec.engine is Engine.fsdp:
        return n, n_e
    if zero < 1:
        return 1, 1
    return (n, n_e) if spec.engine is Engine.megatron else (n, n)


def _param_offload(spec: TrainSpec, zero: int) -> bool:
    """Whether the spec's DeepSpeed parameter offload applies at ZeRO stage ``zero`` (stage 3
    only; the search does not choose it: the spec's value holds)."""
    return (
        spec.engine is Engine.deepspeed and zero == 3 and spec.training.offload_param.name != "none"
    )


def _layer(
    spec: TrainSpec,
    moe: bool,
    prec: str,
    tp: int,
    cp: int,
    ep: int,
    etp: int,
    sp: bool,
    mbs: int,
    kv_len: float,
) -> LayerTime:
    """:func:`trainc.compiler.estimate.kernels.layer_time_of`, memoised per shape class."""
    hw, memo = _hw(spec)
    key = ("layer", moe, prec, tp, cp, ep, etp, sp, mbs, kv_len)
    if key not in memo:
        memo[key] = layer_time_of(spec, hw, moe, prec, tp, cp, ep, etp, sp, mbs, kv_len)
    return memo[key]  # type: ignore[no-any-return,unused-ignore]


def _logits(spec: TrainSpec, tp: int, cp: int, mbs: int) -> tuple[float, float]:
    hw, memo = _hw(spec)
    key = ("logits", tp, cp, mbs)
    if key not in memo:
        m = spec.model
        memo[key] = logits_time_of(
            spec, hw, tp, cp, mbs, padded_vocab(m.vocab_size, m.make_vocab_size_divisible_by, tp)
        )
    return memo[key]  # type: ignore[no-any-return,unused-ignore]


def _ring_bw(size: int, stride: int, dom: int, intra: float, inter: float) -> float:
    """Bandwidth (B/s) of a ring over ``size`` ranks ``stride`` apart, as
    :func:`trainc.compiler.estimate.comm.time_collectives` prices it with the rank map's
    members per NVLink domain: NVLink inside a domain, else min(NVLink, members x NIC)."""
    if size * stride <= dom and dom % (size * stride) == 0:
        return intra
    g = max(min(size, dom // stride if stride <= dom else 1), 1)
    return min(intra, inter * g)


def _schedules(
    vpps: list[int],
    M: int,
    pp: int,
    slots: tuple[int, ...],
    recomputes: list[str],
    fx: dict[str, Any],
    fsdp: bool,
) -> Iterator[tuple[int, float, float, Any, float, int]]:
    """The (vpp, recompute) variants of one grid and micro batch: ``(v, in-flight micro-batches
    of the first stage, bubble fraction, recompute choice, fraction of a chunk's layers full
    recompute re-runs, layers per uniform recompute group)``. Interleaving
    needs ``M`` a multiple of pp (Megatron-Core's schedule); full/block n re-runs n of each
    chunk's layers (they keep only their input), full/uniform every layer."""
    for v in vpps:
        if v > 1 and (M < pp or M % pp):
            continue
        inflight = min(pp, M) * (1 + (pp - 1) / (pp * v) if v > 1 else 1)
        bubble = (pp - 1) / (v * M + pp - 1)
        chunk = min(slots) // v
        for rc in _recompute_variants(recomputes, chunk, fx, fsdp):
            n_rc = rc[2] or 0  # set for the block and uniform methods
            yield (
                v,
                inflight,
                bubble,
                rc,
                1.0 if rc[1] != "block" else n_rc / chunk,
                n_rc if rc[1] == "uniform" else 1,
            )


def planned_tp_comm_overlap(spec: TrainSpec, fixed: bool | None, tp: int, sp: bool) -> bool:
    """``training.tp_comm_overlap`` of a planned layout: the user's value when the spec sets it
    (``fixed``), else trainc's default for the layout
    (:func:`trainc.compiler.normalize.default_tp_comm_overlap`)."""
    if fixed is not None:
        return bool(fixed)
    return default_tp_comm_overlap(spec, tp, sp)


@dataclass(frozen=True, slots=True)
class _KernelGrid:
    """The grid-wide values of the kernel time model for one (tp, cp, pp, dp, ep, etp, sp,
    stages) grid: bandwidths in B/s, seconds, bytes; parameters per GPU."""

    spec: TrainSpec
    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int
    sp: bool
    stages: tuple[int, ...]
    crit: list[int]
    """The stages the step is the worst of: first, most layers, last."""
    intra: float
    inter: float
    overlap: float
    tp_on: bool
    ep_on: bool
    overhead: float
    """layer_overhead_us in seconds."""
    host_s: float
    """step_overhead_us in seconds."""
    hw: Hw
    eb: int
    """Bytes per activation element."""
    s_loc: float
    """Tokens per sequence on one CP rank (seq_length / cp)."""
    tsp: int
    mf: float
    edp: int
    bw_tp: float
    bw_cp: float
    bw_pp: float
    bw_dp: float
    bw_edp: float
    ep_g: int
    """EP ranks per NVLink domain (all of them when the group fits in one)."""
    low: str
    """The layers' precision (kernels.layer_precision)."""
    edge_bf16: bool
    """The first and last layers run in BF16 although ``low`` is a low precision."""
    kinds: list[tuple[bool, float]]
    """(MoE layer?, share of the layers)."""
    n_layers: int
    megatron: bool
    pb: int
    gb: int
    params: dict[int, tuple[float, float]]
    """Critical stage -> (dense, expert) parameters per GPU."""
    dp_cols: dict[tuple[int, int], list[tuple[float, bool, bool]]]
    """(zero, stage) -> Megatron DDP's DP collectives (seconds, a param gather?, overlapped?)."""
    dp_nb: dict[int, int]
    """Stage -> DDP buckets (the first stage's; 1 elsewhere)."""


def _stage_params(
    k: ModelConsts,
    spec: TrainSpec,
    stages: tuple[int, ...],
    i: int,
    tp: int,
    pp: int,
    ep: int,
    etp: int,
) -> tuple[float, float]:
    """(dense, expert) parameters per GPU of pipeline stage ``i`` (with the embedding on the
    first, the output layer on the last when untied or pp > 1)."""
    n = stages[i]
    untied = spec.model.untie_embeddings_and_output_weights
    e = (k.p_embedding if i == 0 else 0.0) + (
        k.p_embedding if i == pp - 1 and (untied or pp > 1) else 0.0
    )
    return (
        (n * k.p_layer_tp + e) / tp + n * k.p_layer_rep,
        n * k.moe_fraction * k.p_layer_experts / (ep * etp),
    )


def _megatron_dp_collectives(
    spec: TrainSpec,
    states: list[tuple[int, str, float, float]],
    crit: list[int],
    params: dict[int, tuple[float, float]],
    shard: int,
    edp: int,
    bw_dp: float,
    bw_edp: float,
    pb: int,
    gb: int,
) -> dict[tuple[int, int], list[tuple[float, bool, bool]]]:
    """Megatron DDP: the DP collectives' seconds per (zero, stage) (they do not depend on the
    micro batch; only their exposure does, computed per layout as :func:`_dp_exposed` does):
    ``[(seconds, is the param all-gather, overlapped)]`` over the dense (``shard`` = dp x cp
    ranks) and expert (``edp`` ranks) groups. Megatron-FSDP (zero 3) is left to _dp_exposed."""
    t = spec.training
    dp_cols: dict[tuple[int, int], list[tuple[float, bool, bool]]] = {}
    for zero in {st[0] for st in states} - {3}:
        grad_on = shard > 1 and t.overlap_grad_reduce is not False
        gather_on = grad_on and zero == 1 and t.overlap_param_gather is not False
        for i in crit:
            cols = []
            for group, n_par, bwg in (
                (shard, params[i][0], bw_dp),
                (edp, params[i][1], bw_edp),
            ):
                if group <= 1 or n_par <= 0:
                    continue
                ring = (group - 1) / group
                if zero:
                    cols += [
                        (ring * n_par * gb / bwg, False, grad_on),
                        (ring * n_par * pb / bwg, True, gather_on),
                    ]
                else:
                    cols.append((2 * ring * n_par * gb / bwg, False, grad_on))
            dp_cols[(zero, i)] = cols
    return dp_cols


def _kernel_setup(
    spec: TrainSpec,
    k: ModelConsts,
    W: int,
    dom: int,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    stages: tuple[int, ...],
    ep: int,
    etp: int,
    sp: bool,
    states: list[tuple[int, str, float, float]],
    fx: dict[str, Any],
) -> _KernelGrid:
    """The grid-wide values of the kernel model: bandwidths per axis (rings priced as
    :func:`_ring_bw`), the TP / EP overlap switches, precisions, the critical stages'
    parameters and Megatron DDP's DP collectives."""
    m, c, t = spec.model, spec.cluster, spec.training
    eff = (c.comm_efficiency if c.comm_efficiency and c.comm_efficiency > 0 else 1.0) * 1e9
    intra, inter = (
        (c.intra_node_bandwidth_gbps or 1) * eff,
        (c.inter_node_bandwidth_gbps or 1) * eff,
    )
    tp_on = planned_tp_comm_overlap(
        spec, fx.get("training.tp_comm_overlap"), tp, sp
    ) and tp_in_nvlink_domain(tp, c.nvlink_domain_size, c.gpus_per_node, W)  # (TRC382)
    mf = k.moe_fraction
    edp = W // (etp * ep * pp)
    bw_dp = _ring_bw(dp * cp, tp, dom, intra, inter)
    bw_edp = _ring_bw(edp, etp * ep, dom, intra, inter)
    ep_g = (
        ep
        if etp * ep <= dom and dom % (etp * ep) == 0
        else max(min(ep, dom // etp if etp <= dom else 1), 1)
    )
    low = layer_precision(spec, 1 if m.num_layers > 2 else 0)
    megatron = spec.engine is Engine.megatron
    pb, gb, _ = megatron_bytes_per_param(t.precision)
    if t.fp8_param_gather and t.fp8_format is not Fp8Format.none:
        pb = 1
    if t.main_grads_dtype is StateDtype.bf16:
        gb = 2
    crit = sorted({0, stages.index(max(stages)), pp - 1})
    params = {i: _stage_params(k, spec, stages, i, tp, pp, ep, etp) for i in crit}
    dp_nb = {
        i: max(math.ceil(sum(params[i]) / max(BUCKET_MIN_PARAMS, 1_000_000 * dp * cp)), 1)
        if i == 0
        else 1
        for i in crit
    }
    dp_cols = (
        _megatron_dp_collectives(spec, states, crit, params, dp * cp, edp, bw_dp, bw_edp, pb, gb)
        if megatron  # Megatron-FSDP (zero 3) depends on the micro-batch count: _dp_exposed
        else {}
    )
    return _KernelGrid(
        spec=spec,
        tp=tp,
        cp=cp,
        pp=pp,
        dp=dp,
        ep=ep,
        etp=etp,
        sp=sp,
        stages=stages,
        crit=crit,
        intra=intra,
        inter=inter,
        overlap=min(max(c.comm_overlap or 0.0, 0.0), 1.0),
        tp_on=tp_on,
        ep_on=bool(t.overlap_moe_expert_parallel_comm),
        overhead=c.layer_overhead_us * 1e-6,
        host_s=max(c.step_overhead_us, 0.0) * 1e-6,
        hw=_hw(spec)[0],
        eb=activation_bytes(spec),
        s_loc=m.seq_length / cp,
        tsp=tp if sp else 1,
        mf=mf,
        edp=edp,
        bw_tp=_ring_bw(tp, 1, dom, intra, inter),
        bw_cp=intra if tp * cp <= dom and dom % (tp * cp) == 0 else inter,
        bw_pp=intra if W <= dom else inter,
        bw_dp=bw_dp,
        bw_edp=bw_edp,
        ep_g=ep_g,
        low=low,
        edge_bf16=low in LOW_PRECISIONS and t.first_last_layers_bf16,
        kinds=[x for x in ((False, 1 - mf), (True, mf)) if x[1] > 0],
        n_layers=max(sum(stages), 1),
        megatron=megatron,
        pb=pb,
        gb=gb,
        params=params,
        dp_cols=dp_cols,
        dp_nb=dp_nb,
    )


def _dp_term(
    g: _KernelGrid, zero: int, i: int, f_mb: float, b_mb: float, comp: float, M: int
) -> float:
    """Exposed DP seconds of stage ``i`` from its micro batch's forward / backward seconds
    (``f_mb`` / ``b_mb``), ``comp`` its compute seconds per micro batch, ``M`` micro batches."""
    dcols = g.dp_cols.get((zero, i))
    if dcols is None:
        pd, pe = g.params[i]
        return _dp_exposed(
            g.spec,
            g.megatron,
            zero,
            i,
            pd,
            pe,
            g.dp * g.cp,
            g.edp,
            g.bw_dp,
            g.bw_edp,
            g.pb,
            g.gb,
            g.eb,
            M,
            f_mb,
            b_mb,
            M * comp,
            g.n_layers,
        )
    t_dp = 0.0
    nb = g.dp_nb[i]
    for sec, gather, on in dcols:
        if not on:
            t_dp += sec
            continue
        window = f_mb if gather else b_mb
        if i > 0:
            t_dp += with_interference(sec, max(sec - i * window, 0.0))
        else:
            t_dp += with_interference(sec, sec / nb + max(sec - sec / nb - window, 0.0))
    return t_dp


class _LayerKernels(NamedTuple):
    """One micro batch's layer kernel times (seconds), averaged over dense and MoE layers."""

    fw: float
    bw: float
    attn_f: float
    attn_core: float
    gemm_l: float
    lower_layer: float
    lower_attn: float
    d_f: float
    """The first/last layer in BF16: its forward's difference from the low precision."""
    d_b: float
    lf: float
    """The output layer's forward on the last stage."""
    lb: float


def _layer_kernels(g: _KernelGrid, mbs: int, kvl: float) -> _LayerKernels:
    """The GEMMs and attention of one layer for a micro batch of ``mbs`` sequences with
    ``kvl`` keys per attention call (:func:`_layer`, memoised), and the output layer's."""
    spec, tp, cp, ep, etp, sp = g.spec, g.tp, g.cp, g.ep, g.etp, g.sp
    lts = [(_layer(spec, moe, g.low, tp, cp, ep, etp, sp, mbs, kvl), w) for moe, w in g.kinds]
    fw = sum(lt.forward * w for lt, w in lts)
    bw = sum(lt.backward * w for lt, w in lts)
    attn_f = sum(lt.attn_f * w for lt, w in lts)
    attn_core = sum((lt.attn_f + lt.attn_b) * w for lt, w in lts)
    gemm_l = sum((lt.gemm_f + lt.gemm_b) * w for lt, w in lts)
    lower_layer = min(lt.forward + lt.backward for lt, _ in lts)
    lower_attn = min(lt.attn_f for lt, _ in lts)
    d_f = d_b = 0.0  # the first and last layer in BF16: their difference from ``low``
    if g.edge_bf16:
        bl = [(_layer(spec, moe, "bf16", tp, cp, ep, etp, sp, mbs, kvl), w) for moe, w in g.kinds]
        d_f = sum(lt.forward * w for lt, w in bl) - fw
        d_b = sum(lt.backward * w for lt, w in bl) - bw
        lower_layer = min(lower_layer, *(lt.forward + lt.backward for lt, _ in bl))
        lower_attn = min(lower_attn, *(lt.attn_f for lt, _ in bl))
    lf, lb = _logits(spec, tp, cp, mbs)
    return _LayerKernels(
        fw, bw, attn_f, attn_core, gemm_l, lower_layer, lower_attn, d_f, d_b, lf, lb
    )


class _CommUnits(NamedTuple):
    """One micro batch's communication units: seconds per TP collective block (``tp_unit``),
    the TP blocks per layer, the EP dispatch seconds, and bytes of Q, K+V and the PP p2p
    tensor."""

    tp_unit: float
    tp_blocks: float
    tp_expert: float
    t_a2a: float
    q_b: float
    kv_b: float
    pp_b: float


def _comm_units(g: _KernelGrid, mbs: int) -> _CommUnits:
    """The TP, EP, CP and PP traffic of one layer for a micro batch of ``mbs`` sequences
    (:func:`trainc.compiler.estimate.comm.ep_dispatch_seconds` for the EP all-to-all)."""
    spec, tp, mf = g.spec, g.tp, g.mf
    m = spec.model
    h, a = m.hidden_size, m.num_attention_heads
    _, g_kv, d_qk, d_v = head_dims(spec)
    s_loc, eb = g.s_loc, g.eb
    act_b = mbs * s_loc * h * eb  # the tensor TP collectives act on
    tp_unit = 2 * (tp - 1) / tp * act_b / g.bw_tp if tp > 1 else 0.0
    # attention (an MLA block moves its latents) and dense MLP blocks (TE linears)
    tp_blocks = attention_tp_ratio(spec) + (1 - mf)
    tp_expert = mf if g.etp > 1 else 0.0  # the experts' ETP block (never overlapped)
    tok_ep = mbs * s_loc / g.tsp
    t_a2a = (
        ep_dispatch_seconds(
            EpDispatch(
                m.moe_token_dispatcher_type,
                m.moe_router_topk,
                m.num_experts or 1,
                g.ep,
                tok_ep * h * eb,
            ),
            g.ep_g,
            g.intra,
            g.inter,
        )
        if g.ep > 1
        else 0.0
    )
    q_b = mbs * s_loc * (a / tp) * d_qk * eb
    kv_b = mbs * s_loc * max(g_kv / tp, 1) * (d_qk + d_v) * eb
    pp_b = mbs * s_loc * h * eb / g.tsp
    return _CommUnits(tp_unit, tp_blocks, tp_expert, t_a2a, q_b, kv_b, pp_b)


class _StageConsts(NamedTuple):
    """One critical stage's terms that depend on the micro batch only (seconds per micro batch
    unless said otherwise)."""

    i: int
    n: int
    """The stage's transformer layers."""
    ends: int
    """The TP collectives of the embedding / output layer the stage runs (0, 1 or 2)."""
    f_mb: float
    b_mb: float
    low: tuple[float, float]
    """``M`` times the step's lower bound per micro batch (seconds per step, before the
    bubble), without and with selective recompute's attention forward."""
    a_te: float
    """The TP collective blocks' seconds per layer pass over the stage's layers."""
    gemm_n: float
    """The stage's GEMM seconds per micro batch (what the TP overlap hides behind)."""
    e_n: float
    """The experts' ETP blocks per layer pass over the stage's layers."""
    a_ep: float
    """The EP dispatch seconds per layer pass over the stage's layers."""


def _stage_consts(g: _KernelGrid, lk: _LayerKernels, cu: _CommUnits, M: int) -> list[_StageConsts]:
    """The critical stages' micro-batch terms (``M`` micro batches): the forward / backward of
    the stage's layers with the BF16 first / last layer and the output layer on the last stage,
    the lower bound's compute, the TP / EP traffic per layer pass."""
    pp, overhead = g.pp, g.overhead
    out = []
    for i in g.crit:
        n = g.stages[i]
        last = i == pp - 1
        edges = (i == 0) + last if g.edge_bf16 else 0
        f_mb = n * lk.fw + edges * lk.d_f + (lk.lf if last else 0.0)
        b_mb = n * lk.bw + edges * lk.d_b + (lk.lb if last else 0.0)
        tail = lk.lf + lk.lb if last else 0.0
        low = (
            M * (n * (lk.lower_layer + 0.0 + 2 * overhead) + tail),
            M * (n * (lk.lower_layer + lk.lower_attn + 2 * overhead) + tail),
        )
        out.append(
            _StageConsts(
                i,
                n,
                (i == 0) + last,
                f_mb,
                b_mb,
                low,
                cu.tp_unit * cu.tp_blocks * n,
                n * lk.gemm_l,
                cu.tp_expert * n,
                cu.t_a2a * 2 * n * g.mf,
            )
        )
    return out


class _Family(NamedTuple):
    """The critical stages of one (selective?, full recompute's fraction) family of schedules
    for one micro batch: what does not depend on the virtual pipeline degree, the CP variant or
    the (zero, offload) state."""

    rows: list[tuple[int, int, float, float, float, float, float]]
    """Per stage ``(i, layers, compute, compute + exposed TP + EP, M x compute, M x exposed TP,
    M x exposed EP)``, seconds (per micro batch but for the ``M x`` ones)."""
    fixed: list[list[tuple[float, float]]]
    """Per state, per stage: (exposed DP seconds, fixed seconds: offload, optimizer, host)."""


def _family(
    g: _KernelGrid,
    lk: _LayerKernels,
    cu: _CommUnits,
    sc: list[_StageConsts],
    states: list[tuple[int, str, float, float]],
    M: int,
    sel: bool,
    frac: float,
    memos: tuple[dict[tuple[Any, ...], float], dict[tuple[Any, ...], float]],
) -> _Family:
    """The stages of the schedules with selective recompute ``sel`` / full recompute re-running
    ``frac`` of the layers (``2 + frac`` layer passes): compute with the recompute and
    ``layer_overhead_us`` per layer and pass, TP and EP exposed as ``time.tp_exposed_share`` /
    ``ep_exposed_share`` leave them (the TP overlap as :func:`planned_tp_comm_overlap` decides),
    and per state the DP and fixed seconds (:func:`_dp_term`, :func:`_fixed_seconds`;
    ``memos``: theirs, per micro batch)."""
    tp, tp_on, ep_on, overlap, overhead = g.tp, g.tp_on, g.ep_on, g.overlap, g.overhead
    passes = 2 + frac
    rows = []
    loads = []
    for s in sc:
        n = s.n
        extra = n * (frac * lk.fw + (lk.attn_f if sel else 0.0))
        comp = s.f_mb + s.b_mb + extra + n * passes * overhead
        x_te = s.a_te * passes
        x_tp = x_te * tp_exposed_share(x_te, s.gemm_n, tp, tp_on, overlap) + cu.tp_unit * (
            s.e_n * passes + s.ends
        ) * (1 - overlap)
        x_ep = s.a_ep * passes
        x_ep *= ep_exposed_share(x_ep, s.f_mb + s.b_mb + extra, M, ep_on, overlap)
        rows.append((s.i, n, comp, comp + x_tp + x_ep, M * comp, M * x_tp, M * x_ep))
        loads.append((s.i, s.f_mb, s.b_mb + extra, comp))
    dp_memo, off_memo = memos
    fixed = []
    for zero, off, _mem, _t in states:
        per = []
        for i, f_mb, b_mb, comp in loads:
            dkey = (zero, i, f_mb, b_mb, comp)
            t_dp = dp_memo.get(dkey)
            if t_dp is None:
                t_dp = dp_memo[dkey] = _dp_term(g, zero, i, f_mb, b_mb, comp, M)
            okey = (zero, off, i)
            t_off = off_memo.get(okey)
            if t_off is None:
                t_off = off_memo[okey] = _fixed_seconds(g, zero, off, i, M)
            per.append((t_dp, t_off))
        fixed.append(per)
    return _Family(rows, fixed)


def _fixed_seconds(g: _KernelGrid, zero: int, off: str, i: int, M: int) -> float:
    """Stage ``i``'s seconds per step outside the pipeline under (zero, offload) state: DeepSpeed
    offload's CPU step and PCIe copies (as the full estimator: ``time.offload_seconds``), the
    optimizer step and the host's per-step cost (``time.step_fixed_seconds``)."""
    spec = g.spec
    t_off = offload_seconds(
        spec,
        zero,
        off != "none",
        _param_offload(spec, zero),
        sum(g.params[i]),
        g.dp * g.cp,
        M,
    )
    t_off += g.host_s + (
        0.0
        if off != "none" or not spec.cluster.optimizer_step
        else optimizer_step_seconds(
            spec,
            *g.params[i],
            *_opt_shards(spec, zero, g.dp * g.cp, g.edp),
            g.hw.hbm,
        )
    )
    return t_off


def _step_floor(
    g: _KernelGrid,
    lk: _LayerKernels,
    sc: list[_StageConsts],
    x_pps: list[float],
    M: int,
    keep: float,
    sel: bool,
    frac: float,
) -> float:
    """A floor of every step :func:`_kernel_grid` times for one schedule (``keep`` = 1 -
    bubble; ``sel`` / ``frac`` its recompute as :func:`_family` takes them): the worst stage's
    compute and PP p2p through the bubble, computed as the step is, with the TP, EP, CP, DP and
    fixed seconds (none negative) left out. Rounding to nearest is monotone, so the floor is
    never above the step (seconds)."""
    xf = frac * lk.fw + (lk.attn_f if sel else 0.0)
    passes = 2 + frac
    overhead = g.overhead
    return max(
        M * (s.f_mb + s.b_mb + s.n * xf + s.n * passes * overhead + x_pp) / keep
        for s, x_pp in zip(sc, x_pps, strict=True)
    )


def _cp_exposed(
    g: _KernelGrid, cu: _CommUnits, attn_core: float, fam: _Family, cpt: str, passes: float, M: int
) -> list[tuple[float, float]]:
    """Per stage of ``fam`` under cp_comm_type ``cpt``: what the attention core (``attn_core``
    seconds per layer) does not hide of the CP traffic is exposed; ``(compute + exposed TP, EP
    and CP seconds per micro batch, M x exposed CP)``."""
    cp = g.cp
    per_cp = 0.0
    if cp > 1:
        vol = (
            2 * (cp - 1) / cp * (2 * cu.q_b + cu.kv_b) * 2
            if cpt == "a2a"
            else 2 * (cp - 1) * cu.kv_b
        )
        per_cp = vol * passes / 2 / g.bw_cp
    out = []
    for _i, n, _comp, cx, *_ in fam.rows:
        x_cp = max(n * per_cp - n * attn_core, 0.0)
        out.append((cx + x_cp, M * x_cp))
    return out


def _pp_exposed(g: _KernelGrid, cu: _CommUnits, v: int) -> list[float]:
    """Per critical stage the PP p2p seconds per micro batch with ``v`` virtual chunks: 1F1B's
    sends and receives on the critical path, none with the interleaved schedule."""
    pp = g.pp
    if pp <= 1 or v > 1:
        return [0.0] * len(g.crit)
    return [
        cu.pp_b * sum((j * pp + i != v * pp - 1) + (j * pp + i != 0) for j in range(v)) / g.bw_pp
        for i in g.crit
    ]


def _kernel_grid(
    spec: TrainSpec,
    k: ModelConsts,
    W: int,
    dom: int,
    tp: int,
    cp: int,
    pp: int,
    dp: int,
    stages: tuple[int, ...],
    ep: int,
    etp: int,
    sp: bool,
    mbss: list[int],
    vpps: list[int],
    cps: list[str],
    slots: tuple[int, ...],
    states: list[tuple[int, str, float, float]],
    recomputes: list[str],
    fx: dict[str, Any],
    act_layer: Any,
    cross: float,
    cutoff: list[float],
) -> Iterator[tuple[Any, Any, Any, Any]]:
    """:func:`score_grid` under the kernel model (:func:`trainc.compiler.estimate.time.
    kernel_step_time`): per stage and micro-batch the layers' kernel times (dense and MoE
    layers weighted by their share; memoised per (moe, precision, tp, cp, ep, etp, sp, mbs)),
    the output layer on the last stage, recompute, ``layer_overhead_us`` per layer and pass;
    TP/EP exposed as ``time.tp_exposed_share`` / ``ep_exposed_share`` leave them, CP what the
    attention core does not hide, PP p2p with 1F1B only; the pipeline bubble; DP exposed as
    Megatron-Core's bucketed overlap leaves it (the last bucket, and what exceeds the last
    micro-batch's backward / forward). The step is the worst of the first stage, the stage with
    the most layers and the last stage.

    Steps (memoised): :func:`_kernel_setup`; per micro batch :func:`_layer_kernels`,
    :func:`_comm_units`, :func:`_stage_consts`; per recompute family :func:`_family`, per CP
    variant :func:`_cp_exposed`, per vpp :func:`_pp_exposed`; per schedule the floor
    (:func:`_step_floor`, against ``cutoff``), per CP variant and state the worst stage."""
    g = _kernel_setup(spec, k, W, dom, tp, cp, pp, dp, stages, ep, etp, sp, states, fx)
    gbs = spec.training.global_batch_size
    h = spec.model.hidden_size
    n_max = max(stages)
    ratio = g.intra / g.inter
    fsdp = spec.engine is Engine.fsdp
    # the CP variants by the keys each attention call sees (kernels.attention_kv_length)
    by_kv: dict[float, list[str]] = {}
    for cpt in cps:
        by_kv.setdefault(attention_kv_length(spec, cp, CpCommType(cpt)), []).append(cpt)
    for mbs in mbss:
        if (gbs // dp) % mbs:
            continue
        M = gbs // (dp * mbs)
        memos: tuple[dict[tuple[Any, ...], float], dict[tuple[Any, ...], float]] = ({}, {})
        buffers = 4 * (g.s_loc * mbs * h * 2) / tp
        for kvl, kv_cps in by_kv.items():
            lk = _layer_kernels(g, mbs, kvl)
            cu = _comm_units(g, mbs)
            act_l = act_layer(mbs)
            sc = _stage_consts(g, lk, cu, M)
            lows = (max(0.0, *(s.low[0] for s in sc)), max(0.0, *(s.low[1] for s in sc)))
            fams: dict[tuple[bool, float], _Family] = {}
            cp_memo: dict[tuple[bool, float, str], list[tuple[float, float]]] = {}
            pp_memo: dict[int, list[float]] = {}
            for v, inflight, bubble, rc, frac, group in _schedules(
                vpps, M, pp, slots, recomputes, fx, fsdp
            ):
                if rc[0] != "full":
                    frac = 0.0
                act = _schedule_activations(rc, frac, group, act_l, n_max, inflight, buffers)
                sel = rc[0] == "selective"
                keep = 1 - bubble
                lower = lows[sel] / keep * (1 - 1e-5)
                x_pps = pp_memo.get(v)
                if x_pps is None:
                    x_pps = pp_memo[v] = _pp_exposed(g, cu, v)
                if _step_floor(g, lk, sc, x_pps, M, keep, sel, frac) >= cutoff[0]:
                    for _cpt in kv_cps:
                        for state in states:
                            yield state[2] + act, None, None, lower
                    continue
                fam = fams.get((sel, frac))
                if fam is None:
                    fam = fams[(sel, frac)] = _family(g, lk, cu, sc, states, M, sel, frac, memos)
                for cpt in kv_cps:
                    cpx = cp_memo.get((sel, frac, cpt))
                    if cpx is None:
                        cpx = cp_memo[(sel, frac, cpt)] = _cp_exposed(
                            g, cu, lk.attn_core, fam, cpt, 2 + frac, M
                        )
                    mws = [M * (w + x_pp) for (w, _), x_pp in zip(cpx, x_pps, strict=True)]
                    pipes = [mw / keep for mw in mws]
                    for (zero, off, state_mem, _t_dp), fixed in zip(states, fam.fixed, strict=True):
                        total = -1.0
                        worst = 0
                        for j, (t_dp, t_off) in enumerate(fixed):
                            if pipes[j] + t_dp + t_off > total:
                                total, worst = pipes[j] + t_dp + t_off, j
                        row = fam.rows[worst]
                        t_dp, t_off = fixed[worst]
                        # (the full estimate is reported to 6 significant digits: the bound
                        # keeps 1e-5 below it)
                        yield (
                            state_mem + act,
                            total,
                            (v, cpt, mbs, rc, zero, off),
                            (
                                row[4],
                                row[5],
                                cpx[worst][1],
                                row[6],
                                M * x_pps[worst],
                                t_dp,
                                bubble,
                                pipes[worst] - mws[worst],
                                cross,
                                ratio,
                                lower,
                                t_off,
                            ),
                        )


def _dp_exposed(
    spec: TrainSpec,
    megatron: bool,
    zero: int,
    r: int,
    p_dense: float,
    p_exp: float,
    shard: int,
    edp: int,
    bw_dp: float,
    bw_edp: float,
    pb: int,
    gb: int,
    eb: int,
    M: int,
    fwd_mb: float,
    bwd_mb: float,
    compute: float,
    n_layers: int,
) -> float:
    """Exposed DP seconds of stage ``r`` as :func:`trainc.compiler.estimate.time._dp_exposed`
    takes them (Megatron-Core DDP buckets; DeepSpeed ZeRO; the hidden part's interference,
    :func:`trainc.compiler.estimate.time.with_interference`), from the stage's parameters."""
    t = spec.training
    if spec.engine is Engine.fsdp:
        return 0.0  # FSDP2's collectives: not modelled here (the full estimator prices them)
    if not megatron:
        if shard <= 1:
            return 0.0
        c = zero_dp_bytes(p_dense + p_exp, shard, zero, M, eb) / bw_dp
        if zero >= 3:
            return with_interference(c, min(max(c - compute, 0.0) + c / max(n_layers, 1), c))
        if r > 0:
            return with_interference(c, max(c - r * bwd_mb, 0.0))
        nb = max(math.ceil((p_dense + p_exp) / max(BUCKET_MIN_PARAMS, 1_000_000 * shard)), 1)
        last = c / nb
        return with_interference(c, last + max(c - last - bwd_mb, 0.0))
    if zero == 3:  # Megatron-FSDP: every micro-batch, hidden behind the compute as FSDP2's
        c = sum(
            M * (group - 1) / group * params * (2 * pb + gb) / bw
            for group, params, bw in ((shard, p_dense, bw_dp), (edp, p_exp, bw_edp))
            if group > 1 and params > 0
        )
        return with_interference(c, min(max(c - compute, 0.0) + c / max(n_layers, 1), c))
    # normalize's defaults for the candidate (overlap_grad_reduce with dp x cp > 1, the param
    # gather overlap with the distributed optimizer too); a user's explicit false is not seen
    grad_on = shard > 1 and t.overlap_grad_reduce is not False
    gather_on = grad_on and zero == 1 and t.overlap_param_gather is not False
    total = 0.0
    nb = (
        max(math.ceil((p_dense + p_exp) / max(BUCKET_MIN_PARAMS, 1_000_000 * shard)), 1)
        if r == 0
        else 1
    )
    for group, params, bw in ((shard, p_dense, bw_dp), (edp, p_exp, bw_edp)):
        if group <= 1 or params <= 0:
            continue
        ring = (group - 1) / group
        cols = (
            [(ring * params * gb / bw, False), (ring * params * pb / bw, True)]
            if zero
            else [(2 * ring * params * gb / bw, False)]
        )
        for sec, gather in cols:
            if not (gather_on if gather else grad_on):
                total += sec
            elif r > 0:
                total += with_interference(sec, max(sec - r * (fwd_mb if gather else bwd_mb), 0.0))
            else:
                window = fwd_mb if gather else bwd_mb
                total += with_interference(sec, sec / nb + max(sec - sec / nb - window, 0.0))
    return total
