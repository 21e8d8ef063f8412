"""``model:`` section: the transformer's shape."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import (
    Activation,
    MoeDispatcher,
    MoeFlexBackend,
    MoeLoadBalancing,
    MoeScoreFunction,
    Normalization,
    PositionEmbedding,
)


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
    """KV heads g for grouped-query attention (count). Default: num_attention_heads (MHA).
    TRC202."""
    ffn_hidden_size: int | None = None
    """MLP inner width (elements). Default as Megatron-LM's CLI: swiglu -> floor(8h/3/64)*64, else
    4h. Rules: TRC203."""
    kv_channels: int | None = None
    """Per-head width d (elements). Default: hidden_size / num_attention_heads. Rules: TRC208."""
    vocab_size: int
    """Tokenizer vocabulary (count), before padding. Required. Padded as Megatron does (TRC209)."""
    make_vocab_size_divisible_by: int = 128
    """Vocab padding unit (Megatron ``--make-vocab-size-divisible-by``); padded to a multiple of
    this x tp."""
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
    rotary_percent: float = 1.0
    """Fraction of each head's channels that RoPE rotates, in (0, 1] (Megatron --rotary-percent)."""
    rope_scaling_factor: float | None = None
    """Llama 3.1-style RoPE frequency scaling factor (Megatron-LM --use-rope-scaling
    --rope-scaling-factor; GPTModel rope_scaling); null = no scaling. Llama 3.1: 8.0."""
    add_qkv_bias: bool = False
    """Bias on the QKV projection (Qwen-2 style; Megatron --add-qkv-bias). Normalized to true
    whenever add_bias_linear is (Megatron-LM's validate_args keeps the two in sync)."""
    add_bias_linear: bool | None = None
    """Biases in every linear layer (Megatron add_bias_linear, whose own default is true).
    Default: false for Llama-style models (swiglu or rmsnorm) and for MoE with etp > 1
    (Megatron-Core rejects expert biases there), true otherwise (GPT-3)."""
    norm_epsilon: float = 1.0e-5
    """Epsilon of the layer norms (> 0; Megatron --norm-epsilon, default 1e-5)."""
    init_method_std: float = 0.02
    """Standard deviation of the normal weight init (> 0; Megatron --init-method-std)."""
    hidden_dropout: float = 0.1
    """Dropout after attention and MLP, in [0, 1) (Megatron default 0.1; most LLM presets set 0)."""
    attention_dropout: float = 0.1
    """Dropout on attention probabilities, in [0, 1) (Megatron default 0.1)."""
    untie_embeddings_and_output_weights: bool = True
    """True: separate input embedding and output layer (Llama); False: tied (GPT-3)."""
    multi_latent_attention: bool = False
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; Megatron-Core
    ``MLATransformerConfig``, Megatron-LM --multi-latent-attention): queries and keys / values
    are projected through low-rank latents (q_lora_rank, kv_lora_rank), heads of qk_head_dim +
    qk_pos_emb_head_dim channels for Q and K and v_head_dim for V; kv_channels and
    num_query_groups do not apply. engine=megatron or deepspeed (TRC344 for fsdp). TRC316."""
    qk_layernorm: bool = False
    """Normalise every query and key head over its head_dim (with ``normalization``) after the
    QKV projection and before RoPE: Qwen3's ``q_norm`` / ``k_norm``. Megatron-Core
    ``TransformerConfig.qk_layernorm`` (Megatron-LM --qk-layernorm); with multi_latent_attention
    it is on whatever this says (there it builds the latents' norms). engine=megatron or
    deepspeed (TRC344 for fsdp). Its element-wise cost is not estimated (two norms over
    ``(q + kv) x head_dim`` per token, under 1 % of a layer)."""
    window_size: int | None = None
    """Sliding-window attention: each query attends to itself and the ``window_size`` keys to
    its left only (tokens; Mistral 7B v0.1: 4095, Hugging Face's ``sliding_window`` minus one);
    null = full causal attention. Megatron-Core ``TransformerConfig.window_size = (w, 0)``
    (Megatron-LM ``--window-size w,0``); engine=megatron or deepspeed (TRC344 for fsdp).
    The fused attention's score FLOPs scale by ``(2sw - w^2) / s^2`` on the windowed layers.
    Rules: TRC310."""
    window_attn_skip_freq: int | None = None
    """Sliding-window attention: every N-th layer (1-based layer numbers N, 2N, ...) uses full
    causal attention, the others the window (Gemma 3: 6, gpt-oss: 2); null = every layer is
    windowed. Megatron-Core ``TransformerConfig.window_attn_skip_freq`` (its int form,
    ``transformer/utils.py::is_layer_window_attention``: windowed iff
    ``layer_number % N != 0``; Megatron-LM ``--window-attn-skip-freq N``). Needs window_size.
    Rules: TRC310."""
    q_lora_rank: int | None = None
    """MLA: rank of the query latent (elements; DeepSeek-V3: 1536); null = queries projected
    from the hidden state directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: int = 512
    """MLA: rank of the key/value latent (elements; DeepSeek-V3: 512)."""
    qk_head_dim: int = 128
    """MLA: per-head query/key channels without rotary embedding (elements)."""
    qk_pos_emb_head_dim: int = 64
    """MLA: per-head query/key channels with rotary embedding (elements; shared by all heads
    for the key)."""
    v_head_dim: int = 128
    """MLA: per-head value channels (elements)."""
    num_experts: int | None = None
    """MoE: routed experts per MoE layer (count); null = dense model. Rules: TRC205, TRC206,
    TRC312."""
    moe_router_topk: int = 2
    """MoE: experts each token is routed to (count). Rules: TRC206."""
    moe_ffn_hidden_size: int | None = None
    """MoE: expert MLP inner width (elements). Default: ffn_hidden_size. Rules: TRC204."""
    moe_shared_expert_intermediate_size: int | None = None
    """MoE: total inner width of the shared experts (elements); null = none."""
    moe_token_dispatcher_type: MoeDispatcher = MoeDispatcher.alltoall
    """MoE: how tokens reach their experts: alltoall (all-to-all over the EP group), allgather
    (every EP rank gathers all tokens; simpler, more traffic) or flex (fused DeepEP / HybridEP
    kernels over the etp x ep group; needs etp*ep > 1). Rules: TRC375, TRC377."""
    moe_flex_dispatcher_backend: MoeFlexBackend = MoeFlexBackend.deepep
    """MoE: backend of the flex dispatcher: deepep or hybridep (Megatron-Core
    ``moe_flex_dispatcher_backend``; read only with moe_token_dispatcher_type=flex). TRC375."""
    moe_pad_expert_input_to_capacity: bool = False
    """MoE: drop-and-pad, every expert's input padded to its capacity (Megatron-Core
    ``moe_pad_expert_input_to_capacity``); needs moe_expert_capacity_factor (TRC376) and does
    not run with the flex dispatcher's deepep backend (TRC375)."""
    moe_router_padding_for_quantization: bool = False
    """MoE: pad each expert's tokens in the router to the FP8/FP4 GEMM alignment (16, 32 for
    mxfp8, 128 for nvfp4) instead of in the experts (Megatron-Core
    ``moe_router_padding_for_quantization``); needs fp8_format or fp4_format and the alltoall
    or flex dispatcher (TRC377)."""
    moe_layer_freq: int = 1
    """MoE: every k-th layer (0-based i with i % k == 0) is an MoE layer. Rules: TRC315."""
    moe_first_k_dense_layers: int = 0
    """MoE: the first k layers are dense (a plain MLP of ffn_hidden_size): layer i (0-based) is
    MoE iff ``i >= k`` and ``i % moe_layer_freq == 0``, the rule of HF ``DeepseekV3DecoderLayer``
    (``first_k_dense_replace``; DeepSeek-V3: 3, Kimi K2: 1). Written to Megatron-Core as the
    list form of ``moe_layer_freq`` (TransformerConfig.moe_layer_freq: Union[int, List[int]];
    Megatron-LM ``--moe-layer-freq "([0]*3+[1]*58)"``); engine=megatron only (TRC386).
    Rules: TRC384."""
    mtp_num_layers: int | None = None
    """Multi-token prediction modules after the decoder (count; DeepSeek-V3: 1,
    ``num_nextn_predict_layers``); each is one transformer layer plus two norms and a 2h x h
    projection, sharing the embedding and output layer (arXiv:2412.19437 §2.2). null = none.
    Megatron-Core ``TransformerConfig.mtp_num_layers`` (Megatron-LM ``--mtp-num-layers``);
    engine=megatron with entrypoint megatron-lm only (TRC386: the trainc worker builds no MTP
    block, DeepSpeed and FSDP2 have none)."""
    moe_router_num_groups: int | None = None
    """MoE: group-limited routing, experts split into this many equal groups (DeepSeek-V3:
    ``n_group`` 8); null = none. Megatron-Core ``TransformerConfig.moe_router_num_groups``
    (``--moe-router-num-groups``); must divide num_experts. engine=megatron only (TRC386)."""
    moe_router_group_topk: int | None = None
    """MoE: groups each token may route to (DeepSeek-V3: ``topk_group`` 4); set together with
    moe_router_num_groups and at most it. Megatron-Core ``moe_router_group_topk``
    (``--moe-router-group-topk``)."""
    moe_router_enable_expert_bias: bool = False
    """MoE: the aux-loss-free load balancing of DeepSeek-V3 (``topk_method: noaux_tc``): a
    per-expert bias added to the scores for top-k selection only, updated from the load
    (arXiv:2412.19437 §2.1.2). Needs moe_router_score_function sigmoid (Megatron-Core 0.16.1
    TransformerConfig.__post_init__). Megatron-Core ``moe_router_enable_expert_bias``
    (``--moe-router-enable-expert-bias``); engine=megatron only (TRC386)."""
    moe_router_load_balancing_type: MoeLoadBalancing = MoeLoadBalancing.aux_loss
    """MoE: load balancing of the router: aux_loss (Switch/GShard), seq_aux_loss (DeepSeek-V2/V3),
    global_aux_loss, sinkhorn or none (Megatron-Core default aux_loss)."""
    moe_aux_loss_coeff: float = 0.0
    """MoE: weight of the load-balancing loss (>= 0; Megatron default 0.0, Mixtral-style runs use
    1e-2)."""
    moe_z_loss_coeff: float | None = None
    """MoE: weight of the router z-loss (ST-MoE); null = off (Megatron default)."""
    moe_router_score_function: MoeScoreFunction = MoeScoreFunction.softmax
    """MoE: softmax or sigmoid router scores (DeepSeek-V3 uses sigmoid)."""
    moe_router_pre_softmax: bool | None = None
    """MoE: softmax over every expert before top-k, the k weights left as they are (Qwen1.5 /
    Qwen2 / Qwen3-MoE with ``norm_topk_prob: false``), instead of a softmax over the k chosen
    logits, which sums to one (Mixtral's renormalized weights; Megatron-Core 0.16
    ``moe_utils.topk_routing_with_score_function``). Default: true when moe_router_topk is 1
    (a softmax over one score is constant), false otherwise."""
    moe_router_topk_scaling_factor: float | None = None
    """MoE: scale of the routing weights after top-k (DeepSeek-V3: 2.5); null = none."""
    moe_expert_capacity_factor: float | None = None
    """MoE: token capacity per expert as a multiple of the even share (tokens over it are
    dropped); null = dropless (Megatron default)."""
