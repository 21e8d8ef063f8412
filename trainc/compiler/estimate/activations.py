"""Activation memory per GPU (bytes), from Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (§4, Table 2), generalised to GQA, SwiGLU, CP and MoE.

Per layer and micro-batch, 2-byte activations, sequence ``s``, micro batch ``b``, hidden ``h``:

* attention block ``11sbh + 5as^2b``: LN output (QKV input) ``2sbh``, Q and K ``4sbh``, softmax
  ``2as^2b``, its dropout mask ``as^2b`` and output ``2as^2b``, V ``2sbh``, O-projection input
  ``2sbh``, dropout mask ``sbh``. With GQA the K and V tensors are ``g*d`` wide, Q and O ``a*d``:
  ``3sbh + 4sb*a*d + 4sb*g*d`` (= 11sbh when ``g*d = a*d = h``).
* MLP ``19sbh`` for GELU with ``f = 4h``: input ``2sbh``, fc1 output ``2sbf``, GELU output ``2sbf``,
  dropout mask ``sbh`` -> ``3sbh + 4sbf``. SwiGLU's fc1 output is ``2f`` wide (gate and up) and the
  gated product ``f`` wide -> ``3sbh + 6sbf`` (our correction; Megatron's estimator keeps ``4f``).
* two LayerNorm inputs ``4sbh``. Total ``34sbh + 5as^2b`` for GPT-style models.

Tensor parallelism shards everything except ``10sbh`` (LN inputs, the attention and MLP inputs and
the two dropout masks); sequence parallelism shards those too, so all terms are ``/t``. Selective
recompute drops the ``5as^2b`` term (recomputes the attention core). Full recompute keeps only each
layer's input (``2sbh``, ``/t`` with SP) plus one recompute unit's working set. With fused (flash)
attention, ``cluster.flash_attention`` (default, as Megatron-Core with Transformer Engine), no
configuration stores the ``5as^2b`` term: only fp32 softmax statistics ``4asb/t`` when the attention
core is not recomputed (Megatron's own estimator also assumes flash). Context parallelism
divides ``s`` by ``cp`` (each rank holds ``s/cp`` tokens of every sequence;
megatron-core 0.16.1 ``megatron/core/utils.py::get_batch_on_this_cp_rank``).

MoE layers (not in the paper; uniform routing assumed): each rank's ``k`` token copies are held
permuted (``2h``), through the expert MLP (``6 f_e`` SwiGLU, ``4 f_e`` GELU, divided by etp but
with tokens gathered over etp) and un-permuted (``2h``); router logits in fp32 (``4E``).

Pipeline: 1F1B stage ``r`` holds ``min(p - r, m)`` micro-batches in flight (Narayanan et al. 2021,
arXiv:2104.04473 §2.2.1);
the interleaved schedule holds ``(2(p - r - 1) + (v - 1)p + 1)`` chunk-micro-batches of ``1/v``
stage each (Megatron ``get_pp_rank_microbatches`` warm-up + 1), i.e. ``p(1 + (p-1)/(pv))`` stages'
worth on the first stage, Megatron's interleaving factor (worked example B, docs/references.md, calls interleaved
peak memory "comparable to 1F1B"; Megatron-Core's schedule holds this much more: we follow it). Embedding (first stage): int64 token
ids ``8sb`` and the embedding-dropout mask ``sbh`` per in-flight micro-batch; output (last stage):
``4sbh/t (1 + V/h)`` for one micro-batch (Korthikanti §4.3: final LN output and fp32 logits).
"""

from __future__ import annotations

import math

from trainc.compiler.decide import traits
from trainc.compiler.derive import full_recompute_mask
from trainc.compiler.estimate.flops import mla_dims
from trainc.compiler.estimate.fsdp_ac import sac_layer_bytes
from trainc.compiler.estimate.kernels import activation_bytes, fused_attention
from trainc.compiler.estimate.params import (
    is_moe_layer,
    plan_stage_chunks,
    plan_stage_layers,
)
from trainc.compiler.ir import Plan, filled
from trainc.compiler.targets.torchtitan_ac import ac_setting, checkpointed_blocks
from trainc.schemas import (
    Activation,
    Fp4Format,
    Fp8Format,
    Recompute,
    RecomputeMethod,
    TrainSpec,
)


