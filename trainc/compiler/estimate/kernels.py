"""Kernel-level compute time of one layer, one micro-batch, on one GPU (``cluster.time_model:
kernels``, the default; docs/performance.md).

The layer is the list of kernels Megatron-Core / Transformer Engine run, each timed on the GPU
profile (:mod:`trainc.compiler.support.hardware`, ``trainc/conf/gpu``):

* **GEMMs** from their shapes after the TP/SP/EP/ETP split: ``(M, N, K)`` with ``M`` the tokens the
  GPU multiplies (``b x s / cp``; sequence parallelism all-gathers the sequence before the column-
  parallel GEMMs, so M is the whole per-CP sequence), ``N`` / ``K`` the weight's shard. Time is a
  roofline: ``max(2MNK (K + K0) / K / (peak_p x eff_p x q), bytes / (HBM x memory_efficiency))``
  (``K0`` = :data:`GEMM_K_OVERHEAD`, each tile's fixed cost) where
  ``peak_p`` is the dense peak of the GEMM's precision (FP8 / FP4 with ``training.fp8_format`` /
  ``fp4_format``: the transformer layers' linear layers; the output layer and attention stay BF16,
  as Transformer Engine does), ``eff_p`` the profile's achievable fraction, and ``q`` the tile and
  wave quantization: ``ceil(M/128) x ceil(N/256)`` output tiles run in waves of ``sm_count``, a
  partial last wave and partial edge tiles waste their share (CUTLASS / cuBLAS Hopper tiles
  128x256; NVIDIA "Matrix Multiplication Background User's Guide", wave quantization). Forward,
  data-gradient and weight-gradient GEMMs are each timed with their own shape.
* **Routed experts** (MoE layers): the grouped GEMM of each local expert with
  ``M_e = ep x (b s / cp / tsp) x topk / E`` tokens (uniform routing, Megatron's force-balanced
  benchmarks; ``tsp`` = tp with SP) and ``N``, ``K`` split by etp; the router (BF16) and the
  permute / un-permute copies by bytes. A fixed per-MoE-layer cost
  (``cluster.moe_layer_overhead_us``, default ``MOE_LAYER_OVERHEAD_US``: the
  host sync for the token counts of dropless routing, routing kernels) is added per pass.
* **Multi-head latent attention** (``multi_latent_attention``; Megatron-Core
  ``MLASelfAttention``): the down projections on every TP rank over its sequence shard, the up
  and output projections split by TP, heads of ``qk + pos`` query/key and ``v`` value channels.
* **Attention core** (fused / flash): ``2 x M x s_kv x (a / t) x (d_qk + d_v)`` FLOPs forward,
  halved by the causal mask, 2.5x forward for the backward (FlashAttention-2, Dao 2023, arXiv
  2307.08691: five GEMMs backward against two forward), at ``attention_efficiency x k / (k +
  512)`` of the BF16 peak (PyTorch SDPA's figure for engine=fsdp), ``k`` the keys one kernel
  call sees (:func:`attention_kv_length`: ``s / cp`` on the CP ring); unfused attention
  (``cluster.flash_attention: false``) as its GEMMs and score-matrix kernels.
* **Element-wise and norm kernels** by bytes moved: the two norms, residual adds, rotary embedding,
  the activation (SwiGLU reads ``2f`` and writes ``f``), counted forward and twice backward; with
  FP8 / FP4 every GEMM input is cast (read 2 B, write 1 B, plus the transposed copy for the
  weight gradient) and the amax / scale bookkeeping is in those bytes.

Sources: Megatron-Core 0.16 ``transformer/transformer_layer.py`` (the layer's kernels),
``transformer/moe/experts.py::TEGroupedMLP`` (grouped GEMM), Transformer Engine ``fp8_autocast``
(which GEMMs run in FP8), the NVIDIA data sheets in ``trainc/conf/gpu``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainc.compiler.decide import traits
from trainc.compiler.estimate.flops import window_core_share
from trainc.compiler.ir import Plan, filled
from trainc.compiler.support.hardware import GENERIC, GPUS, GpuPreset
from trainc.schemas import (
    Activation,
    CpCommType,
    Fp4Format,
    Fp8Format,
    FsdpDtype,
    PositionEmbedding,
    Precision,
    Recompute,
    TrainSpec,
)

#: Fixed cost per MoE layer per pass (forward, backward, recomputed forward), microseconds:
#: the device-to-host sync of dropless routing's token counts and the routing / permutation
#: kernel launches. Fitted on the published MoE runs (docs/performance.md).
MOE_LAYER_OVERHEAD_US = 600.0
#: GEMM precisions whose inputs are cast (and scaled) before every GEMM (FP8 / FP4 recipes).
LOW_PRECISIONS = ("fp8", "fp4")
#: Output tile of the tensor-core GEMM kernels (rows x columns).
TILE_M, TILE_N = 128, 256
#: Each output tile's fixed cost (pipeline fill of the main loop, the epilogue that converts
#: and writes the tile) in K-equivalent elements: a GEMM with reduction depth K runs at
#: ``K / (K + GEMM_K_OVERHEAD)`` of the large-K efficiency. Fitted (grid 512-1280 in steps of
#: 128; docs/performance.md) on the four tables of published runs together (the calibration
#: CSV, bench/heldout_runs.csv, validation_nvidia.csv, validation_papers.csv; 444 compiled
#: rows): 768 lowers the pooled median |error| from 8.3 to 7.8 % and the BF16 dense rows' from
#: 8.4 to 7.2 % (512 before, fitted on the calibration CSV and the papers' BF16
#: dense rows only). It is more than the tile's epilogue alone (a few microseconds, about 300
#: K-steps on an H100): it also carries what short-K GEMMs lose to launch gaps.
GEMM_K_OVERHEAD = 768


@dataclass(frozen=True, slots=True)
class Hw:
    """The figures the kernel model reads, for one spec (cluster overrides applied)."""

    peaks: dict[str, float]  # FLOP/s per precision
    gemm_eff: dict[str, float]
    attention_eff: float
    hbm: float  # B/s achievable
    sms: int
    moe_overhead_s: float = MOE_LAYER_OVERHEAD_US * 1e-6
    k_overhead: float = GEMM_K_OVERHEAD

    def peak(self, prec: str) -> tuple[float, float]:
        """(peak FLOP/s, efficiency) of a GEMM precision, falling back to BF16."""
        if prec not in self.peaks:
            prec = "bf16"
        return self.peaks[prec], self.gemm_eff.get(prec, self.gemm_eff["bf16"])


def hardware(spec: TrainSpec) -> Hw:
    """The GPU profile of ``cluster.gpu`` scaled to the spec's ``peak_tflops`` (a user override
    scales every precision alike); a custom GPU gets :data:`GENERIC`'s ratios. The attention
    efficiency is the profile's for the engine's kernel (``cluster.clock_cap`` scales every
    peak by the sustained clock's fraction): Transformer Engine's fused attention
    (engine=megatron, deepspeed) or PyTorch SDPA's FlashAttention-2 (engine=fsdp,
    ``sdpa_attention_efficiency``); ``cluster.attention_efficiency`` overrides both."""
    cl = spec.cluster
    prof: GpuPreset = GPUS.get(cl.gpu, GENERIC)
    bf16 = filled(cl.peak_tflops, "cluster.peak_tflops")
    scale = bf16 / prof.peaks["bf16"] if prof.peaks.get("bf16") else 1.0
    eff = dict(prof.gemm_efficiency)
    if cl.gemm_efficiency is not None:
        eff["bf16"] = cl.gemm_efficiency
    if cl.fp8_gemm_efficiency is not None:
        eff["fp8"] = cl.fp8_gemm_efficiency
    moe_us = MOE_LAYER_OVERHEAD_US if cl.moe_layer_overhead_us is None else cl.moe_layer_overhead_us
    attn = prof.attention_efficiency
    if traits(spec).sdpa_attention and prof.sdpa_attention_efficiency is not None:
        attn = prof.sdpa_attention_efficiency  # torch SDPA's FlashAttention-2 kernel
    # a power or clock cap scales the tensor-core clock, so every precision's peak alike
    scale *= cl.clock_cap if 0 < cl.clock_cap <= 1 else 1.0
    peaks = {k: v * scale * 1e12 for k, v in prof.peaks.items()}
    peaks["fp32"] = peaks["bf16"] / 2  # TF32 tensor cores (layer_precision)
    return Hw(
        peaks=peaks,
        gemm_eff=eff,
        attention_eff=attn if cl.attention_efficiency is None else cl.attention_efficiency,
        hbm=prof.memory_bandwidth_gbps * 1e9 * prof.memory_efficiency,
        sms=prof.sm_count,
        moe_overhead_s=moe_us * 1e-6,
    )


def kernel_factor(spec: TrainSpec, name: str) -> float:
    """The value the kernel model uses for the cluster factor ``name`` (a ``cluster`` key; a
    null key resolves to the GPU profile's figure, as :func:`hardware` does)."""
    hw = hardware(spec)
    resolved = {
        "gemm_efficiency": hw.gemm_eff["bf16"],
        "fp8_gemm_efficiency": hw.gemm_eff.get("fp8", hw.gemm_eff["bf16"]),
        "attention_efficiency": hw.attention_eff,
        "moe_layer_overhead_us": hw.moe_overhead_s * 1e6,
    }
    if name in resolved:
        return float(resolved[name])
    return float(getattr(spec.cluster, name))


def gemm_seconds(
    hw: Hw, m: float, n: float, k: float, prec: str = "bf16", groups: int = 1
) -> float:
    """One (grouped) GEMM ``[m x k] @ [k x n]``, ``groups`` of them, seconds (roofline with tile
    and wave quantization; see the module docstring).

    >>> hw = Hw({"bf16": 1e15}, {"bf16": 1.0}, 0.5, 1e12, 100, k_overhead=0)
    >>> round(gemm_seconds(hw, 12800, 25600, 8192) * 1e3, 3)  # 100 x 100 tiles = 100 full waves
    5.369
    >>> hw = Hw({"bf16": 1e15}, {"bf16": 1.0}, 0.5, 1e12, 100)  # K / (K + 768) of that rate
    >>> round(gemm_seconds(hw, 12800, 25600, 8192) * 1e3, 3)
    5.872
    >>> round(gemm_seconds(hw, 12800, 25856, 8192) / gemm_seconds(hw, 12800, 25600, 8192), 3)
    1.01
    """
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    peak, eff = hw.peak(prec)
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N) * groups
    waves = math.ceil(tiles / hw.sms)
    q = (
        tiles
        * TILE_M
        * TILE_N
        / (waves * hw.sms * TILE_M * TILE_N)
        * (m * n / (math.ceil(m / TILE_M) * TILE_M * math.ceil(n / TILE_N) * TILE_N))
    )
    flops = 2 * m * n * k * groups
    out_b = 4 if prec == "fp32" else 2  # the output: 16-bit, fp32 in fp32
    moved = groups * ((m * k + k * n) * element_bytes(prec) + out_b * m * n)
    return max(flops * (k + hw.k_overhead) / k / (peak * eff * q), moved / hw.hbm)


