"""Model FLOPs per optimizer step, exactly as Megatron-LM counts them.

Source: ``megatron/training/training.py::num_floating_point_operations`` -> ``transformer_flops``
(Megatron-LM core_v0.16.1). Every GEMM is counted x2 (multiply-add) x3 (forward, weight-grad,
input-grad) = 6 FLOPs per weight per token. Attention scores (QK^T and softmax·V) are halved for the
causal mask (and scaled by the scored share of the causal pairs with sliding-window attention,
:func:`window_core_share`). Router GEMMs and recomputation are not counted: these are *model*
FLOPs (MFU), not hardware FLOPs. ``hardware_flops`` adds what recompute re-executes (used for
the step time only).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.compiler.derive import moe_layer_pattern
from trainc.compiler.estimate.fsdp_ac import recompute_parts
from trainc.compiler.estimate.params import plan_rerun_masks
from trainc.compiler.ir import Plan, filled
from trainc.schemas import Activation, Recompute, TrainSpec


@dataclass(frozen=True, slots=True)
class FlopTerms:
    """The two parts of Megatron's count: per token (GEMMs, logits) and per S2 (attention core)."""

    per_token_layers: float
    """6 x GEMM weights of all transformer layers touched by one token (top-k experts only)."""
    per_token_logits: float
    """6 * h * V: the output layer."""
    core_per_s2: float
    """6 * a * d * L: causal attention core per unit of sum(seq_len^2)."""


def flop_terms(
    *,
    h: int,
    a: int,
    g: int,
    d: int,
    f: int,
    V: int,
    L: int,
    swiglu: bool,
    num_moe_layers: int = 0,
    f_e: int = 0,
    topk: int = 0,
    f_s: int = 0,
    mla: tuple[int | None, int, int, int, int] | None = None,
    core_share: float = 1.0,
) -> FlopTerms:
    """Megatron's per-token and per-S2 FLOP coefficients (``num_floating_point_operations``).

    ``F_tok = 6h[f*c_f*L_d + f_e*k*c_f*L_moe + f_s*c_f*L_moe] + 6[h(q + 2*kappa) + q*h]*L + 6hV``
    with ``q = a*d``, ``kappa = g*d``, ``c_f = 3`` (SwiGLU) or 2; ``F_core = 6*q*L``.

    Multi-head latent attention (``mla = (q_lora, kv_lora, qk, pos, v)``, Megatron-LM
    ``training.py::num_floating_point_operations``, its ``multi_latent_attention`` branch): the
    attention term per layer is ``6[q_term + kv_lora(h + a(qk + v) + 1) + h pos + a v h]`` with
    ``q_term = q_lora(h + a(qk + pos) + 1)`` (``h a (qk + pos)`` without a query latent), and the
    causal core ``6 a (qk + pos + v) / 2`` per S2.

    ``core_share`` scales the core term: the mean, over the layers, of the share of the causal
    (query, key) pairs each layer scores (:func:`window_core_share`; 1 = full causal).

    >>> t = flop_terms(h=7168, a=128, g=128, d=128, f=18432, V=129280, L=1, swiglu=True,
    ...                mla=(1536, 512, 128, 64, 128))
    >>> t.core_per_s2  # 3 x 128 x (192 + 128)
    122880.0
    """
    c_f = 3 if swiglu else 2
    L_d = L - num_moe_layers
    q, kappa = a * d, g * d
    mlp = 6 * h * (f * c_f * L_d + f_e * topk * c_f * num_moe_layers + f_s * c_f * num_moe_layers)
    if mla is None:
        attn = 6 * (h * (q + 2 * kappa) + q * h) * L
        core = 6 * q * L
    else:
        q_lora, kv_lora, qk, pos, v = mla
        q_term = q_lora * (h + a * (qk + pos) + 1) if q_lora else h * a * (qk + pos)
        attn = 6 * (q_term + kv_lora * (h + a * (qk + v) + 1) + h * pos + a * v * h) * L
        core = 3 * a * (qk + pos + v) * L
    return FlopTerms(float(mlp + attn), float(6 * h * V), float(core * core_share))


def window_pair_share(s: int, w: int | None) -> float:
    """The share of the causal (query, key) pairs that sliding-window attention with ``w`` keys
    left of each query scores, in Megatron's continuous count (causal ``s^2 / 2`` pairs, the
    halving of ``num_floating_point_operations``): the window keeps ``s w - w^2 / 2``, so
    ``(2 s w - w^2) / s^2``; 1 without a window (``w`` None) or when ``w >= s - 1`` (every
    query sees all its causal keys).

    >>> window_pair_share(8192, 4095)  # Mistral 7B v0.1's window at 8192 tokens
    0.7498779147863388
    """
    if w is None or w >= s - 1:
        return 1.0
    return (2 * s * w - w * w) / (s * s)


def window_core_share(spec: TrainSpec) -> float:
    """The mean over ``num_layers`` of the causal-pair share each layer's attention core scores:
    :func:`window_pair_share` on the windowed layers, 1 on those with full attention (with
    ``window_attn_skip_freq`` N the 1-based layers N, 2N, ..., ``L // N`` of them: megatron-core
    0.16.1 ``transformer/utils.py::is_layer_window_attention``, windowed iff
    ``layer_number % N != 0``). 1 without a window."""
    m = spec.model
    if m.window_size is None:
        return 1.0
    r = window_pair_share(m.seq_length, m.window_size)
    L = m.num_layers
    full = L // m.window_attn_skip_freq if m.window_attn_skip_freq else 0
    return ((L - full) * r + full) / L