def korthikanti_layer_bytes(
    s: int, b: int, h: int, a: int, t: int = 1, *, sp: bool = False, selective: bool = False
) -> float:
    """The paper's Table 2 (GPT MHA, GELU, ``f = 4h``), one layer, one micro-batch.

    >>> korthikanti_layer_bytes(2048, 1, 12288, 96) == 2048 * 12288 * (34 + 5 * 96 * 2048 / 12288)
    True
    >>> korthikanti_layer_bytes(2048, 1, 12288, 96, 8, sp=True, selective=True) / (2048 * 12288 / 8)
    34.0
    """
    sbh = s * b * h
    score = 0.0 if selective else 5 * a * s * s * b / t
    if sp:
        return 34 * sbh / t + score
    return sbh * (10 + 24 / t) + score


def dense_layer_bytes(
    *,
    s: float,
    b: int,
    h: int,
    a: int,
    g: int,
    d: int,
    f: int,
    t: int,
    sp: bool,
    swiglu: bool,
    with_scores: bool,
    masks: bool = True,
    fp8: bool = False,
    attn_dropout: bool = True,
    mla: tuple[int | None, int, int, int, int] | None = None,
) -> float:
    """One dense layer, one micro-batch, our GQA/SwiGLU generalisation of Table 2 (2-byte
    activations): the sum of :func:`dense_layer_terms` (same arguments; each tensor the layer
    saves, named there). ``s`` is the per-rank sequence (``seq / cp``).

    The terms are summed in their listed order; for the integer shapes trainc compiles (``t``
    divides ``a``, ``f`` and ``h``, ``s`` a whole number) every term is a whole number below
    2**53, so the sum is exact and independent of that order.

    >>> dense_layer_bytes(s=2048, b=1, h=4096, a=32, g=32, d=128, f=16384, t=1, sp=False,
    ...                   swiglu=False, with_scores=False) == 34 * 2048 * 4096
    True
    """
    terms = dense_layer_terms(
        s=s,
        b=b,
        h=h,
        a=a,
        g=g,
        d=d,
        f=f,
        t=t,
        sp=sp,
        swiglu=swiglu,
        with_scores=with_scores,
        masks=masks,
        fp8=fp8,
        attn_dropout=attn_dropout,
        mla=mla,
    )
    return sum(terms.values())