def gemm3_seconds(
    hw: Hw, m: float, n: float, k: float, prec: str = "bf16", groups: int = 1
) -> tuple[float, float]:
    """(forward, backward) seconds of a linear layer: forward ``(m, n, k)``, data gradient
    ``(m, k, n)`` and weight gradient ``(k, n, m)``."""
    fwd = gemm_seconds(hw, m, n, k, prec, groups)
    bwd = gemm_seconds(hw, m, k, n, prec, groups) + gemm_seconds(hw, k, n, m, prec, groups)
    return fwd, bwd


@dataclass
class LayerTime:
    """Seconds of one layer, one micro-batch, by kind (forward; backward)."""

    gemm_f: float = 0.0
    gemm_b: float = 0.0
    attn_f: float = 0.0
    attn_b: float = 0.0
    elem_f: float = 0.0
    elem_b: float = 0.0
    fixed_f: float = 0.0
    fixed_b: float = 0.0

    @property
    def forward(self) -> float:
        """Forward seconds."""
        return self.gemm_f + self.attn_f + self.elem_f + self.fixed_f

    @property
    def backward(self) -> float:
        """Backward seconds."""
        return self.gemm_b + self.attn_b + self.elem_b + self.fixed_b


def element_bytes(prec: str) -> float:
    """Bytes per element of a GEMM input in precision ``prec`` (fp8 1, fp4 0.5, fp32 4, else 2).

    >>> [element_bytes(p) for p in ("bf16", "fp8", "fp4", "fp32")]
    [2.0, 1.0, 0.5, 4.0]
    """
    return {"fp8": 1.0, "fp4": 0.5, "fp32": 4.0}.get(prec, 2.0)


