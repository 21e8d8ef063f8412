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


class Gpu(Enum):
    """GPU preset names (``cluster.gpu``); ``custom`` = give the hardware fields yourself."""

    a100_40g = "a100-40g"
    a100_80g = "a100-80g"
    h100_80g = "h100-80g"
    h200 = "h200"
    h800 = "h800"
    b200 = "b200"
    gb200 = "gb200"
    custom = "custom"


class LrDecayStyle(Enum):
    """Learning-rate decay after warm-up (Megatron-LM ``--lr-decay-style``; Megatron-Core
    ``OptimizerParamScheduler.lr_decay_style``)."""

    constant = "constant"
    linear = "linear"
    cosine = "cosine"
    inverse_square_root = "inverse-square-root"
    WSD = "WSD"


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