def dense_layer_terms(
    *,
    s: float,
    b: int,
    h: int,
    a: int,
    g: int,
    d: int,
    f: int,
    t: int,
    sp: bool,
    swiglu: bool,
    with_scores: bool,
    masks: bool = True,
    fp8: bool = False,
    attn_dropout: bool = True,
    mla: tuple[int | None, int, int, int, int] | None = None,
) -> dict[str, float]:
    """The activation bytes one layer saves for backward, one micro-batch per rank (2-byte
    units), by the tensor each term counts; :func:`dense_layer_bytes` is their sum. Korthikanti
    et al. arXiv:2205.05198 §4 Table 2, generalised to GQA, SwiGLU, FP8 and MLA:

    * ``norm_inputs``: the two norms' inputs, ``4sbh`` (``/t`` with SP, as every ``sbh`` term).
    * ``norm_outputs``: the two norms' outputs (QKV and FC1 inputs), ``4sbh``, ``2sbh`` FP8.
    * ``dropout_masks``: the two hidden-dropout masks, ``2sbh`` with ``masks``, else 0.
    * ``q``: ``2 s b a d / t``; ``kv``: K and V, ``4 s b max(g/t, 1) d`` (``g < t``: each rank
      keeps one replicated KV head).
    * ``o_proj_input``: the output projection's input, ``2 s b a d / t`` (1 byte FP8).
    * ``fc1_output``: ``2 s b f / t`` (``4`` with SwiGLU, gate and up); ``fc2_input``: the
      activation's output, ``2 s b f / t`` (1 byte FP8).
    * ``softmax_output`` ``2as^2b/t``, ``attn_dropout_mask`` ``as^2b/t`` and
      ``attn_dropout_output`` ``2as^2b/t`` (the last two only with ``attn_dropout``): unfused
      attention (``with_scores``), else 0. A fused (flash) kernel keeps only the fp32 log-sum-exp
      per head and token, which the callers add.
    * ``mla_latents``, ``mla_rope_key``: 0 without ``mla``.

    ``masks``: the two dropout masks are kept only when ``hidden_dropout > 0``
    (``torch.nn.functional.dropout`` returns its input unchanged at p = 0, so no mask is saved;
    Llama-style presets train with 0); likewise the score matrix's dropout mask and output
    (``attn_dropout``, ``attention_dropout > 0``). ``fp8``: Transformer Engine saves the inputs
    of FP8 GEMMs for the backward in FP8 (1 byte: ``te.pytorch.module.linear`` saves the
    quantized input), so the two norm outputs, the output projection's input and FC2's input
    are 1-byte tensors.

    ``mla = (q_lora, kv_lora, qk, pos, v)`` (multi-head latent attention, Megatron-Core
    ``MLASelfAttention``): Q and K are ``a (qk + pos)`` wide (``q``: Q, ``kv``: K and V), V and
    the output projection's input ``a v`` (``/t``); the latents are kept per token of the
    sequence shard (``/t`` with SP): ``mla_latents``, each down projection's output (the latent
    norm's input) and the norm's output (the up projection's input, 1 byte with FP8),
    ``q_lora`` and ``kv_lora`` wide, and ``mla_rope_key``, the rotary part of the key, ``pos``.

    The per-term split is what ``tests/differential/test_megatron_activations.py`` compares with
    the tensors the real layer saves.

    >>> kw = dict(s=2048, b=1, h=4096, a=32, g=8, d=128, f=14336, t=2, sp=True, swiglu=True,
    ...           with_scores=True, masks=False, attn_dropout=False)
    >>> sum(dense_layer_terms(**kw).values()) == dense_layer_bytes(**kw)
    True
    """
    tsp = t if sp else 1
    sbh = s * b * h / tsp
    o_in = 1 if fp8 else 2  # output projection input (= attention output)
    if mla is None:
        q = 2 * s * b * a * d / t
        kv = 4 * s * b * max(g / t, 1.0) * d
        o_proj = o_in * s * b * a * d / t
        latents = rope_key = 0.0
    else:
        q_lora, kv_lora, qk, pos, v = mla
        q = 2 * s * b * a * (qk + pos) / t
        kv = (2 * a * (qk + pos) + 2 * a * v) * s * b / t
        o_proj = o_in * s * b * a * v / t
        latents = (2 + (1 if fp8 else 2)) * ((q_lora or 0) + kv_lora) * s * b / tsp
        rope_key = 2 * pos * s * b / tsp
    # A sliding window shrinks no term here: Megatron-Core 0.16.1's DotProductAttention.forward
    # materialises the whole [b*np, sq, sk] score matrix and masks it afterwards.
    scores = a * s * s * b / t if with_scores else 0.0
    return {
        "norm_inputs": 4 * sbh,
        "norm_outputs": (2 if fp8 else 4) * sbh,
        "dropout_masks": (2 if masks else 0) * sbh,
        "mla_latents": latents,
        "mla_rope_key": rope_key,
        "q": q,
        "kv": kv,
        "o_proj_input": o_proj,
        "fc1_output": (4 if swiglu else 2) * s * b * f / t,
        "fc2_input": (1 if fp8 else 2) * s * b * f / t,
        "softmax_output": 2 * scores,
        "attn_dropout_mask": scores if attn_dropout else 0.0,
        "attn_dropout_output": 2 * scores if attn_dropout else 0.0,
    }