def activation_bytes(spec: TrainSpec) -> int:
    """Bytes per activation element: 4 when the layers compute in fp32
    (:func:`computes_in_fp32`), else 2 (FP8 / FP4 recipes keep 16-bit activations)."""
    return 4 if computes_in_fp32(spec) else 2


def computes_in_fp32(spec: TrainSpec) -> bool:
    """Whether the layers compute in fp32: ``training.precision: fp32`` (engine=fsdp: the
    parameters' ``fsdp.param_dtype``, which the normalizer fills from it)."""
    if traits(spec).fsdp_keys and spec.fsdp.param_dtype is not None:
        return spec.fsdp.param_dtype is FsdpDtype.fp32
    return spec.training.precision is Precision.fp32


def fused_attention(spec: TrainSpec) -> bool:
    """Whether attention runs a fused (flash) kernel that keeps no score matrix:
    ``cluster.flash_attention`` and 16-bit compute. FlashAttention and cuDNN's fused attention
    take fp16 / bf16 only; with fp32 Transformer Engine's ``DotProductAttention`` falls back to
    its unfused backend (and PyTorch SDPA to its math kernel), which materialises the scores."""
    return spec.cluster.flash_attention and not computes_in_fp32(spec)


def layer_precision(spec: TrainSpec, index: int) -> str:
    """GEMM precision of transformer layer ``index``: fp32 / fp4 / fp8 / bf16 (first and last
    layer in BF16 with ``first_last_layers_bf16``). fp32 GEMMs are timed at the TF32
    tensor-core peak (:func:`hardware`: half the dense BF16 peak, as the A100 / H100 / B200 data
    sheets give it), a lower bound: without TF32 (PyTorch's default
    ``allow_tf32=False``) IEEE fp32 runs on the CUDA cores, several times slower again."""
    tr = spec.training
    if computes_in_fp32(spec):
        return "fp32"
    low = (
        "fp4"
        if tr.fp4_format is not Fp4Format.none
        else "fp8"
        if tr.fp8_format is not Fp8Format.none
        else "bf16"
    )
    if low != "bf16" and tr.first_last_layers_bf16 and index in (0, spec.model.num_layers - 1):
        return "bf16"
    return low