def megatron_flops(*, batch: int, seq: int, **shape: int | bool) -> float:
    """Megatron's ``num_floating_point_operations`` for ``batch`` unpacked sequences of ``seq``.

    ``F = T*F_tok + S2*F_core`` with ``T = B*s`` tokens and ``S2 = B*s^2``.

    >>> f = megatron_flops(batch=128, seq=8192, h=4096, a=32, g=8, d=128, f=14336, V=128256,
    ...                    L=32, swiglu=True)
    >>> f"{f:.4e}"  # Megatron-LM's own function gives the same, Llama-3-8B-like
    '5.3971e+16'
    """
    t = flop_terms(**shape)  # type: ignore[arg-type]
    tokens, s2 = batch * seq, batch * seq * seq
    return tokens * (t.per_token_layers + t.per_token_logits) + s2 * t.core_per_s2


def spec_flop_terms(spec: TrainSpec, plan: Plan) -> FlopTerms:
    """:func:`flop_terms` of a normalized spec (padded vocab, as Megatron passes it), with its
    multi-token-prediction modules (:func:`mtp_flop_terms`)."""
    m = spec.model
    mtp = m.mtp_num_layers or 0
    pattern = moe_layer_pattern(spec)
    moe_mtp = mtp * pattern[-1] if pattern else 0  # an MTP layer is MoE iff the last layer is
    t = model_flop_terms(
        spec,
        m.num_layers + mtp,
        plan.derived.num_moe_layers + moe_mtp,
        plan.derived.padded_vocab_size,
    )
    return mtp_flop_terms(spec, t)


def mtp_flop_terms(spec: TrainSpec, t: FlopTerms) -> FlopTerms:
    """``t`` (which counts the MTP modules' transformer layers among its layers) plus what else
    the D = mtp_num_layers modules compute per token: each projects the concatenated 2h inputs
    to h (``eh_proj``, 6 * 2h * h forward and backward) and runs the shared output layer once
    more (6 * h * V). Megatron-LM's ``num_floating_point_operations``
    (megatron/training/training.py, core_r0.16.0) counts the MTP layers the same way: MoE when
    the last decoder layer is (``num_moe_layers += last_layer_is_moe * mtp_num_layers``).
    Unchanged without MTP."""
    mtp = spec.model.mtp_num_layers or 0
    if not mtp:
        return t
    h = spec.model.hidden_size
    return FlopTerms(
        t.per_token_layers + mtp * 6 * 2 * h * h, t.per_token_logits * (1 + mtp), t.core_per_s2
    )


def model_flop_terms(spec: TrainSpec, layers: int, moe_layers: int, vocab: int) -> FlopTerms:
    """:func:`flop_terms` of a normalized spec's model for ``layers`` layers of which
    ``moe_layers`` are MoE, with a ``vocab``-wide output layer (one layer: ``layers=1``)."""
    m = spec.model
    moe = bool(m.num_experts)
    return flop_terms(
        h=m.hidden_size,
        a=m.num_attention_heads,
        g=filled(m.num_query_groups, "model.num_query_groups"),
        d=filled(m.kv_channels, "model.kv_channels"),
        f=filled(m.ffn_hidden_size, "model.ffn_hidden_size"),
        V=vocab,
        L=layers,
        swiglu=m.activation is Activation.swiglu,
        num_moe_layers=moe_layers,
        f_e=filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size") if moe else 0,
        topk=m.moe_router_topk if moe else 0,
        f_s=(m.moe_shared_expert_intermediate_size or 0) if moe else 0,
        mla=mla_dims(spec),
        core_share=window_core_share(spec),
    )


def mla_dims(spec: TrainSpec) -> tuple[int | None, int, int, int, int] | None:
    """(q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim) of a model with
    multi-head latent attention, else None."""
    m = spec.model
    if not m.multi_latent_attention:
        return None
    return (m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim)


def flops_per_step(spec: TrainSpec, plan: Plan) -> float:
    """Model FLOPs of one optimizer step, whole job (global batch x seq_length tokens)."""
    t = spec_flop_terms(spec, plan)
    b, s = spec.training.global_batch_size, spec.model.seq_length
    return b * s * (t.per_token_layers + t.per_token_logits) + b * s * s * t.core_per_s2


def hardware_flops_per_step(spec: TrainSpec, plan: Plan) -> float:
    """FLOPs actually executed: model FLOPs plus recomputation.

    Full recompute re-runs the forward (1/3 of the 6x count) of the layers it checkpoints (all of
    them with ``uniform``; the first ``recompute_num_layers`` of each chunk with ``block``, counted
    as that share of the layers); selective recompute
    re-runs the attention core's forward (Korthikanti et al. 2022 §5: 1/3 of the core term).
    """
    t = spec_flop_terms(spec, plan)
    b, s = spec.training.global_batch_size, spec.model.seq_length
    core = b * s * s * t.core_per_s2
    extra = 0.0
    stages = [recompute_parts(spec, n) for n in plan.derived.layers_per_stage or []]
    if stages and all(x is not None for x in stages):  # engine=fsdp: torchtitan's modes
        every = [p for x in stages for p in (x or [])]
        g = sum(p[0] for p in every) / max(len(every), 1)
        at = sum(p[1] for p in every) / max(len(every), 1)
        extra = (b * s * t.per_token_layers * g + core * at) / 3
    elif spec.training.recompute is Recompute.full:
        rerun = sum(sum(m) for m in plan_rerun_masks(plan))
        layers = max(sum(plan.derived.layers_per_stage), 1)
        extra = (b * s * t.per_token_layers + core) / 3 * rerun / layers
    elif spec.training.recompute is Recompute.selective:
        extra = core / 3
    return flops_per_step(spec, plan) + extra
