"""Parameter counts from the architecture: per layer, per pipeline stage, per GPU.

Symbols (as in Megatron-LM's theoretical_memory_usage.py): ``h`` hidden, ``a`` heads, ``g`` query groups (KV heads), ``d``
kv_channels, ``f`` ffn_hidden_size, ``f_e`` moe_ffn_hidden_size, ``f_s`` shared-expert width, ``E``
routed experts, ``V`` padded vocab, ``gamma = 3/2`` for SwiGLU (three h x f matrices instead of two),
``nu = 1`` for RMSNorm (weight) and 2 for LayerNorm (weight + bias). Biases of linear layers are
ignored, as in Megatron's ``theoretical_memory_usage.py`` (Llama-style models have none).

Sharding (Megatron-Core): attention, dense MLP, shared experts, embedding and output layer are split
over ``tp``; norms, the router and learned position embeddings are replicated over ``tp``; routed
experts are split over ``etp x ep`` (the expert grid).

Embedding and output layer: the first stage holds the word embedding (``V x h``). The last stage
holds the output layer. With untied weights it is a separate ``V x h`` matrix; with **tied**
weights and ``pp > 1`` Megatron still allocates a copy of the embedding on the last stage
(``LanguageModule.setup_embeddings_and_output_layer``, kept in sync by the embedding group's
all-reduce), so the last stage holds ``V x h`` either way; with ``pp == 1`` a tied model holds it once.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.compiler.decide import traits
from trainc.compiler.derive import full_recompute_mask, stage_chunk_sizes, stage_layer_indices
from trainc.compiler.ir import Plan, filled
from trainc.compiler.targets.torchtitan_ac import ac_setting, checkpointed_blocks
from trainc.schemas import (
    Activation,
    Normalization,
    PositionEmbedding,
    Recompute,
    TrainSpec,
)


def attention_params(h: int, a: int, g: int, d: int) -> int:
    """GQA attention weights: Q ``h x a*d``, K and V ``h x g*d`` each, O ``a*d x h``,
    i.e. ``2*h*d*(a + g)`` (Megatron-LM core_v0.16.1
    ``megatron/training/theoretical_memory_usage.py::compute_weight_and_optimizer_memory``).

    >>> attention_params(4096, 32, 8, 128)  # Llama-3-8B: 4 * 4096^2 * (1 + 8/32) / 2
    41943040
    """
    return 2 * h * d * (a + g)


def mla_params(
    h: int, n: int, q_lora: int | None, kv_lora: int, qk: int, pos: int, v: int
) -> tuple[int, int]:
    """Multi-head latent attention weights (Megatron-Core ``MLASelfAttention``) as
    ``(tp_sharded, replicated)``: the up projections ``q_lora x n*(qk + pos)`` (or, without a
    query latent, ``h x n*(qk + pos)``), ``kv_lora x n*(qk + v)`` and the output projection
    ``n*v x h`` are column / row parallel; the down projections ``h x q_lora`` and
    ``h x (kv_lora + pos)`` and the two latent norms are the same on every tp rank
    (Transformer Engine ``parallel_mode="duplicated"``).

    >>> mla_params(7168, 128, 1536, 512, 128, 64, 128)  # DeepSeek-V3: 187 M per layer
    (171966464, 15140864)
    """
    q_up = (q_lora if q_lora else h) * n * (qk + pos)
    sharded = q_up + kv_lora * n * (qk + v) + n * v * h
    replicated = (h * q_lora + q_lora if q_lora else 0) + h * (kv_lora + pos) + kv_lora
    return sharded, replicated


def attention_weights(spec: TrainSpec) -> tuple[int, int]:
    """One layer's attention weights as ``(tp_sharded, replicated)``: :func:`attention_params`
    (all column / row parallel), or :func:`mla_params` with ``multi_latent_attention``."""
    m = spec.model
    if m.multi_latent_attention:
        return mla_params(
            m.hidden_size,
            m.num_attention_heads,
            m.q_lora_rank,
            m.kv_lora_rank,
            m.qk_head_dim,
            m.qk_pos_emb_head_dim,
            m.v_head_dim,
        )
    return attention_params(
        m.hidden_size,
        m.num_attention_heads,
        filled(m.num_query_groups, "model.num_query_groups"),
        filled(m.kv_channels, "model.kv_channels"),
    ), 0


def head_dims(spec: TrainSpec) -> tuple[int, int, int, int]:
    """(query heads, key/value heads, channels per query/key head, channels per value head):
    ``(a, g, d, d)``, or for multi-head latent attention ``(a, a, qk + pos, v)`` (every head
    has its own key and value after the up projection)."""
    m = spec.model
    a = m.num_attention_heads
    if m.multi_latent_attention:
        return a, a, m.qk_head_dim + m.qk_pos_emb_head_dim, m.v_head_dim
    d = filled(m.kv_channels, "model.kv_channels")
    return a, filled(m.num_query_groups, "model.num_query_groups"), d, d


def mlp_params(h: int, f: int, swiglu: bool) -> int:
    """MLP weights: SwiGLU has gate, up (``h x f``) and down (``f x h``) = ``3*h*f``; GELU two = ``2*h*f``.

    >>> mlp_params(4096, 14336, True)
    176160768
    """
    return (3 if swiglu else 2) * h * f


def norm_params(h: int, layernorm: bool) -> int:
    """One norm's weights: RMSNorm ``h``, LayerNorm ``2h`` (weight and bias)."""
    return (2 if layernorm else 1) * h


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one transformer layer, split by how they are sharded (counts, whole layer)."""

    tp_sharded: int
    """Attention + dense MLP (or shared experts): divided by tp."""
    replicated: int
    """Two norms (+ router on MoE layers): the same on every tp rank."""
    expert: int
    """All routed experts of the layer: divided by etp * ep."""

    def per_gpu(self, tp: int, etp_ep: int) -> float:
        """Parameters one GPU holds for this layer."""
        return self.tp_sharded / tp + self.replicated + self.expert / etp_ep


def layer_params(spec: TrainSpec, moe: bool) -> LayerParams:
    """One dense or MoE layer of ``spec``'s model (normalized spec: every default filled)."""
    m = spec.model
    h = m.hidden_size
    swiglu = m.activation is Activation.swiglu
    ln = m.normalization is Normalization.layernorm
    attn, attn_rep = attention_weights(spec)
    norms = 2 * norm_params(h, ln) + attn_rep
    if not moe:
        return LayerParams(
            attn + mlp_params(h, filled(m.ffn_hidden_size, "model.ffn_hidden_size"), swiglu),
            norms,
            0,
        )
    e = m.num_experts or 0
    fe = filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size") if e else 0
    shared = mlp_params(h, m.moe_shared_expert_intermediate_size or 0, swiglu)
    return LayerParams(attn + shared, norms + h * e, e * mlp_params(h, fe, swiglu))


