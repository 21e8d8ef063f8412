"""``training:`` section: batch, precision, recompute and optimizer."""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas.enums import (
    Fp4Format,
    Fp4Recipe,
    Fp8Format,
    Fp8Recipe,
    LrDecayStyle,
    Offload,
    Optimizer,
    Precision,
    Recompute,
    RecomputeMethod,
    StateDtype,
    WsdDecayStyle,
)


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
    fp8_format: Fp8Format = Fp8Format.none
    """FP8 GEMMs through Transformer Engine on top of ``precision`` (which stays the dtype of
    parameters and the other kernels): none, e4m3 or hybrid (Megatron-LM --fp8-format,
    TransformerConfig.fp8). engine=megatron on CUDA only (TRC330)."""
    fp8_recipe: Fp8Recipe = Fp8Recipe.delayed
    """FP8 scaling recipe with fp8_format: delayed, tensorwise, blockwise or mxfp8 (Megatron-LM
    --fp8-recipe; Megatron-Core's default delayed)."""
    fp8_param_gather: bool = False
    """Keep parameters in FP8 and all-gather them in FP8 with the distributed optimizer
    (Megatron-LM --fp8-param-gather: TransformerConfig.fp8_param and
    DistributedDataParallelConfig.fp8_param_gather)."""
    first_last_layers_bf16: bool = False
    """With fp8_format / fp4_format: run the first and the last transformer layer in
    ``precision`` (Megatron-LM --first-last-layers-bf16; one layer each, Megatron-LM's
    --num-layers-at-start/end-in-bf16 default)."""
    fp4_format: Fp4Format = Fp4Format.none
    """FP4 GEMMs (Megatron-LM --fp4-format, TransformerConfig.fp4): none or e2m1.
    engine=megatron on CUDA only (TRC330)."""
    fp4_recipe: Fp4Recipe = Fp4Recipe.nvfp4
    """FP4 recipe with fp4_format (Megatron-LM --fp4-recipe): nvfp4."""
    main_grads_dtype: StateDtype = StateDtype.fp32
    """Optimizer's main gradients: fp32 or bf16 (Megatron-Core OptimizerConfig.main_grads_dtype;
    not fp32 turns on use_precision_aware_optimizer, TRC330)."""
    main_params_dtype: StateDtype = StateDtype.fp32
    """Optimizer's master weights: fp32 or fp16 (OptimizerConfig.main_params_dtype)."""
    exp_avg_dtype: StateDtype = StateDtype.fp32
    """Adam first moment: fp32, fp16, bf16 or fp8 (OptimizerConfig.exp_avg_dtype)."""
    exp_avg_sq_dtype: StateDtype = StateDtype.fp32
    """Adam second moment: fp32, fp16, bf16 or fp8 (OptimizerConfig.exp_avg_sq_dtype)."""
    recompute: Recompute = Recompute.selective
    """Activation recompute granularity: none, selective (attention core) or full (whole layers)."""
    recompute_method: RecomputeMethod | None = None
    """Full recompute only: uniform or block. Default with full: uniform. TRC308."""
    recompute_num_layers: int | None = None
    """Full recompute only: layers per recompute unit (uniform) or recomputed layers per stage
    chunk (block). Default with full: 1. TRC308, TRC309."""
    train_iters: int = 1000
    """Optimizer steps to train."""
    optimizer: Optimizer = Optimizer.adam
    """adam (Adam with decoupled weight decay = AdamW, as Megatron-Core and DeepSpeed "AdamW") or
    sgd (with sgd_momentum). TRC004."""
    adam_beta1: float = 0.9
    """Adam beta1, in [0, 1) (Megatron-LM default 0.9). TRC006."""
    adam_beta2: float = 0.999
    """Adam beta2, in [0, 1) (Megatron-LM default 0.999; most LLM pre-training uses 0.95).
    TRC006."""
    adam_eps: float = 1.0e-8
    """Adam epsilon, > 0 (Megatron-LM default 1e-8). TRC006."""
    sgd_momentum: float = 0.9
    """SGD momentum, in [0, 1) (Megatron-LM default 0.9); optimizer=sgd only."""
    lr: float = 3.0e-4
    """Peak learning rate (after warm-up)."""
    min_lr: float = 3.0e-5
    """Learning rate at the end of the decay (linear, cosine, WSD). TRC318."""
    lr_warmup_iters: int = 0
    """Linear warm-up steps from 0 to lr."""
    lr_decay_style: LrDecayStyle = LrDecayStyle.cosine
    """Decay after warm-up: constant, linear, cosine, inverse-square-root or WSD (Megatron-LM
    --lr-decay-style; trainc's default is cosine, Megatron-LM's is linear: it is always emitted).
    engine=deepspeed maps constant / cosine to DeepSpeed's WarmupLR / WarmupCosineLR and rejects the
    others (TRC323)."""
    lr_decay_iters: int | None = None
    """Steps over which the lr decays (warm-up included, as Megatron). Default: train_iters."""
    lr_wsd_decay_iters: int | None = None
    """WSD only: steps of the final decay phase (Megatron-LM --lr-wsd-decay-iters). Required with
    lr_decay_style=WSD. TRC323."""
    lr_wsd_decay_style: WsdDecayStyle = WsdDecayStyle.exponential
    """WSD only: shape of the final decay (Megatron-LM --lr-wsd-decay-style, default
    exponential)."""
    weight_decay: float = 0.1
    """Decoupled weight decay (>= 0)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip; 0 disables."""
    overlap_grad_reduce: bool | None = None
    """engine=megatron: overlap the data-parallel gradient reduce with the backward pass, in
    buckets (Megatron-Core DistributedDataParallelConfig.overlap_grad_reduce). Default: true when
    dp x cp > 1."""
    overlap_param_gather: bool | None = None
    """engine=megatron, distributed optimizer: overlap the parameter all-gather with the next
    forward pass (DistributedDataParallelConfig.overlap_param_gather). Default: true with the
    distributed optimizer and dp x cp > 1. Needs overlap_grad_reduce (TRC324)."""
    tp_comm_overlap: bool | None = None
    """engine=megatron, launch.device=cuda: overlap the tensor-parallel all-gather /
    reduce-scatter with the linear layers' GEMMs through Transformer Engine's userbuffers
    (Megatron-Core ModelParallelConfig.tp_comm_overlap, Megatron-LM --tp-comm-overlap). Needs
    tp > 1 with sequence_parallel (Megatron-LM validate_args) and Transformer Engine (TRC380).
    Default (unset): on where NVIDIA's performance recipes run it and Megatron-LM accepts it
    (engine=megatron on CUDA, tp > 1 with sequence parallelism, the TP group inside the NVLink
    domain, Hopper or newer), else off (Megatron-LM's default); ``trainc plan`` applies the
    same default to every layout it tries unless the spec sets the key."""
    overlap_moe_expert_parallel_comm: bool = False
    """engine=megatron, MoE with ep > 1: overlap the expert-parallel all-to-all of one
    micro-batch with the computation of another in the 1F1B phase (Megatron-Core
    ModelParallelConfig.overlap_moe_expert_parallel_comm, Megatron-LM
    --overlap-moe-expert-parallel-comm). Needs the alltoall or flex dispatcher, no full
    recompute, bf16/fp16, vpp > 1 when pp > 1 (TransformerConfig.__post_init__; TRC381)."""
    seed: int = 1234
    """Random seed for initialisation and data order."""
    offload_optimizer: Offload = Offload.none
    """engine=deepspeed: where ZeRO keeps optimizer state (none, cpu, nvme). TRC306."""
    offload_param: Offload = Offload.none
    """engine=deepspeed, stage 3: where ZeRO keeps parameters (none, cpu, nvme). TRC305, TRC306."""
    nvme_path: str | None = None
    """Directory for NVMe offload (required when an offload device is nvme). TRC305."""