def layer_time(spec: TrainSpec, plan: Plan, hw: Hw, moe: bool, prec: str) -> LayerTime:
    """One transformer layer, one micro-batch, on one GPU (see the module docstring)."""
    d = plan.derived
    return layer_time_of(
        spec,
        hw,
        moe,
        prec,
        d.tp,
        d.cp,
        d.ep,
        d.etp,
        bool(d.sequence_parallel),
        spec.training.micro_batch_size,
        attention_kv_length(spec, d.cp, spec.parallel.cp_comm_type),
    )


def attention_kv_length(spec: TrainSpec, cp: int, comm: CpCommType) -> float:
    """Keys (tokens) each call of the fused attention kernel sees under context parallelism
    ``cp`` with ``comm``: the ring (p2p; Transformer Engine ``AttnFuncWithCPAndKVP2P``) runs one
    call per step against one rank's ``s / cp`` keys, as does engine=fsdp (torch's
    ``context_parallel`` rotates K/V shards and calls SDPA per shard,
    ``torch/distributed/tensor/experimental/_attention.py``); all_gather
    (``AttnFuncWithCPAndKVAllGather``) and a2a (Ulysses, ``AttnFuncWithCPAndQKVOA2A``) call it
    on the whole sequence. The kernel's efficiency falls with short key blocks
    (``s_kv / (s_kv + 512)``, :func:`layer_time_of`), so CP at short sequences is not free.

    >>> from trainc.schemas import ClusterSpec, ModelSpec, TrainingSpec, TrainSpec
    >>> s = TrainSpec(model=ModelSpec(num_layers=1, hidden_size=64, num_attention_heads=1,
    ...     vocab_size=8, seq_length=8192), cluster=ClusterSpec(num_nodes=1),
    ...     training=TrainingSpec(micro_batch_size=1, global_batch_size=8))
    >>> [attention_kv_length(s, 4, k) for k in CpCommType]  # p2p, all_gather, a2a
    [2048.0, 8192.0, 8192.0]
    """
    s = float(spec.model.seq_length)
    if cp > 1 and (comm is CpCommType.p2p or traits(spec).cp_ring_attention):
        return s / cp
    return s


