"""Enumerations of the spec. Member names equal the YAML spelling (OmegaConf converts by name)."""

from enum import Enum


class Engine(Enum):
    """Training engine the artifacts target."""

    megatron = "megatron"
    deepspeed = "deepspeed"
    fsdp = "fsdp"


class Activation(Enum):
    """MLP activation: swiglu (gated, three matrices) or gelu (two matrices)."""

    swiglu = "swiglu"
    gelu = "gelu"


class Normalization(Enum):
    """Layer normalisation kind."""

    rmsnorm = "rmsnorm"
    layernorm = "layernorm"


class PositionEmbedding(Enum):
    """Position embedding: rotary (rope) or learned absolute."""

    rope = "rope"
    learned = "learned"


class CpCommType(Enum):
    """Context-parallel attention communication (Transformer Engine ``cp_comm_type``)."""

    p2p = "p2p"
    all_gather = "all_gather"
    a2a = "a2a"


class Precision(Enum):
    """Training precision of parameters and activations."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Recompute(Enum):
    """Activation recomputation granularity (Megatron ``recompute_granularity``)."""

    none = "none"
    selective = "selective"
    full = "full"


class RecomputeMethod(Enum):
    """Full-recompute method (Megatron ``recompute_method``)."""

    uniform = "uniform"
    block = "block"


class Offload(Enum):
    """DeepSpeed ZeRO offload device."""

    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class Device(Enum):
    """Device the worker runs on: cuda (NCCL) or cpu (gloo; layout smoke tests)."""

    cuda = "cuda"
    cpu = "cpu"


class MoeDispatcher(Enum):
    """MoE token dispatcher (Megatron-Core ``moe_token_dispatcher_type``)."""

    alltoall = "alltoall"
    allgather = "allgather"
    flex = "flex"


class MoeFlexBackend(Enum):
    """Backend of the flex token dispatcher (Megatron-Core ``moe_flex_dispatcher_backend``):
    DeepEP's fused all-to-all kernels or HybridEP (NVLink-domain aware, for NVL72 racks)."""

    deepep = "deepep"
    hybridep = "hybridep"


class Optimizer(Enum):
    """Optimizer. ``adam`` is Adam with decoupled weight decay (AdamW): Megatron-Core's
    ``optimizer='adam'`` builds ``torch.optim.AdamW`` / TE FusedAdam with ``adam_w_mode``,
    DeepSpeed's ``"AdamW"``. ``sgd`` is SGD with momentum (``sgd_momentum``)."""

    adam = "adam"
    sgd = "sgd"


class Entrypoint(Enum):
    """What the generated scripts start on every rank: ``trainc`` (the trainc worker),
    ``megatron-lm`` (``pretrain_gpt.py`` of a Megatron-LM checkout with ``megatron_args.txt``) or
    ``torchtitan`` (``torchtitan.train`` 0.3.0 with ``torchtitan_args.txt``; engine=fsdp)."""

    trainc = "trainc"
    megatron_lm = "megatron-lm"
    torchtitan = "torchtitan"


class TimeModel(Enum):
    """Step-time model (``cluster.time_model``): kernels (per-GEMM roofline with wave
    quantization, fused attention, element-wise bytes, per-axis overlap; docs/performance.md)
    or seed (one compute_efficiency over Megatron's FLOPs, the worked examples' formula)."""

    kernels = "kernels"
    seed = "seed"


class Gpu(Enum):
    """GPU preset names (``cluster.gpu``); ``custom`` = give the hardware fields yourself."""

    a100_40g = "a100-40g"
    a100_80g = "a100-80g"
    h100_80g = "h100-80g"
    h200 = "h200"
    h800 = "h800"
    b200 = "b200"
    b300 = "b300"
    gb200 = "gb200"
    gb300 = "gb300"
    custom = "custom"


class LrDecayStyle(Enum):
    """Learning-rate decay after warm-up (Megatron-LM ``--lr-decay-style``; Megatron-Core
    ``OptimizerParamScheduler.lr_decay_style``)."""

    constant = "constant"
    linear = "linear"
    cosine = "cosine"
    inverse_square_root = "inverse-square-root"
    WSD = "WSD"


