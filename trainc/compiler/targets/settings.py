"""Switches that follow from the (normalized) spec and the layout and that several artifacts
need: each is decided here once, and ``plan.json``'s ``derived`` shows it."""

from __future__ import annotations

from trainc.compiler.derive import Derived
from trainc.schemas import Engine, Precision, StateDtype, TrainSpec


def interleaved(spec: TrainSpec) -> bool:
    """True for the interleaved 1F1B schedule (vpp > 1)."""
    return spec.parallel.vpp > 1


def distributed_optimizer(spec: TrainSpec) -> bool:
    """engine=megatron with zero_stage 1 (Megatron-Core's distributed optimizer, ZeRO-1) or 3
    (Megatron-FSDP, which NVIDIA's Megatron-FSDP user guide runs with
    ``--use-distributed-optimizer``)."""
    return spec.engine is Engine.megatron and spec.parallel.zero_stage in (1, 3)


def grad_reduce_in_fp32(spec: TrainSpec) -> bool:
    """Gradients accumulated and reduced in fp32: Megatron-LM sets it for bf16 unless the main
    gradients are bf16 (core_v0.16.1 ``megatron/training/arguments.py`` ``validate_args``:
    ``accumulate_allreduce_grads_in_fp32 = True`` with ``--bf16`` only while
    ``main_grads_dtype`` is fp32). It sets the DDP gradient buffer's dtype (megatron-core 0.16.1
    ``distributed/distributed_data_parallel.py`` ``DistributedDataParallel.__init__``: fp32 with
    it, the parameter's dtype without), which the memory estimate counts
    (:func:`trainc.compiler.estimate.memory.megatron_state_bytes`: 4 or 2 B per parameter)."""
    t = spec.training
    return t.precision is Precision.bf16 and t.main_grads_dtype is StateDtype.fp32


def layers_per_virtual_stage(spec: TrainSpec, d: Derived) -> int | None:
    """Layers per virtual pipeline stage for Megatron-LM's
    ``--num-layers-per-virtual-pipeline-stage``: only for an even split (uneven and account_for
    splits are written as ``--num-virtual-stages-per-pipeline-rank``); None otherwise."""
    p = spec.parallel
    if (
        not interleaved(spec)
        or d.layers_per_stage is None
        or p.pipeline_first_stage_layers is not None
        or p.pipeline_last_stage_layers is not None
        or p.account_for_embedding_in_pipeline_split
        or p.account_for_loss_in_pipeline_split
    ):
        return None
    return d.layers_per_stage[0] // p.vpp
