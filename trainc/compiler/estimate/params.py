"""Parameter counts from the architecture: per layer, per pipeline stage, per GPU.

Symbols (megatron_rules.md §4.1): ``h`` hidden, ``a`` heads, ``g`` query groups (KV heads), ``d``
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

from trainc.schemas import Activation, Normalization, PositionEmbedding, TrainSpec


def attention_params(h: int, a: int, g: int, d: int) -> int:
    """GQA attention weights: Q ``h x a*d``, K and V ``h x g*d`` each, O ``a*d x h``,
    i.e. ``2*h*d*(a + g)`` (megatron_rules.md §4.2 ``P_attn``).

    >>> attention_params(4096, 32, 8, 128)  # Llama-3-8B: 4 * 4096^2 * (1 + 8/32) / 2
    41943040
    """
    return 2 * h * d * (a + g)


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
    h, a = m.hidden_size, m.num_attention_heads
    g, d = m.num_query_groups or a, m.kv_channels or h // a
    swiglu = m.activation is Activation.swiglu
    ln = m.normalization is Normalization.layernorm
    attn = attention_params(h, a, g, d)
    norms = 2 * norm_params(h, ln)
    if not moe:
        return LayerParams(attn + mlp_params(h, m.ffn_hidden_size or 4 * h, swiglu), norms, 0)
    e = m.num_experts or 0
    fe = m.moe_ffn_hidden_size or m.ffn_hidden_size or 4 * h
    shared = mlp_params(h, m.moe_shared_expert_intermediate_size or 0, swiglu)
    return LayerParams(attn + shared, norms + h * e, e * mlp_params(h, fe, swiglu))


def stage_chunk_sizes(num_layers_per_stage: list[int], vpp: int, account_for_embedding: bool = False,
                      account_for_loss: bool = False) -> list[list[int]]:
    """Transformer layers in each model chunk of each PP rank (``[rank][chunk]``).

    Mirrors Megatron-Core ``get_num_layers_to_build``: every rank's (padded) layers form ``vpp``
    equal chunks; with ``account_for_embedding`` the first chunk of the first rank builds one layer
    fewer, with ``account_for_loss`` the last chunk of the last rank (megatron_rules.md §1.6).
    Splits that do not divide into ``vpp`` chunks are shown as one chunk per rank.

    >>> stage_chunk_sizes([7, 8, 8, 7], 2, True, True)
    [[3, 4], [4, 4], [4, 4], [4, 3]]
    """
    p = len(num_layers_per_stage)
    padded = [n + (account_for_embedding and r == 0) + (account_for_loss and r == p - 1)
              for r, n in enumerate(num_layers_per_stage)]
    if vpp <= 1 or any(n % vpp for n in padded):
        return [[n] for n in num_layers_per_stage]
    out = [[n // vpp] * vpp for n in padded]
    if account_for_embedding:
        out[0][0] -= 1
    if account_for_loss:
        out[-1][-1] -= 1
    return out


def stage_layer_indices(num_layers_per_stage: list[int], vpp: int,
                        account_for_embedding: bool = False,
                        account_for_loss: bool = False) -> list[list[int]]:
    """Global (0-based) layer indices of each PP rank, chunk by chunk.

    Without interleaving stage r holds a contiguous block. With ``vpp = v`` chunk j of rank r
    (sizes from :func:`stage_chunk_sizes`) sits at virtual position ``j*p + r``
    (megatron_rules.md §1.6).

    >>> stage_layer_indices([2, 2], 2)
    [[0, 2], [1, 3]]
    >>> stage_layer_indices([1, 2], 2, True, False)
    [[1], [0, 2]]
    """
    sizes = stage_chunk_sizes(num_layers_per_stage, vpp, account_for_embedding, account_for_loss)
    p, v = len(sizes), max((len(c) for c in sizes), default=1)
    out: list[list[int]] = [[] for _ in range(p)]
    pos = 0
    for j in range(v):  # virtual stage q = j*p + r, in order of q
        for r in range(p):
            n = sizes[r][j] if j < len(sizes[r]) else 0
            out[r].extend(range(pos, pos + n))
            pos += n
    return out


def plan_stage_chunks(plan: dict) -> list[list[int]]:
    """:func:`stage_chunk_sizes` of a ``plan.json`` dict."""
    d, par = plan["derived"], plan["spec"]["parallel"]
    return stage_chunk_sizes(d["layers_per_stage"], d["vpp"],
                             bool(par.get("account_for_embedding_in_pipeline_split")),
                             bool(par.get("account_for_loss_in_pipeline_split")))


def plan_stage_layers(plan: dict) -> list[list[int]]:
    """:func:`stage_layer_indices` of a ``plan.json`` dict."""
    d, par = plan["derived"], plan["spec"]["parallel"]
    return stage_layer_indices(d["layers_per_stage"], d["vpp"],
                               bool(par.get("account_for_embedding_in_pipeline_split")),
                               bool(par.get("account_for_loss_in_pipeline_split")))


def plan_rerun_masks(plan: dict) -> list[list[bool]]:
    """Per PP stage, in :func:`stage_layer_indices` order, whether each layer's forward runs a
    second time in the backward pass (:func:`full_recompute_mask` under ``recompute: full``;
    all False otherwise)."""
    tr = plan["spec"]["training"]
    chunks = plan_stage_chunks(plan)
    if tr.get("recompute") != "full":
        return [[False] * sum(c) for c in chunks]
    return [full_recompute_mask(c, tr.get("recompute_method"), tr.get("recompute_num_layers"))
            for c in chunks]


def full_recompute_mask(chunks: list[int], recompute_method: str | None,
                        recompute_num_layers: int | None) -> list[bool]:
    """Which of a stage's layers full recompute re-runs, in :func:`stage_layer_indices` order;
    ``chunks`` are the stage's chunk sizes (:func:`stage_chunk_sizes`).

    Mirrors Megatron-Core ``TransformerBlock._checkpointed_forward``: ``uniform`` checkpoints every
    layer in groups of ``recompute_num_layers``; ``block`` checkpoints the first
    ``recompute_num_layers`` layers of each model chunk and runs the rest with full stored
    activations.

    >>> full_recompute_mask([2, 2], "block", 1)
    [True, False, True, False]
    >>> full_recompute_mask([3], "uniform", 2)
    [True, True, True]
    """
    if recompute_method != "block":
        return [True] * sum(chunks)
    n = max(recompute_num_layers or 1, 1)
    return [k < n for c in chunks for k in range(c)]


def is_moe_layer(spec: TrainSpec, index: int) -> bool:
    """Megatron's int ``moe_layer_freq``: layer i is MoE iff ``i % freq == 0``."""
    m = spec.model
    return bool(m.num_experts) and m.moe_layer_freq >= 1 and index % m.moe_layer_freq == 0


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


