"""Model dimensions the worker builds: the plan's, or tiny ones with the same parallel layout.

Shrinking keeps everything that decides *how* the job is split: tp/pp/vpp/cp/ep/etp/dp, the
number of microbatches and micro-batch size, MHA vs GQA vs MLA (with or without a query latent),
tp | heads and tp | query groups, gated vs plain MLP, dense vs MoE (experts stay divisible by
ep), tied vs untied embeddings. It shrinks
what only decides the *size*: hidden/ffn width, head width, vocab, sequence length (kept divisible
by 2*cp and by tp) and layers per virtual stage (one).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Dims:
    """The transformer's shape as the worker builds it."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    ffn_hidden_size: int
    vocab_size: int  # padded (what the embedding holds)
    seq_length: int
    max_position_embeddings: int
    num_experts: int | None
    moe_router_topk: int
    moe_ffn_hidden_size: int | None
    moe_layer_freq: int
    moe_shared_expert_intermediate_size: int | None
    first_stage_layers: int | None
    last_stage_layers: int | None
    account_for_embedding: bool = False
    """Megatron account_for_embedding_in_pipeline_split (the first chunk builds a layer fewer)."""
    account_for_loss: bool = False
    """Megatron account_for_loss_in_pipeline_split (the last chunk builds a layer fewer)."""
    mla: tuple[int | None, int, int, int, int] | None = None
    """Multi-head latent attention's (q_lora_rank, kv_lora_rank, qk_head_dim,
    qk_pos_emb_head_dim, v_head_dim); None for grouped-query attention."""

    def describe(self) -> str:
        """``key=value`` list for the log."""
        return " ".join(
            f"{k}={v}"
            for k, v in asdict(self).items()
            if v is not None and (self.num_experts or not k.startswith("moe_"))
        )


def _lcm(*xs: int) -> int:
    out = 1
    for x in xs:
        out = out * max(x, 1) // math.gcd(out, max(x, 1))
    return out


def full_dims(plan: dict[str, Any]) -> Dims:
    """The plan's own dimensions (no shrinking): ``engines.megatron_core``'s TransformerConfig
    and GPTModel values."""
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    gpt = plan["engines"]["megatron_core"]["GPTModel"]
    return Dims(
        num_layers=tc["num_layers"],
        hidden_size=tc["hidden_size"],
        num_attention_heads=tc["num_attention_heads"],
        num_query_groups=tc["num_query_groups"],
        kv_channels=tc["kv_channels"],
        ffn_hidden_size=tc["ffn_hidden_size"],
        vocab_size=gpt["vocab_size"],
        seq_length=plan["spec"]["model"]["seq_length"],
        max_position_embeddings=gpt["max_sequence_length"],
        num_experts=tc.get("num_moe_experts"),
        moe_router_topk=tc.get("moe_router_topk", 0),
        moe_ffn_hidden_size=tc.get("moe_ffn_hidden_size"),
        moe_layer_freq=tc.get("moe_layer_freq", 1),
        moe_shared_expert_intermediate_size=tc.get("moe_shared_expert_intermediate_size"),
        first_stage_layers=tc["num_layers_in_first_pipeline_stage"],
        last_stage_layers=tc["num_layers_in_last_pipeline_stage"],
        account_for_embedding=tc["account_for_embedding_in_pipeline_split"],
        account_for_loss=tc["account_for_loss_in_pipeline_split"],
        mla=(
            tc["q_lora_rank"],
            tc["kv_lora_rank"],
            tc["qk_head_dim"],
            tc["qk_pos_emb_head_dim"],
            tc["v_head_dim"],
        )
        if tc.get("multi_latent_attention")
        else None,
    )


def shrink(plan: dict[str, Any], head_dim: int = 16, seq: int = 32, vocab: int = 128) -> Dims:
    """Tiny dimensions with the plan's layout (see the module docstring)."""
    full = full_dims(plan)
    d = plan["derived"]
    tp, cp, pp, vpp, ep = d["tp"], d["cp"], d["pp"], d["vpp"], d["ep"]
    etp = d.get("etp") or tp
    gqa = full.num_query_groups < full.num_attention_heads
    if gqa:
        groups = tp
        heads = groups * min(2, full.num_attention_heads // full.num_query_groups)
    else:
        heads = groups = tp * max(1, 4 // tp)
    hidden = heads * head_dim
    ffn = _lcm(tp, 2) * math.ceil(2 * hidden / _lcm(tp, 2))
    seq_len = _lcm(seq, 2 * cp, tp)
    padded_vocab = _lcm(tp, 8) * math.ceil(vocab / _lcm(tp, 8))
    experts = None
    if full.num_experts:
        experts = ep * max(1, math.ceil(4 / ep))
    # One layer per model chunk; with account_for_* two slots per chunk, so that the chunk that
    # also holds the embedding (loss) still builds one transformer layer.
    extra = int(full.account_for_embedding) + int(full.account_for_loss)
    return Dims(
        num_layers=pp * vpp * (2 if extra else 1) - extra,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=head_dim,
        ffn_hidden_size=ffn,
        vocab_size=padded_vocab,
        seq_length=seq_len,
        max_position_embeddings=seq_len,
        num_experts=experts,
        moe_router_topk=min(full.moe_router_topk, experts or 1),
        moe_ffn_hidden_size=(etp * math.ceil(hidden / etp)) if experts else None,
        moe_layer_freq=1 if experts else full.moe_layer_freq,
        moe_shared_expert_intermediate_size=(
            _lcm(tp, 2) * math.ceil(hidden / _lcm(tp, 2))
            if full.moe_shared_expert_intermediate_size
            else None
        ),
        first_stage_layers=None,
        last_stage_layers=None,
        account_for_embedding=full.account_for_embedding,
        account_for_loss=full.account_for_loss,
        # MLA: latents and head widths as small as the head width, a query latent when the plan
        # has one
        mla=(
            (
                head_dim if full.mla[0] else None,
                head_dim,
                head_dim // 2,
                head_dim // 2,
                head_dim // 2,
            )
            if full.mla
            else None
        ),
    )
