"""``model:`` section: the transformer's shape."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import Activation, MoeDispatcher, Normalization, PositionEmbedding


@dataclass(kw_only=True)
class ModelSpec:
    """Decoder-only transformer shape, in Megatron-Core terms (``TransformerConfig``)."""

    num_layers: int
    """Transformer layers (count). Required. Rules: TRC210-TRC213, TRC309."""
    hidden_size: int
    """Model width h (elements). Required. Rules: TRC208."""
    num_attention_heads: int
    """Query heads a (count). Required. Rules: TRC201, TRC207, TRC208."""
    num_query_groups: int | None = None
    """KV heads g for grouped-query attention (count). Default: num_attention_heads (MHA). TRC202."""
    ffn_hidden_size: int | None = None
    """MLP inner width (elements). Default as Megatron-LM's CLI: swiglu -> floor(8h/3/64)*64, else 4h.
    Rules: TRC203."""
    kv_channels: int | None = None
    """Per-head width d (elements). Default: hidden_size / num_attention_heads. Rules: TRC208."""
    vocab_size: int
    """Tokenizer vocabulary (count), before padding. Required. Padded as Megatron does (TRC209)."""
    make_vocab_size_divisible_by: int = 128
    """Vocab padding unit (Megatron ``--make-vocab-size-divisible-by``); padded to a multiple of this x tp."""
    seq_length: int
    """Training sequence length s (tokens). Required. Rules: TRC217-TRC219."""
    max_position_embeddings: int | None = None
    """Largest position the model supports (tokens). Default: seq_length. Rules: TRC219."""
    activation: Activation = Activation.swiglu
    """MLP activation: swiglu or gelu."""
    normalization: Normalization = Normalization.rmsnorm
    """rmsnorm or layernorm."""
    position_embedding: PositionEmbedding = PositionEmbedding.rope
    """rope or learned (absolute)."""
    rotary_base: int = 10000
    """RoPE base (theta); only with position_embedding=rope."""
    untie_embeddings_and_output_weights: bool = True
    """True: separate input embedding and output layer (Llama); False: tied (GPT-3)."""
    num_experts: int | None = None
    """MoE: routed experts per MoE layer (count); null = dense model. Rules: TRC205, TRC206, TRC312."""
    moe_router_topk: int = 2
    """MoE: experts each token is routed to (count). Rules: TRC206."""
    moe_ffn_hidden_size: int | None = None
    """MoE: expert MLP inner width (elements). Default: ffn_hidden_size. Rules: TRC204."""
    moe_shared_expert_intermediate_size: int | None = None
    """MoE: total inner width of the shared experts (elements); null = none."""
    moe_token_dispatcher_type: MoeDispatcher = MoeDispatcher.alltoall
    """MoE: how tokens reach their experts: alltoall (all-to-all over the EP group) or allgather
    (every EP rank gathers all tokens; simpler, more traffic)."""
    moe_layer_freq: int = 1
    """MoE: every k-th layer (0-based i with i % k == 0) is an MoE layer. Rules: TRC315."""
