"""TRC37x (then TRC36x), low precision and the Megatron-Core MoE dispatcher: recipes per GPU
architecture, GEMM shapes, MXFP8/FP4 settings, flex dispatcher and padding. Not applicable to
DeepSpeed or FSDP: trainc's runners there have no Transformer Engine GEMMs and no Megatron-Core
MoE dispatcher (TRC330 / TRC313 / the engine=fsdp rules report the spec instead)."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

LOW_PRECISION_GPU = Rule(
    id="TRC370",
    name="low-precision-recipe-gpu",
    summary=(
        "the FP8 / FP4 recipe must run on cluster.gpu: FP8 needs compute capability 8.9+ (no "
        "A100), mxfp8 and nvfp4 need Blackwell (B200, GB200), blockwise needs Hopper or a recent "
        "Transformer Engine on Blackwell, and CUDA 12.9 or later (launch.versions.cuda)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "transformer_engine/pytorch/quantization.py check_recipe_support / _compute_fp8_support "
        "(8.9+), _compute_mxfp8_support and _compute_nvfp4_support (10.0+), "
        "_compute_fp8_block_scaling_support (TE 2.x: Hopper, later 9.0+; torch.version.cuda >= "
        "12.9 in v2.3 .. v2.18; NVIDIA-NeMo/RL#971); megatron-core 0.16.1 transformer_config.py "
        "fp8_recipe ('mxfp8' for Blackwell only)"
    ),
)

LOW_PRECISION_SHAPES = Rule(
    id="TRC371",
    name="low-precision-gemm-shapes",
    summary=(
        "every FP8 / FP4 GEMM's local shape after the TP / ETP split must be aligned: tokens per "
        "micro-batch divisible by 8 and widths by 16 (delayed, tensorwise, blockwise), both by 32 "
        "(mxfp8), both by 16 (nvfp4)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "transformer_engine/pytorch/utils.py assert_dim_for_fp8_exec (height % 8, width % 16); "
        "tensor/mxfp8_tensor.py and nvfp4_tensor.py Quantizer.is_quantizable (block sizes 32 and "
        "16); megatron-core 0.16.1 fp8_utils.get_fp8_align_size"
    ),
)

FP8_BF16_LAYERS = Rule(
    id="TRC372",
    name="fp8-bf16-layers",
    summary=(
        "first_last_layers_bf16 needs fp8_format or fp4_format and a recipe other than delayed "
        "(Megatron-Core: 'Delayed scaling does not support first / last layer in BF16')"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ ('Delayed "
        "scaling does not support first / last layer in BF16')"
    ),
)

MOE_BIAS_ETP = Rule(
    id="TRC373",
    name="moe-bias-needs-etp1",
    summary=(
        "add_bias_linear with experts needs etp = 1 (Megatron-Core: 'Bias in Moe is only supported "
        "when ETP==1')"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ ('Bias in Moe "
        "is only supported when ETP==1')"
    ),
)

MXFP8_FORMAT = Rule(
    id="TRC374",
    name="mxfp8-e4m3-only",
    summary=(
        "the mxfp8 recipe trains with E4M3 in forward and backward; fp8_format hybrid (E5M2 "
        "gradients) diverged in Megatron-Bridge's MXFP8 runs"
    ),
    severity=Severity.warning,
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.warning,
    },
    source=(
        "Megatron-Bridge PR #638 (github.com/NVIDIA-NeMo/Megatron-Bridge/pull/638): the MXFP8 "
        "recipe must use E4M3 for fprop and bprop; NeMo PR #14793"
    ),
)

MXFP8_PARAM_GATHER = Rule(
    id="TRC379",
    name="mxfp8-param-gather",
    summary=(
        "mxfp8 without fp8_param_gather keeps BF16 parameter copies next to the MXFP8 ones "
        "(Megatron-Core: 'will use significant amount additional GPU memory')"
    ),
    severity=Severity.warning,
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.warning,
    },
    source=(
        "megatron-core 0.16.1 optimizer/optimizer_config.py OptimizerConfig.__post_init__ (mxfp8 "
        "without reuse_grad_buf_for_mxfp8_param_ag and fp8_param_gather warning)"
    ),
)

MOE_FLEX_DISPATCHER = Rule(
    id="TRC375",
    name="moe-flex-dispatcher",
    summary=(
        "the flex token dispatcher needs etp*ep > 1; its deepep backend does not drop-and-pad "
        "(moe_pad_expert_input_to_capacity); its backend key is read only with flex"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron-core 0.16.1 transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher.__init__ "
        "('Flex token dispatcher requires TPxEP > 1'); transformer_config.py __post_init__ (deepep "
        "backend vs moe_pad_expert_input_to_capacity)"
    ),
)

MOE_PAD_CAPACITY = Rule(
    id="TRC376",
    name="moe-pad-needs-capacity",
    summary=(
        "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor (the token dispatcher "
        "asserts it at init)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron-core 0.16.1 transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher / "
        "_DeepepManager __init__ (assert capacity factor)"
    ),
)

MOE_QUANT_PADDING = Rule(
    id="TRC377",
    name="moe-router-padding-for-quantization",
    summary=(
        "moe_router_padding_for_quantization needs fp8_format or fp4_format and the alltoall or "
        "flex dispatcher (Megatron-Core TransformerConfig.__post_init__)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ "
        "(moe_router_padding_for_quantization checks)"
    ),
)

MOE_FLEX_SCALE = Rule(
    id="TRC378",
    name="moe-flex-dispatcher-intranode",
    summary=(
        "the flex dispatcher (DeepEP) pays off for expert-parallel groups across nodes; inside one "
        "node alltoall or allgather is as fast or faster"
    ),
    severity=Severity.warning,
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.warning,
    },
    source=(
        "Megatron-LM issue #1456 (github.com/NVIDIA/Megatron-LM/issues/1456): DeepEP is optimized "
        "for cross-node EP (> 8); for EP <= 8 allgather or alltoall"
    ),
)

#: the family: its id ranges and, explicitly, its rules
PRECISION = Family(
    name="precision",
    ids=(range(370, 380), range(360, 370)),
    about="FP8/FP4 recipes and shapes, the Megatron-Core MoE dispatcher",
    rules=(
        LOW_PRECISION_GPU,
        LOW_PRECISION_SHAPES,
        FP8_BF16_LAYERS,
        MOE_BIAS_ETP,
        MXFP8_FORMAT,
        MXFP8_PARAM_GATHER,
        MOE_FLEX_DISPATCHER,
        MOE_PAD_CAPACITY,
        MOE_QUANT_PADDING,
        MOE_FLEX_SCALE,
    ),
)