def moe_mlp_extra_bytes(
    *,
    s: float,
    b: int,
    h: int,
    t: int,
    sp: bool,
    etp: int,
    topk: int,
    f_e: int,
    f_s: int,
    num_experts: int,
    swiglu: bool,
    fp8: bool = False,
) -> float:
    """MoE layer: bytes that replace the dense MLP's ``(4|6)sbf/t`` term (uniform routing;
    ``fp8``: the expert GEMM inputs saved in FP8, as :func:`dense_layer_bytes`)."""
    tsp = t if sp else 1
    c = 6 if swiglu else 4
    tokens = topk * s * b / tsp  # token copies this rank dispatches = receives on average
    routed = tokens * ((1 if fp8 else 2) * h * etp + (c - (1 if fp8 else 0)) * f_e + 2 * h)
    shared = c * s * b * f_s / t
    router = 4 * s * b * num_experts / tsp
    return routed + shared + router


def fsdp_checkpointed_bytes(
    spec: TrainSpec,
    mode: str,
    whole: list[float],
    moe: list[float],
    *,
    s: float,
    b: int,
    t: int,
    sp: bool,
    flash: bool,
    inflight: float,
) -> float:
    """Activation bytes of one engine=fsdp stage (2-byte units) under torchtitan's
    selective_op, selective_layer or memory_budget mode (:mod:`.fsdp_ac`): ``whole`` is each
    layer's whole activations, ``moe`` the MoE part of each (kept whole under per-op SAC, a
    dense approximation), ``inflight`` the micro-batches held; one block's whole activations
    are added as the working set of its recompute."""
    h = spec.model.hidden_size
    ckpt = 2 * s * b * h / (t if sp else 1)
    working = max(whole, default=0.0)
    if mode == "selective_op":
        sac = sac_layer_bytes(spec, s=s, b=b, t=t, sp=sp, flash=flash)
        stored = sum(sac + x for x in moe)
    elif mode == "selective_layer":
        n = filled(ac_setting(spec).every_n, "fsdp.selective_ac_option")
        stored = sum(
            ckpt if c else w for c, w in zip(checkpointed_blocks(len(whole), n), whole, strict=True)
        )
    else:
        budget = filled(ac_setting(spec).memory_budget, "fsdp.memory_budget")
        stored = sum(ckpt + budget * (w - ckpt) for w in whole)
    return stored * inflight + working


def inflight_microbatches(p: int, r: int, m: int, v: int) -> float:
    """Micro-batches' worth of stage activations stage ``r`` holds at its peak.

    >>> [inflight_microbatches(4, r, 8, 1) for r in range(4)]
    [4, 3, 2, 1]
    >>> inflight_microbatches(4, 0, 8, 2)  # p * (1 + (p-1)/(p*v)) = 5.5
    5.5
    """
    if v <= 1:
        return min(p - r, m)
    chunks = min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)
    return chunks / v