def stage_params(spec: TrainSpec, plan: dict) -> list[StageParams]:
    """Per-GPU parameters of every PP stage (uneven splits and interleaving from ``derived``)."""
    m, d = spec.model, plan["derived"]
    tp, etp_ep = d["tp"], d["etp"] * d["ep"]
    h, V = m.hidden_size, d["padded_vocab_size"]
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
                dense += (m.max_position_embeddings or m.seq_length) * h
        if r == p - 1:
            dense += norm_params(h, ln)  # final norm
            if p > 1 or m.untie_embeddings_and_output_weights:
                dense += V * h / tp  # output layer (or the tied copy Megatron keeps when pp > 1)
                largest = max(largest, V * h / tp)
        out.append(StageParams(dense, expert, largest))
    return out


def total_params(spec: TrainSpec, plan: dict) -> int:
    """Unique parameters of the whole model (a tied embedding counted once).

    Llama-2-7B's shape (h 4096, 32 layers, f 11008, V 32000, untied) gives 6,738,415,616, the count
    DeepSpeed's ``model_to_params`` reports (deepspeed_rules.md §4.1 B; tested).
    """
    m, d = spec.model, plan["derived"]
    h, V = m.hidden_size, d["padded_vocab_size"]
    ln = m.normalization is Normalization.layernorm
    dense_l, moe_l = layer_params(spec, False), layer_params(spec, True)
    n = 0
    for i in range(m.num_layers):
        lp = moe_l if is_moe_layer(spec, i) else dense_l
        n += lp.tp_sharded + lp.replicated + lp.expert
    n += V * h * (2 if m.untie_embeddings_and_output_weights else 1) + norm_params(h, ln)
    if m.position_embedding is PositionEmbedding.learned:
        n += (m.max_position_embeddings or m.seq_length) * h
    return n