def layer_time_of(
    spec: TrainSpec,
    hw: Hw,
    moe: bool,
    prec: str,
    t: int,
    c: int,
    ep: int,
    etp: int,
    sp: bool,
    b: int,
    kv_len: float | None = None,
) -> LayerTime:
    """:func:`layer_time` for the layout ``(tp=t, cp=c, ep, etp, sequence_parallel=sp,
    micro_batch_size=b)`` without a plan (the planner's fast model calls it once per class);
    ``kv_len``: the keys each fused attention call sees (:func:`attention_kv_length`; None =
    the whole sequence)."""
    m = spec.model
    tsp = t if sp else 1
    tok = b * m.seq_length / c  # tokens of this CP rank (the GEMMs' M after the SP all-gather)
    lt = LayerTime()
    elems, casts, d_qk, d_v = _attention_projections(spec, hw, lt, prec, t, tsp, tok)
    if moe:
        elems, casts = _moe_mlp(spec, hw, lt, prec, t, tsp, tok, ep, etp, elems, casts)
    else:
        elems, casts = _dense_mlp(spec, hw, lt, prec, t, tok, elems, casts)
    if traits(spec).fsdp_keys and not spec.fsdp.compile:
        a = m.num_attention_heads
        g = filled(m.num_query_groups, "model.num_query_groups")
        dh = filled(m.kv_channels, "model.kv_channels")
        elems += eager_extra_elements(
            a * dh / t,
            g * dh / t,
            0 if moe else filled(m.ffn_hidden_size, "model.ffn_hidden_size") / t,
            m.activation is Activation.swiglu,
            g < a,
            m.position_embedding is PositionEmbedding.rope,
        )
    _attention_core(spec, hw, lt, prec, t, c, b, tok, d_qk, d_v, kv_len)
    elem_bytes = activation_bytes(spec) * elems * tok
    cast_bytes = 4 * casts * tok  # read 2 B, write 1 B + the transposed 1 B copy
    lt.elem_f = (elem_bytes + cast_bytes) / hw.hbm
    lt.elem_b = (2 * elem_bytes + cast_bytes) / hw.hbm
    return lt


def _lin(lt: LayerTime, hw: Hw, mm: float, n: float, k: float, p: str, groups: int = 1) -> None:
    """Adds one linear layer's forward and backward GEMMs (:func:`gemm3_seconds`) to ``lt``."""
    f, bw = gemm3_seconds(hw, mm, n, k, p, groups)
    lt.gemm_f += f
    lt.gemm_b += bw


