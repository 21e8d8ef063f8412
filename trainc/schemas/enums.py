"""Enumerations of the spec. Member names equal the YAML spelling (OmegaConf converts by name)."""

from enum import Enum


class Engine(Enum):
    """Training engine the artifacts target."""

    megatron = "megatron"
    deepspeed = "deepspeed"


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

