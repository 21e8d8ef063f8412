"""``training:`` section: batch, precision, recompute and optimizer."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import Offload, Precision, Recompute, RecomputeMethod


@dataclass(kw_only=True)
class TrainingSpec:
    """Batch sizes are in samples (sequences); global_batch_size = micro_batch_size x dp x
    num_microbatches."""

    micro_batch_size: int = 1
    """Samples per GPU per forward/backward (micro batch). TRC214."""
    global_batch_size: int
    """Samples per optimizer step, whole job. Required. TRC214-TRC216."""
    precision: Precision = Precision.bf16
    """bf16, fp16 or fp32."""
    recompute: Recompute = Recompute.selective
    """Activation recompute granularity: none, selective (attention core) or full (whole layers)."""
    recompute_method: RecomputeMethod | None = None
    """Full recompute only: uniform or block. Default with full: uniform. TRC308."""
    recompute_num_layers: int | None = None
    """Full recompute only: layers per recompute unit (uniform) or recomputed layers per stage
    chunk (block). Default with full: 1. TRC308, TRC309."""
    train_iters: int = 1000
    """Optimizer steps to train."""
    optimizer: str = "adam"
    """Optimizer: adam (AdamW with decoupled weight decay, as Megatron) or sgd."""
    lr: float = 3.0e-4
    """Peak learning rate."""
    min_lr: float = 3.0e-5
    """Final learning rate of the cosine decay. TRC318."""
    lr_warmup_iters: int = 0
    """Linear warm-up steps."""
    weight_decay: float = 0.1
    """Decoupled weight decay."""
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 disables."""
    seed: int = 1234
    """Random seed for initialisation and data order."""
    offload_optimizer: Offload = Offload.none
    """engine=deepspeed: where ZeRO keeps optimizer state (none, cpu, nvme). TRC306."""
    offload_param: Offload = Offload.none
    """engine=deepspeed, stage 3: where ZeRO keeps parameters (none, cpu, nvme). TRC305, TRC306."""
    nvme_path: str | None = None
    """Directory for NVMe offload (required when an offload device is nvme). TRC305."""