def _attention_projections(
    spec: TrainSpec, hw: Hw, lt: LayerTime, prec: str, t: int, tsp: int, tok: float
) -> tuple[float, float, int, int]:
    """The attention block's projections (MLA's down / up projections, or QKV and the output
    projection) added to ``lt``; returns ``(element-wise bytes per token, cast bytes per
    token, score channels d_qk, value channels d_v)`` of the block."""
    m = spec.model
    h, a = m.hidden_size, m.num_attention_heads
    g = filled(m.num_query_groups, "model.num_query_groups")
    dh = filled(m.kv_channels, "model.kv_channels")
    q, kv = a * dh, g * dh
    d_qk = d_v = dh  # per-head channels of the scores (Q, K) and of the values
    if m.multi_latent_attention:
        ql, kvl = m.q_lora_rank or 0, m.kv_lora_rank
        pos, d_v = m.qk_pos_emb_head_dim, m.v_head_dim
        d_qk = m.qk_head_dim + pos
        # the down projections run on every tp rank over its sequence shard (Transformer
        # Engine "duplicated"), the up projections and the output projection are split by tp
        if ql:
            _lin(lt, hw, tok / tsp, ql, h, prec)  # query down projection
        _lin(lt, hw, tok, a * d_qk / t, ql or h, prec)  # query up (or direct) projection
        _lin(lt, hw, tok / tsp, kvl + pos, h, prec)  # key/value down projection (+ rotary key)
        _lin(lt, hw, tok, a * (m.qk_head_dim + d_v) / t, kvl, prec)  # key/value up projection
        _lin(lt, hw, tok, h, a * d_v / t, prec)  # output projection (row parallel)
        # norms, residual adds; the latent norms; rotary on the query / key rotary channels;
        # the concatenations that build Q and K of d_qk channels
        elems = 10 * h / tsp + 2 * (ql + kvl) / tsp + 2 * (a * pos / t + pos) + 4 * a * d_qk / t
        casts = (
            (2 * h + 2 * (ql + kvl) + pos + a * (d_qk + m.qk_head_dim + 2 * d_v) / t + h)
            if prec in LOW_PRECISIONS
            else 0.0
        )
    else:
        _lin(lt, hw, tok, (q + 2 * kv) / t, h, prec)  # QKV (column parallel)
        _lin(lt, hw, tok, h, q / t, prec)  # output projection (row parallel)
        # element-wise bytes per token of this GPU (2-byte activations): norms, residual adds,
        # rope
        elems = 10 * h / tsp + 2 * (q + kv) / t
        casts = (2 * h + (q + 2 * kv) / t + q / t + h) if prec in LOW_PRECISIONS else 0.0
    return elems, casts, d_qk, d_v