def plan_stage_chunks(plan: Plan) -> list[list[int]]:
    """:func:`stage_chunk_sizes` of a plan."""
    d, par = plan.derived, plan.spec.parallel
    return stage_chunk_sizes(
        list(d.layers_per_stage),
        d.vpp,
        par.account_for_embedding_in_pipeline_split,
        par.account_for_loss_in_pipeline_split,
    )


def plan_stage_layers(plan: Plan) -> list[list[int]]:
    """:func:`stage_layer_indices` of a plan."""
    d, par = plan.derived, plan.spec.parallel
    return stage_layer_indices(
        list(d.layers_per_stage),
        d.vpp,
        par.account_for_embedding_in_pipeline_split,
        par.account_for_loss_in_pipeline_split,
    )


def plan_rerun_masks(plan: Plan) -> list[list[bool]]:
    """Per PP stage, in :func:`stage_layer_indices` order, whether each layer's forward runs a
    second time in the backward pass (:func:`full_recompute_mask` under ``recompute: full``;
    engine=fsdp's every-N-layer mode: ``torchtitan_ac.checkpointed_blocks``; all False
    otherwise)."""
    tr = plan.spec.training
    chunks = plan_stage_chunks(plan)
    ac = ac_setting(plan.spec) if traits(plan.spec).torchtitan_ac else None
    if ac is not None and ac.mode == "selective_layer":  # every N-th block of the rank
        return [checkpointed_blocks(sum(c), filled(ac.every_n, "every_n")) for c in chunks]
    if tr.recompute is not Recompute.full:
        return [[False] * sum(c) for c in chunks]
    method = tr.recompute_method.value if tr.recompute_method else None
    return [full_recompute_mask(c, method, tr.recompute_num_layers) for c in chunks]


def is_moe_layer(spec: TrainSpec, index: int) -> bool:
    """Layer ``index`` (0-based) is MoE: ``index >= moe_first_k_dense_layers`` and
    ``index % moe_layer_freq == 0`` (:func:`trainc.compiler.derive.moe_layer_pattern`)."""
    m = spec.model
    return (
        bool(m.num_experts)
        and m.moe_layer_freq >= 1
        and index >= m.moe_first_k_dense_layers
        and index % m.moe_layer_freq == 0
    )


