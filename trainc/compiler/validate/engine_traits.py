"""What the validate checks read about each engine, looked up by ``Engine``: one row per engine in
:data:`TRAITS`, so that a new engine is one more row (and every check that reads the table fails
with a ``KeyError`` until the row exists), not a search for ``engine is ...`` comparisons.

Sources: each field names the upstream code it stands for; the checks that read it cite the
functions (megatron-core 0.16.1, DeepSpeed 0.19.8, torch 2.13, torchtitan 0.3.0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainc.schemas import Engine, Entrypoint, TrainSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineTraits:
    """One engine's answers to the questions the validate checks ask."""

    megatron_core: bool
    """It trains with Megatron-Core's own stack (``megatron/core``, Megatron-LM ``pretrain_gpt``):
    Transformer Engine's FP8/FP4 GEMMs, the TP communication/GEMM overlap (userbuffers), the
    expert-parallel A2A overlap, Megatron DDP's ``overlap_grad_reduce`` / ``overlap_param_gather``,
    ``zero_stage`` choosing the distributed optimizer, and the Megatron-only model keys (dense
    first MoE layers, MTP, group-limited routing)."""

    fsdp2: bool
    """It runs PyTorch FSDP2 (``fully_shard`` on a DeviceMesh): it reads the ``fsdp:`` section and
    its rules (TRC34x), its FP8 is torchao's float8 through torchtitan, its pipeline schedules are
    ``torch.distributed.pipelining``'s, and under ``launch.entrypoint=torchtitan`` its MoE is
    torchtitan's."""

    deepspeed_scheduler: bool
    """Its learning-rate schedule is DeepSpeed's (``deepspeed/runtime/lr_schedules.py``
    WarmupLR / WarmupDecayLR / WarmupCosineLR): a warm-up of at least 2 steps, one step late."""

    own_overlap: str | None
    """What overlaps its gradient reduce and parameter gather instead of Megatron DDP's switches;
    None where it reads them (Megatron-Core ``DistributedDataParallelConfig``)."""

    axes_elsewhere: str
    """Where a spec goes for a parallel axis its runner cannot split (TRC313's fix)."""


#: The rows, one per engine.
TRAITS: Mapping[Engine, EngineTraits] = {
    Engine.megatron: EngineTraits(
        megatron_core=True,
        fsdp2=False,
        deepspeed_scheduler=False,
        own_overlap=None,
        axes_elsewhere="engine=megatron",
    ),
    Engine.deepspeed: EngineTraits(
        megatron_core=False,
        fsdp2=False,
        deepspeed_scheduler=True,
        own_overlap="zero_optimization.overlap_comm",
        axes_elsewhere="engine=megatron",
    ),
    Engine.fsdp: EngineTraits(
        megatron_core=False,
        fsdp2=True,
        deepspeed_scheduler=False,
        own_overlap="FSDP2's prefetch of the next block's all-gather",
        axes_elsewhere="launch.entrypoint=torchtitan (runs pp, vpp, cp and ep on CUDA)",
    ),
}


def traits(spec: TrainSpec) -> EngineTraits:
    """The :data:`TRAITS` row of ``spec.engine``. Raises ``KeyError`` for an engine without one."""
    return TRAITS[spec.engine]


def torchtitan_moe(spec: TrainSpec) -> bool:
    """Whether the MoE layers are torchtitan 0.3.0's (``torchtitan/models/common/moe.py``): an
    FSDP2 engine under ``launch.entrypoint=torchtitan``."""
    return traits(spec).fsdp2 and spec.launch.entrypoint is Entrypoint.torchtitan
