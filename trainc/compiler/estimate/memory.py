"""Model-state memory per GPU: parameters, gradients and optimizer states (bytes).

Two accountings, by engine:

* **Megatron-Core** (``engine=megatron``): ``megatron/core/optimizer`` keeps low-precision params,
  fp32 ``main_grad`` buffers and fp32 master weights + Adam m, v. Per parameter (Megatron's
  ``docs/user-guide/features/dist_optimizer.md``, Megatron-LM core_v0.16.1): bf16 = 2 + 4 + 12 = 18 B,
  fp16 = 2 + 2 + 16 = 20 B, fp32 = 4 + 4 + 8 = 16 B. The distributed optimizer (zero_stage 1)
  shards the optimizer part over the data-parallel group: **dp x cp** for dense weights (the real
  ``intra_dp_cp`` group; Megatron's own ``theoretical_memory_usage`` divides by dp only, see
  :mod:`trainc.compiler.estimate.megatron_ref`) and **expert_dp** for routed experts.
  The worked examples' "2 + 2 + 12 = 16 B/param" (A and C, docs/references.md) assume 2-byte
  gradients; Megatron-Core accumulates and reduces gradients in an fp32 ``main_grad`` buffer
  (``accumulate_allreduce_grads_in_fp32`` is on for bf16), so for engine=megatron we follow
  Megatron-Core's 18 B/param, not the examples'.
* **DeepSpeed ZeRO** (``engine=deepspeed``): the 2 + 2 + 12 B/param of the ZeRO paper (bf16 params,
  bf16 grads, fp32 master + Adam m + v; Rajbhandari et al. 2020, arXiv:1910.02054 §3.1) with
  ZeRO-1/2/3 sharding optimizer / + grads / + params over the DP group (its Figure 1; worked
  examples A and B, docs/references.md). Offload moves
  the optimizer (and its fp32 gradient partition) or the parameters to the host; ZeRO-3 keeps the
  largest gathered layer (params + grads, DeepSpeed's ``largest_layer_memory = 4 L``).

  These 16 B/param differ from DeepSpeed's own estimators, which count 2 B more per
  parameter for the fp32 gradient partition (``2P + 18P/G`` for ZeRO-2): both are reproduced here
  (:func:`deepspeed_zero2_estimate`, :func:`deepspeed_zero3_estimate`, tested against
  DeepSpeed 0.19.8's own output), and the plan uses the ZeRO paper's accounting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainc.compiler.decide import zero_layout
from trainc.compiler.estimate.params import StageParams
from trainc.compiler.ir import Plan
from trainc.schemas import (
    Fp8Format,
    Offload,
    Precision,
    StateDtype,
    TrainingSpec,
    TrainSpec,
)


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Model-state bytes on one GPU."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        """params + grads + optimizer."""
        return self.params + self.grads + self.optimizer


def megatron_bytes_per_param(precision: Precision) -> tuple[int, int, int]:
    """(param, grad, optimizer) bytes per parameter in Megatron-Core (DO-10).

    >>> sum(megatron_bytes_per_param(Precision.bf16))
    18
    """
    return {Precision.bf16: (2, 4, 12), Precision.fp16: (2, 2, 16), Precision.fp32: (4, 4, 8)}[
        precision
    ]


def megatron_beta(precision: Precision, shard: int | None) -> float:
    """Bytes per parameter, optimizer sharded over ``shard`` GPUs (None = plain DDP).

    >>> megatron_beta(Precision.bf16, None), megatron_beta(Precision.bf16, 8)
    (18, 7.5)
    """
    p, g, o = megatron_bytes_per_param(precision)
    return p + g + (o if shard is None else o / shard)


def zero_model_state_bytes(
    num_params: float,
    n: int,
    stage: int,
    *,
    param_bytes: int = 2,
    grad_bytes: int = 2,
    optimizer_bytes: int = 12,
) -> StateBytes:
    """The ZeRO table: 2 + 2 + 12 B/param, stage 1 shards the optimizer over ``n`` GPUs,
    stage 2 also the grads, stage 3 also the params (Rajbhandari et al. 2020, arXiv:1910.02054
    Table 1; worked examples A and B, docs/references.md).

    >>> [round(zero_model_state_bytes(70e9, 8, s).total / 1e9, 1) for s in range(4)]
    [1120.0, 385.0, 262.5, 140.0]
    """
    return StateBytes(
        params=num_params * param_bytes / (n if stage >= 3 else 1),
        grads=num_params * grad_bytes / (n if stage >= 2 else 1),
        optimizer=num_params * optimizer_bytes / (n if stage >= 1 else 1),
    )


def deepspeed_zero2_estimate(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[float, int]:
    """DeepSpeed 0.19.8 ``estimate_zero2_model_states_mem_needs`` -> (cpu_bytes, gpu_bytes)
    (``deepspeed/runtime/zero/stage_1_and_2.py``; the GPU term is ``2P + int(18P/G)``, ``2P`` with
    optimizer offload).

    >>> deepspeed_zero2_estimate(7_000_000_000, 8, 1, cpu_offload=False)
    (336000000000.0, 29750000000)
    """
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu = 2 * total_params
        cpu = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 2 * total_params + int(18 * total_params / total_gpus)
        cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return cpu, gpu


def deepspeed_zero3_estimate(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = 1.5,
) -> tuple[float, int, int]:
    """DeepSpeed 0.19.8 ``estimate_zero3_model_states_mem_needs`` -> (cpu, gpu, largest_layer_memory)
    in bytes (``deepspeed/runtime/zero/stage3.py``, left-to-right float order as DeepSpeed evaluates
    it).

    >>> deepspeed_zero3_estimate(7_000_000_000, 131_072_000, 8, 1, False, False)[1]
    16274288000
    """
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    llm = 4 * largest_layer_params
    abf = additional_buffer_factor
    if cpu_offload:
        if cpu_offload_params:
            gpu = llm
            cpu = (
                total_params * 18 * gpus_factor * abf
                if zero_init
                else total_params * max(4 * num_gpus_per_node, 18 * gpus_factor) * abf
            )
        else:
            gpu = llm + int(2 * total_params / total_gpus)
            cpu = (
                total_params * 16 * gpus_factor * abf
                if zero_init
                else total_params * max(4 * num_gpus_per_node, 16 * gpus_factor) * abf
            )
    else:
        gpu = llm + int(18 * total_params / total_gpus)
        cpu = (
            largest_layer_params * 4 * num_gpus_per_node * abf
            if zero_init
            else total_params * 4 * num_gpus_per_node * abf
        )
    return cpu, gpu, llm


_DTYPE_BYTES = {StateDtype.fp32: 4, StateDtype.fp16: 2, StateDtype.bf16: 2, StateDtype.fp8: 1}


def megatron_state_bytes(tr: TrainingSpec) -> tuple[float, float, float]:
    """(param, grad, optimizer) bytes per parameter of a Megatron-Core run with the spec's
    precision keys: bf16 params (1 byte with ``fp8_param_gather``: TransformerConfig.fp8_param
    keeps the weights in FP8), the DDP gradient buffer (fp32, ``grad_reduce_in_fp32`` as
    Megatron-LM sets for bf16; bf16 with ``main_grads_dtype: bf16``) and the optimizer's master
    weights + Adam moments in ``main_params_dtype`` / ``exp_avg_dtype`` / ``exp_avg_sq_dtype``
    (Megatron-Core OptimizerConfig with use_precision_aware_optimizer). fp16 / fp32 precision
    keep DO-10's table (:func:`megatron_bytes_per_param`).

    >>> from trainc.schemas import TrainingSpec
    >>> megatron_state_bytes(TrainingSpec(global_batch_size=8))
    (2, 4, 12)
    """
    pb, gb, ob = megatron_bytes_per_param(tr.precision)
    if tr.precision is not Precision.bf16:
        return pb, gb, ob
    if tr.fp8_param_gather and tr.fp8_format is not Fp8Format.none:
        pb = 1
    gb = _DTYPE_BYTES[tr.main_grads_dtype]
    ob = (
        _DTYPE_BYTES[tr.main_params_dtype]
        + _DTYPE_BYTES[tr.exp_avg_dtype]
        + _DTYPE_BYTES[tr.exp_avg_sq_dtype]
    )
    return pb, gb, ob


def megatron_states(spec: TrainSpec, plan: Plan, sp: StageParams) -> StateBytes:
    """Megatron-Core: the distributed optimizer shards the fp32 master weights and Adam moments
    over dp x cp (experts over expert_dp). Megatron-FSDP (zero_stage 3, optim_grads_params)
    shards the bf16 weights and the gradient buffer the same way and holds two TransformerLayers
    unsharded at a time, weights and gradients (the unit computed and the one prefetched or being
    reduce-scattered: ``--fsdp-double-buffer``'s two-slot pools; Megatron-LM core_v0.16.1
    megatron_fsdp/param_and_grad_buffer.py); ``largest_layer`` also covers the embedding, which
    stays gathered outside the units."""
    d = plan.derived
    pb, gb, ob = megatron_state_bytes(spec.training)
    dist = d.distributed_optimizer
    dense_shard = d.dp * d.cp if dist else 1
    expert_shard = d.expert_dp if dist else 1
    sharded = sp.dense / dense_shard + sp.expert / expert_shard
    if d.megatron_fsdp:  # never more than the whole stage unsharded (a tiny model)
        held = min(sharded + 2 * sp.largest_layer, sp.total)
        return StateBytes(params=pb * held, grads=gb * held, optimizer=ob * sharded)
    return StateBytes(params=sp.total * pb, grads=sp.total * gb, optimizer=ob * sharded)


def deepspeed_states(spec: TrainSpec, plan: Plan, sp: StageParams) -> StateBytes:
    """DeepSpeed ZeRO at the decided stage (:func:`trainc.compiler.decide.zero_layout`): the
    ZeRO table over dp x cp (:func:`zero_model_state_bytes`), the offloaded parts on the host,
    and with ZeRO-3 the largest layer gathered (module docstring).

    Checked byte for byte against deepspeed 0.19.8's objects
    (``tests/differential/test_deepspeed_memory.py``, docs/memory.md "DeepSpeed ZeRO"). Not
    counted: ZeRO-1/2's flat-buffer padding (``< 2 dp`` elements), the fp32 gradient partition
    the optimizer step receives (``4 N / n``), ZeRO-3's reduce bucket (``reduce_bucket_size`` x
    the communication dtype, 2 GB with the emitted config) and persistent parameters
    (``numel <= stage3_param_persistence_threshold``), ZeRO-Offload's staging buffer."""
    d, t = plan.derived, spec.training
    stage = zero_layout(spec).zero_stage
    pb, gb, ob = (4, 4, 8) if t.precision is Precision.fp32 else (2, 2, 12)
    n = d.dp * d.cp
    base = zero_model_state_bytes(
        sp.total, n, stage, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob
    )
    params, grads, opt = base.params, base.grads, base.optimizer
    if t.offload_optimizer is not Offload.none and stage >= 1:
        opt = 0.0  # fp32 master + Adam on the host (ZeRO-Offload)
        grads = 0.0  # the reduced gradient partition is copied to the host for the CPU step
    if stage >= 3:
        if t.offload_param is not Offload.none:
            params = 0.0
        # one gathered layer at a time: its params and full grads (DeepSpeed's 4 * largest layer)
        params += pb * sp.largest_layer
        grads += gb * sp.largest_layer
    return StateBytes(params, grads, opt)


def gib(num_bytes: float) -> float:
    """Bytes -> GiB (2**30).

    >>> gib(2**31)
    2.0
    """
    return num_bytes / 2**30


def ceil_int(x: float) -> int:
    """Bytes as a whole number (ceil, so a fraction of a byte never hides)."""
    return math.ceil(x - 1e-9)