def mtp_params(spec: TrainSpec) -> tuple[LayerParams, int]:
    """One multi-token-prediction module: its transformer layer (an MoE layer when the last
    decoder layer is: Megatron-LM builds it from the last layer's spec) and its own weights outside
    the layer, ``enorm`` + ``hnorm`` + ``final_layernorm`` (3 norms of h) and ``eh_proj`` (2h x
    h, tp-sharded); the embedding and output layer are the model's, shared (megatron-core
    0.16.1 ``transformer/multi_token_prediction.py`` MultiTokenPredictionLayer;
    arXiv:2412.19437 §2.2). Returns (the layer, the extra weights: counts)."""
    m = spec.model
    h = m.hidden_size
    ln = m.normalization is Normalization.layernorm
    return (
        layer_params(spec, is_moe_layer(spec, m.num_layers - 1)),
        2 * h * h + 3 * norm_params(h, ln),
    )


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU of a pipeline stage holds, by sharding domain (counts)."""

    dense: float
    """Non-expert parameters per GPU (sharded by dp*cp under the distributed optimizer)."""
    expert: float
    """Routed-expert parameters per GPU (sharded by expert_dp under the distributed optimizer)."""
    largest_layer: float
    """Largest single module per GPU (ZeRO-3 gathers one at a time): a layer or the embedding."""

    @property
    def total(self) -> float:
        """dense + expert."""
        return self.dense + self.expert


def stage_params(spec: TrainSpec, plan: Plan) -> list[StageParams]:
    """Per-GPU parameters of every PP stage (uneven splits and interleaving from ``derived``)."""
    m, d = spec.model, plan.derived
    tp, etp_ep = d.tp, d.etp * d.ep
    h, V = m.hidden_size, d.padded_vocab_size
    ln = m.normalization is Normalization.layernorm
    dense_l, moe_l = layer_params(spec, False), layer_params(spec, True)
    stages = plan_stage_layers(plan)
    p = len(stages)
    out = []
    for r, idx in enumerate(stages):
        dense = expert = 0.0
        largest = 0.0
        for i in idx:
            lp = moe_l if is_moe_layer(spec, i) else dense_l
            dense += lp.tp_sharded / tp + lp.replicated
            expert += lp.expert / etp_ep
            largest = max(largest, lp.per_gpu(tp, etp_ep))
        if r == 0:
            dense += V * h / tp  # word embedding (vocab-parallel)
            largest = max(largest, V * h / tp)
            if m.position_embedding is PositionEmbedding.learned:
                dense += filled(m.max_position_embeddings, "model.max_position_embeddings") * h
        if r == p - 1:
            dense += norm_params(h, ln)  # final norm
            if m.mtp_num_layers:  # Megatron-Core puts the MTP block on the last stage
                mtp_l, extra = mtp_params(spec)
                dense += m.mtp_num_layers * (mtp_l.tp_sharded / tp + mtp_l.replicated + extra / tp)
                expert += m.mtp_num_layers * mtp_l.expert / etp_ep
                largest = max(largest, mtp_l.per_gpu(tp, etp_ep))
            if p > 1 or m.untie_embeddings_and_output_weights:
                dense += V * h / tp  # output layer (or the tied copy Megatron keeps when pp > 1)
                largest = max(largest, V * h / tp)
        out.append(StageParams(dense, expert, largest))
    return out


def total_params(spec: TrainSpec, plan: Plan) -> int:
    """Unique parameters of the whole model (a tied embedding counted once).

    Llama-2-7B's shape (h 4096, 32 layers, f 11008, V 32000, untied) gives 6,738,415,616, the count
    DeepSpeed 0.19.8's ``deepspeed/runtime/zero/stage3.py::model_to_params`` reports (tested).
    """
    m, d = spec.model, plan.derived
    h, V = m.hidden_size, d.padded_vocab_size
    ln = m.normalization is Normalization.layernorm
    dense_l, moe_l = layer_params(spec, False), layer_params(spec, True)
    n = 0
    for i in range(m.num_layers):
        lp = moe_l if is_moe_layer(spec, i) else dense_l
        n += lp.tp_sharded + lp.replicated + lp.expert
    n += V * h * (2 if m.untie_embeddings_and_output_weights else 1) + norm_params(h, ln)
    if m.mtp_num_layers:
        mtp_l, extra = mtp_params(spec)
        n += m.mtp_num_layers * (mtp_l.tp_sharded + mtp_l.replicated + mtp_l.expert + extra)
    if m.position_embedding is PositionEmbedding.learned:
        n += filled(m.max_position_embeddings, "model.max_position_embeddings") * h
    return n