class Fp8Format(Enum):
    """FP8 training format (Megatron-LM ``--fp8-format``; TransformerConfig.fp8): none (no FP8),
    e4m3 everywhere, or hybrid (e4m3 forward, e5m2 gradients)."""

    none = "none"
    e4m3 = "e4m3"
    hybrid = "hybrid"


class Fp8Recipe(Enum):
    """FP8 scaling recipe (TransformerConfig.fp8_recipe, Megatron-Core ``Fp8Recipe``; default
    delayed as Megatron-Core): delayed (amax history), tensorwise (current per-tensor scaling),
    blockwise (1x128 / 128x128 blocks, Hopper), mxfp8 (32-element blocks, Blackwell); engine=fsdp
    only (torchao ``Float8LinearConfig.from_recipe_name``): rowwise (per-row scales) and
    rowwise_with_gw_hp (rowwise, weight gradient GEMM in high precision)."""

    delayed = "delayed"
    tensorwise = "tensorwise"
    blockwise = "blockwise"
    mxfp8 = "mxfp8"
    rowwise = "rowwise"
    rowwise_with_gw_hp = "rowwise_with_gw_hp"


class Fp4Format(Enum):
    """FP4 training format (Megatron-LM ``--fp4-format``; TransformerConfig.fp4)."""

    none = "none"
    e2m1 = "e2m1"


class Fp4Recipe(Enum):
    """FP4 recipe (TransformerConfig.fp4_recipe; Megatron-Core ``Fp4Recipe``)."""

    nvfp4 = "nvfp4"


class StateDtype(Enum):
    """Precision of an optimizer buffer (Megatron-Core OptimizerConfig ``main_grads_dtype``,
    ``main_params_dtype``, ``exp_avg_dtype``, ``exp_avg_sq_dtype``; anything but fp32 needs
    ``use_precision_aware_optimizer``). fp8 is stored as uint8 (Megatron-LM's dtype map)."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"


class WsdDecayStyle(Enum):
    """Shape of the final decay phase of a WSD (warmup-stable-decay) schedule
    (Megatron-LM ``--lr-wsd-decay-style``)."""

    exponential = "exponential"
    linear = "linear"
    cosine = "cosine"
    minus_sqrt = "minus_sqrt"


class MoeLoadBalancing(Enum):
    """MoE router load balancing (Megatron-Core ``moe_router_load_balancing_type``)."""

    aux_loss = "aux_loss"
    seq_aux_loss = "seq_aux_loss"
    global_aux_loss = "global_aux_loss"
    sinkhorn = "sinkhorn"
    none = "none"


class MoeScoreFunction(Enum):
    """MoE router score function (Megatron-Core ``moe_router_score_function``)."""

    softmax = "softmax"
    sigmoid = "sigmoid"


class CkptFormat(Enum):
    """Megatron-LM ``--ckpt-format`` (megatron/training/arguments.py, core_v0.16.x): ``torch_dist``
    (distributed checkpoint, resharded on load: TP/PP/EP/DP may change) or ``torch`` (the legacy
    per-rank files ``mp_rank_XX``: the layout must match on load) or ``fsdp_dtensor`` (the one
    format Megatron-FSDP saves and loads: ``validate_args`` asserts it with
    ``--use-megatron-fsdp`` and accepts it only then)."""

    torch_dist = "torch_dist"
    torch = "torch"
    fsdp_dtensor = "fsdp_dtensor"


class FsdpDtype(Enum):
    """Dtype of FSDP2's ``MixedPrecisionPolicy`` (param_dtype / reduce_dtype)."""

    bf16 = "bf16"
    fp32 = "fp32"


class PipelineSchedule(Enum):
    """``torch.distributed.pipelining`` schedule (engine=fsdp, pp > 1): class names of torch
    2.13's ``schedules.py`` (``Schedule1F1B``, ``ScheduleInterleaved1F1B``,
    ``ScheduleZBVZeroBubble``), spelled as torchtitan's ``pipeline_parallel_schedule``."""

    one_f1b = "1F1B"
    interleaved_1f1b = "Interleaved1F1B"
    zbv_zero_bubble = "ZBVZeroBubble"