def _moe_mlp(
    spec: TrainSpec,
    hw: Hw,
    lt: LayerTime,
    prec: str,
    t: int,
    tsp: int,
    tok: float,
    ep: int,
    etp: int,
    elems: float,
    casts: float,
) -> tuple[float, float]:
    """An MoE layer's routed experts (grouped GEMMs), router and shared expert added to ``lt``;
    returns ``(elems, casts)`` with the layer's element-wise and cast bytes per token added."""
    m = spec.model
    h = m.hidden_size
    swiglu = m.activation is Activation.swiglu
    cf = 2 if swiglu else 1
    E = filled(m.num_experts, "model.num_experts")
    k_top = m.moe_router_topk
    f_e = filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size")
    local = max(E // max(ep, 1), 1)
    m_e = ep * (tok / tsp) * k_top / E * etp  # ETP ranks each see the whole expert batch
    _lin(lt, hw, m_e, cf * f_e / etp, h, prec, local)
    _lin(lt, hw, m_e, h, f_e / etp, prec, local)
    _lin(lt, hw, tok / tsp, E, h, "bf16")  # router
    # per token copy (k_top / tsp of them per token of ``tok``): permute + un-permute (read +
    # write h each), the expert activation
    elems += k_top / tsp * (4 * h + (3 if swiglu else 2) * f_e / etp)
    if prec in LOW_PRECISIONS:
        casts += k_top / tsp * (2 * h + cf * f_e / etp + f_e / etp)
    f_s = m.moe_shared_expert_intermediate_size or 0
    if f_s:
        _lin(lt, hw, tok, cf * f_s / t, h, prec)
        _lin(lt, hw, tok, h, f_s / t, prec)
        elems += (3 if swiglu else 2) * f_s / t
    lt.fixed_f += hw.moe_overhead_s
    lt.fixed_b += hw.moe_overhead_s
    return elems, casts


def _dense_mlp(
    spec: TrainSpec,
    hw: Hw,
    lt: LayerTime,
    prec: str,
    t: int,
    tok: float,
    elems: float,
    casts: float,
) -> tuple[float, float]:
    """A dense layer's MLP (column- and row-parallel GEMMs) added to ``lt``; returns
    ``(elems, casts)`` with its element-wise and cast bytes per token added."""
    m = spec.model
    h = m.hidden_size
    swiglu = m.activation is Activation.swiglu
    cf = 2 if swiglu else 1
    f = filled(m.ffn_hidden_size, "model.ffn_hidden_size")
    _lin(lt, hw, tok, cf * f / t, h, prec)
    _lin(lt, hw, tok, h, f / t, prec)
    elems += (3 if swiglu else 2) * f / t
    if prec in LOW_PRECISIONS:
        casts += 2 * h + cf * f / t + f / t
    return elems, casts


def _attention_core(
    spec: TrainSpec,
    hw: Hw,
    lt: LayerTime,
    prec: str,
    t: int,
    c: int,
    b: int,
    tok: float,
    d_qk: int,
    d_v: int,
    kv_len: float | None,
) -> None:
    """Sets ``lt``'s attention core seconds: the fused kernel (causal, scaled by
    :func:`trainc.compiler.estimate.flops.window_core_share` with a sliding window; CP ranks
    each see all s keys for their s/c queries; its efficiency falls with short key blocks per
    call) or the unfused score matrix (:func:`unfused_attention_seconds`)."""
    m = spec.model
    a = m.num_attention_heads
    s_full = m.seq_length
    s_kv = s_full
    kv_call = s_full if kv_len is None else kv_len  # keys per call of the fused kernel
    if fused_attention(spec):
        # causal (the / 2), times the pairs a sliding window keeps (the kernel skips the
        # masked blocks); the unfused path computes every score whatever the mask
        attn_flops = 2 * tok * s_kv * (a / t) * (d_qk + d_v) / 2 * window_core_share(spec)
        eff = hw.attention_eff * kv_call / (kv_call + 512)
        lt.attn_f = attn_flops / (hw.peaks["bf16"] * eff)
        lt.attn_b = 2.5 * lt.attn_f
    else:
        lt.attn_f, lt.attn_b = unfused_attention_seconds(
            hw,
            b,
            s_full / c,
            s_kv,
            a / t,
            d_qk,
            m.attention_dropout > 0,
            d_v,
            # its GEMMs: BF16, or fp32
            "fp32" if prec == "fp32" else "bf16",
        )


def unfused_attention_seconds(
    hw: Hw,
    b: float,
    s_q: float,
    s_kv: float,
    heads: float,
    dh: float,
    dropout: bool,
    dv: float | None = None,
    prec: str = "bf16",
) -> tuple[float, float]:
    """(forward, backward) seconds of attention that materialises the score matrix
    (``cluster.flash_attention: false``: Megatron-Core's unfused ``DotProductAttention``, the
    Megatron-LM of Narayanan et al. 2021 and Korthikanti et al. 2022), for ``b`` sequences of
    ``s_q`` queries against ``s_kv`` keys and ``heads`` heads of width ``dh`` (``dv`` for the
    values, default ``dh``) on this GPU, GEMMs in ``prec`` (fp32: 4-byte scores).

    * GEMMs, batched over ``b x heads``: forward ``Q K^T`` (s_q, s_kv, dh) and ``P V`` (s_q, dh,
      s_kv); backward ``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``, ``dK = dS^T Q``. The
      causal mask skips nothing: every score is computed.
    * the score matrix's element-wise kernels (2-byte scores, ``b x heads x s_q x s_kv``
      elements, by bytes at the HBM rate): the fused scale-mask-softmax reads and writes it (4 B
      per element), attention dropout writes a 1-byte mask besides (5 B); backward the softmax
      gradient reads P and dP and writes dS (6 B), dropout's reads the mask (5 B).

    >>> hw = Hw({"bf16": 1e15}, {"bf16": 1.0}, 0.5, 1e12, 100, k_overhead=0)
    >>> f, b = unfused_attention_seconds(hw, 1, 2048, 2048, 16, 128, False)
    >>> round(f * 1e6, 1), round(b * 1e6, 1)  # memory-bound GEMMs, 151 us each, + the scores
    (570.4, 1006.6)
    """
    groups = max(round(b * heads), 1)
    dv = dh if dv is None else dv
    fwd = gemm_seconds(hw, s_q, s_kv, dh, prec, groups) + gemm_seconds(
        hw, s_q, dv, s_kv, prec, groups
    )
    bwd = (
        gemm_seconds(hw, s_kv, dv, s_q, prec, groups)
        + gemm_seconds(hw, s_q, s_kv, dv, prec, groups)
        + gemm_seconds(hw, s_q, dh, s_kv, prec, groups)
        + gemm_seconds(hw, s_kv, dh, s_q, prec, groups)
    )
    scores = groups * s_q * s_kv * (2 if prec == "fp32" else 1)  # 4-byte scores in fp32
    fwd += scores * (4 + (5 if dropout else 0)) / hw.hbm
    bwd += scores * (6 + (5 if dropout else 0)) / hw.hbm
    return fwd, bwd


def eager_extra_elements(
    q: float, kv: float, f: float, swiglu: bool, grouped: bool, rope: bool
) -> float:
    """Element reads + writes per token that eager PyTorch adds to the fused kernels
    :func:`layer_time_of` counts, for one layer's forward (engine=fsdp without
    ``fsdp.compile``; the trainc worker's model, ``trainc/launch/worker/torch_gpt.py``, and
    torchtitan's run the same ops). ``q``, ``kv``: this GPU's query and key/value widths, ``f``:
    its MLP width (0 for an MoE layer).

    * rotary embedding (``rope``) as separate kernels (``x * cos``, the rotated half's negate and
      concatenation, ``* sin``, the sum, the concatenation with the unrotated channels): about 10
      element reads and writes per rotated element where a fused kernel reads and writes once
      (2): 8 more per element of q and k;
    * grouped-query attention: ``repeat_interleave`` materialises K and V at the query width
      (reads kv, writes q, for each of the two);
    * the attention output's transpose to ``[b, s, heads x d]`` is a copy (reads and writes q);
    * SwiGLU as ``silu`` then ``*`` (read 1 write 1, read 2 write 1: 5 per element of f) where
      a fused kernel reads 2 and writes 1 (3). GELU is one kernel either way. The norms are one
      kernel in eager PyTorch too (``F.rms_norm`` / ``F.layer_norm``).

    torch.compile (``fsdp.compile``) fuses these as Transformer Engine does: nothing is added.

    >>> eager_extra_elements(4096, 1024, 14336, True, True, True)  # Llama 3 8B, tp 1
    88064.0
    """
    rot = 8 * (q + kv) if rope else 0.0
    gqa = 2 * (q + kv) if grouped else 0.0
    return float(rot + gqa + 2 * q + (2 * f if swiglu else 0.0))


def logits_time(spec: TrainSpec, plan: Plan, hw: Hw) -> tuple[float, float]:
    """(forward, backward) seconds of the output layer and the cross entropy (BF16 GEMM; the
    fp32 logits are read and written by the loss kernels)."""
    d = plan.derived
    return logits_time_of(spec, hw, d.tp, d.cp, spec.training.micro_batch_size, d.padded_vocab_size)


def logits_time_of(
    spec: TrainSpec, hw: Hw, tp: int, cp: int, mbs: int, padded_vocab: int
) -> tuple[float, float]:
    """:func:`logits_time` for a layout given by its numbers (no plan)."""
    m = spec.model
    tok = mbs * m.seq_length / cp
    v = padded_vocab / tp
    f, b = gemm3_seconds(hw, tok, v, m.hidden_size, "fp32" if computes_in_fp32(spec) else "bf16")
    ce = 3 * 4 * tok * v / hw.hbm  # fp32 logits: write, read for softmax, write the gradient
    return f + ce, b + ce


def recompute_forward_share(spec: TrainSpec, lt: LayerTime) -> float:
    """Seconds a selective recompute adds per layer and micro-batch (the attention core's
    forward again; Megatron-Core's default selective module ``core_attn``)."""
    return lt.attn_f if spec.training.recompute is Recompute.selective else 0.0