def stage_activation_bytes(spec: TrainSpec, plan: Plan) -> list[float]:
    """Activation bytes per GPU on every PP stage at its peak (the last stage with the
    multi-token-prediction modules of ``model.mtp_num_layers``)."""
    m, d, tr = spec.model, plan.derived, spec.training
    t, c, p, v = d.tp, d.cp, d.pp, d.vpp
    sp = bool(d.sequence_parallel)
    tsp = t if sp else 1
    s, b, h = m.seq_length / c, tr.micro_batch_size, m.hidden_size
    a = m.num_attention_heads
    swiglu = m.activation is Activation.swiglu
    g = filled(m.num_query_groups, "model.num_query_groups")
    kv = filled(m.kv_channels, "model.kv_channels")
    f = filled(m.ffn_hidden_size, "model.ffn_hidden_size")
    masks = m.hidden_dropout > 0
    fp8 = (tr.fp8_format is not Fp8Format.none) or (tr.fp4_format is not Fp4Format.none)
    mlp_c = (6 if swiglu else 4) - (1 if fp8 else 0)
    moe_delta = 0.0
    if m.num_experts:
        moe_delta = (
            moe_mlp_extra_bytes(
                s=s,
                b=b,
                h=h,
                t=t,
                sp=sp,
                etp=d.etp,
                topk=m.moe_router_topk,
                f_e=filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size"),
                f_s=m.moe_shared_expert_intermediate_size or 0,
                num_experts=m.num_experts,
                swiglu=swiglu,
                fp8=fp8,
            )
            - mlp_c * s * b * f / t
        )

    def layer(moe: bool, scores: bool) -> float:
        base = dense_layer_bytes(
            s=s,
            b=b,
            h=h,
            a=a,
            g=g,
            d=kv,
            t=t,
            sp=sp,
            swiglu=swiglu,
            f=f,
            with_scores=scores and not flash,
            masks=masks,
            fp8=fp8,
            attn_dropout=m.attention_dropout > 0,
            mla=mla_dims(spec),
        )
        return base + (lse if scores and flash else 0.0) + (moe_delta if moe else 0.0)

    scale = activation_bytes(spec) / 2  # the formulas count 2-byte activations
    flash = fused_attention(spec)  # fp32 runs the unfused attention (score matrix kept)
    lse = 4 * a * s * b / t  # fused attention's softmax statistics (fp32), kept per layer

    M = d.num_microbatches
    out = []
    chunks = plan_stage_chunks(plan)
    for r, idx in enumerate(plan_stage_layers(plan)):
        moe_flags = [is_moe_layer(spec, i) for i in idx]
        inflight = inflight_microbatches(p, r, M, v)
        mode = ac_setting(spec).mode if traits(spec).torchtitan_ac else None
        if mode in ("selective_op", "selective_layer", "memory_budget"):
            per_stage = fsdp_checkpointed_bytes(
                spec,
                mode,
                [layer(fl, True) for fl in moe_flags],
                [moe_delta if fl else 0.0 for fl in moe_flags],
                s=s,
                b=b,
                t=t,
                sp=sp,
                flash=flash,
                inflight=inflight,
            )
        elif tr.recompute is Recompute.full:
            n = max(filled(tr.recompute_num_layers, "training.recompute_num_layers"), 1)
            ckpt = 2 * s * b * h / tsp
            if tr.recompute_method is RecomputeMethod.block:
                mask = full_recompute_mask(chunks[r], "block", n)
                stored = sum(
                    ckpt if re else layer(fl, True) for re, fl in zip(mask, moe_flags, strict=False)
                )
            else:
                stored = math.ceil(len(idx) / n) * ckpt
            working = max((layer(fl, True) for fl in moe_flags), default=0.0) * min(n, len(idx))
            per_stage = stored * inflight + working
        else:
            scores = tr.recompute is Recompute.none
            per_stage = sum(layer(fl, scores) for fl in moe_flags) * inflight
        extra = 0.0
        if r == 0:
            extra += (8 * s * b + s * b * h / tsp) * inflight  # token ids + embedding dropout mask
        if r == p - 1:
            # final norm output, and the logits: the output GEMM's bf16 result and the fp32 copy
            # Megatron's vocab-parallel cross entropy makes (its softmax, saved for backward):
            # 2 + 4 bytes per logit at the loss (fp32 logits of long sequences
            # and large vocabularies)
            extra += 4 * s * b * h / tsp + 6 * s * b * d.padded_vocab_size / t
            if m.mtp_num_layers:
                # each multi-token-prediction module on the last stage (Megatron-Core's MTP
                # block): its transformer layer (MoE iff the last layer is; kept whole, not
                # recomputed), the two normed h inputs it concatenates, and its own logits
                mtp_layer = layer(
                    is_moe_layer(spec, m.num_layers - 1), tr.recompute is not Recompute.selective
                )
                extra += m.mtp_num_layers * (
                    mtp_layer * inflight + 4 * s * b * h / tsp + 6 * s * b * d.padded_vocab_size / t
                )
        out.append((per_stage + extra) * scale)
    return out
