"""TRC2xx, divisibility: shapes, layers, batches and sequences over the parallel degrees."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

HEADS_TP = Rule(
    id="TRC201",
    name="heads-divisible-by-tp",
    summary="num_attention_heads must be a multiple of tp",
    source="TransformerConfig.__post_init__ (heads % tp)",
)

GROUPS_TP = Rule(
    id="TRC202",
    name="query-groups-vs-tp",
    summary="num_query_groups must be a multiple or a divisor of tp (Megatron-Core >= 0.16)",
    source="TransformerConfig.__post_init__, Megatron-Core >= 0.16 (query groups vs tp)",
)

FFN_TP = Rule(
    id="TRC203",
    name="ffn-divisible-by-tp",
    summary="ffn_hidden_size must be a multiple of tp",
    source="tensor_parallel/layers.py RowParallelLinear divide()",
)

MOE_FFN_ETP = Rule(
    id="TRC204",
    name="moe-ffn-divisible-by-etp",
    summary="moe_ffn_hidden_size must be a multiple of etp",
    source="expert linear layers divide() (moe_ffn % etp)",
)

EXPERTS_EP = Rule(
    id="TRC205",
    name="experts-divisible-by-ep",
    summary="num_experts must be a multiple of ep",
    source="validate_args / transformer/moe/moe_layer.py MoELayer",
)

TOPK_EXPERTS = Rule(
    id="TRC206",
    name="topk-within-experts",
    summary="moe_router_topk must be in [1, num_experts]",
    source="not validated by Megatron; torch.topk in transformer/moe/router.py fails at run time",
)

HEADS_GROUPS = Rule(
    id="TRC207",
    name="heads-divisible-by-query-groups",
    summary="num_attention_heads must be a multiple of num_query_groups",
    source="transformer/attention.py divide(a, g)",
)

HIDDEN_HEADS = Rule(
    id="TRC208",
    name="hidden-divisible-by-heads",
    summary="hidden_size must be a multiple of num_attention_heads unless kv_channels is given",
    source="validate_args (hidden % heads without kv_channels)",
)

VOCAB_PADDING = Rule(
    id="TRC209",
    name="vocab-padding",
    summary="vocab_size is padded to a multiple of make_vocab_size_divisible_by*tp",
    severity=Severity.info,
    source="megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding",
)

LAYERS_PP = Rule(
    id="TRC210",
    name="layers-divisible-by-pp",
    summary="num_layers must be a multiple of pp",
    source="transformer_block.get_num_layers_to_build (BC-001)",
)

LAYERS_VPP = Rule(
    id="TRC211",
    name="layers-divisible-by-pp-vpp",
    summary="num_layers must be a multiple of pp*vpp for the interleaved schedule",
    source="interleaved schedule layer split, TransformerConfig.__post_init__ (BC-003)",
)

UNEVEN_PP = Rule(
    id="TRC212",
    name="uneven-pp-layout",
    summary=(
        "first/last stage layers must be given with pp > 1 and leave a middle that divides evenly"
    ),
    source="TransformerConfig.__post_init__ uneven PP (BC-005)",
)

VPP_NEEDS_PP = Rule(
    id="TRC213",
    name="vpp-needs-pp",
    summary="vpp > 1 needs pp > 1",
    source="parallel_state.initialize_model_parallel (vpp needs pp > 1)",
)

GLOBAL_BATCH = Rule(
    id="TRC214",
    name="global-batch-divisible",
    summary="global_batch_size must be a multiple of micro_batch_size*dp",
    source=(
        "num_microbatches_calculator.ConstantNumMicroBatchesCalculator; DeepSpeed "
        "runtime/config.py DeepSpeedConfig._batch_assertion"
    ),
)

MICROBATCHES_PP = Rule(
    id="TRC215",
    name="microbatches-at-least-pp",
    summary=(
        "num_microbatches below pp leaves pipeline stages idle (an error with interleaving, and "
        "with engine=fsdp's single-stage 1F1B schedule, which torch.distributed.pipelining "
        "rejects)"
    ),
    severity=Severity.warning,
    source=(
        "pipeline_parallel/schedules.py; torch 2.13 torch/distributed/pipelining/schedules.py "
        "Schedule1F1B.__init__ (n_microbatches >= num_stages, pytorch/pytorch PR 144702; "
        "pytorch/torchtitan#775)"
    ),
)

MICROBATCHES_VPP = Rule(
    id="TRC216",
    name="microbatches-multiple-of-pp",
    summary="the interleaved schedule needs num_microbatches to be a multiple of pp",
    source="schedules.forward_backward_pipelining_with_interleaving",
)

CP_SEQ = Rule(
    id="TRC217",
    name="seq-divisible-by-2cp",
    summary="seq_length must be a multiple of 2*cp when cp > 1",
    source="validate_args (seq % (2*cp))",
)

SP_SEQ = Rule(
    id="TRC218",
    name="sp-seq-divisible-by-tp",
    summary="with sequence parallelism seq_length/cp must be a multiple of tp",
    source="tensor_parallel/mappings.py _split_along_first_dim (BC-015)",
)

MAX_POSITIONS = Rule(
    id="TRC219",
    name="max-positions-cover-seq",
    summary="max_position_embeddings must be >= seq_length",
    source="validate_args --max-position-embeddings",
)

CP_A2A_HEADS = Rule(
    id="TRC220",
    name="cp-a2a-heads-divisible",
    summary="cp_comm_type a2a needs the heads and query groups per TP rank to be multiples of cp",
    source=(
        "Transformer Engine pytorch/attention/dot_product_attention/context_parallel.py "
        "AttnFuncWithCPAndQKVOA2A (heads % cp)"
    ),
)

KV_REPLICATED = Rule(
    id="TRC221",
    name="kv-heads-replicated",
    summary=(
        "tp above num_query_groups replicates KV heads (Megatron-Core >= 0.16 only; wasteful); an "
        "error where launch.versions.megatron_core is older than 0.16.0, whose TransformerConfig "
        "raises"
    ),
    severity=Severity.warning,
    source=(
        "attention.py KV replication, Megatron-Core >= 0.16 (BC-011); "
        "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
        "(core_v0.15.3: num_query_groups % tp == 0 required; core_v0.16.0: or tp % "
        "num_query_groups == 0)"
    ),
)

QKV_WIDTH_TP = Rule(
    id="TRC222",
    name="qkv-width-divisible-by-tp",
    summary=(
        "with KV replication (tp above num_query_groups) tp must divide the fused QKV "
        "projection, kv_channels*(heads + 2*groups) wide"
    ),
    source=(
        "megatron-core 0.16.1 transformer/attention.py SelfAttention.__init__: linear_qkv is a "
        "ColumnParallelLinear of kv_channels*(heads + 2*groups) outputs, split over tp by divide()"
    ),
)

RECOMPUTE_UNIFORM_CHUNKS = Rule(
    id="TRC260",
    name="recompute-uniform-divides-chunk",
    summary=(
        "with recompute_method uniform, recompute_num_layers must divide the layers of every "
        "pipeline stage chunk on Megatron-Core before 0.17.0 (the last checkpointed chunk runs "
        "past the stage's layers: IndexError)"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.fsdp: Severity.na},
    source=(
        "megatron/core/transformer/transformer_block.py TransformerBlock._checkpointed_forward, "
        "uniform method (core_v0.16.1: custom(layer_idx, layer_idx + recompute_num_layers) "
        "unclamped; clamped to the stage's layers by NVIDIA/Megatron-LM PR #3562, first in "
        "core_v0.17.0); NVIDIA/Megatron-LM#1807"
    ),
)

#: the family: its id ranges and, explicitly, its rules
DIVISIBILITY = Family(
    name="divisibility",
    ids=(range(200, 300),),
    about="shapes, layers, batches and sequences over the degrees",
    rules=(
        HEADS_TP,
        GROUPS_TP,
        FFN_TP,
        MOE_FFN_ETP,
        EXPERTS_EP,
        TOPK_EXPERTS,
        HEADS_GROUPS,
        HIDDEN_HEADS,
        VOCAB_PADDING,
        LAYERS_PP,
        LAYERS_VPP,
        UNEVEN_PP,
        VPP_NEEDS_PP,
        GLOBAL_BATCH,
        MICROBATCHES_PP,
        MICROBATCHES_VPP,
        CP_SEQ,
        SP_SEQ,
        MAX_POSITIONS,
        CP_A2A_HEADS,
        KV_REPLICATED,
        QKV_WIDTH_TP,
        RECOMPUTE_UNIFORM_CHUNKS,
    ),
)
