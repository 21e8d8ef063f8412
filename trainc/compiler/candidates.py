"""The ZeRO stages, optimizer offloads and recompute granularities a search may try, decided once.

Two searches change these keys: the layout planner (:mod:`trainc.planner.search` enumerates every
allowed value) and the fit check's what-if behind TRC401's fix (:mod:`trainc.compiler.fit.whatif`
tries single steps up from the spec's own value). Both read this module, so a stage one search
may try is a stage the other may try: one search, not two.

* :data:`ENGINE_CANDIDATES`: one :class:`EngineCandidates` row per engine (looked up by
  :class:`~trainc.schemas.Engine`), each mirroring what its engine runs:

  - ``Engine.megatron``: zero_stage 0 (Megatron-Core 0.16.1 DDP, a replicated optimizer), 1
    (``--use-distributed-optimizer``, ZeRO-1) and 3 (Megatron-FSDP, ``--use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params``), 3 only where Megatron-FSDP runs
    (:func:`trainc.compiler.derive.megatron_fsdp_runs`: Megatron-LM's ``pretrain_gpt.py`` on
    CUDA, TRC383). No stage 2 (TRC307) and no offload (TRC306).
  - ``Engine.deepspeed``: DeepSpeed 0.19.8 ``zero_optimization.stage`` 0 to 3 (Rajbhandari et al.
    2020, arXiv:1910.02054) and ZeRO-Offload of the optimizer to the CPU
    (``offload_optimizer.device: cpu``; NVMe is not searched).
  - ``Engine.fsdp``: zero_stage 1, the schema default, only: FSDP2 shards by the ``fsdp.*``
    keys, not by zero_stage or DeepSpeed's offload keys (TRC344). No offload.

* :data:`RECOMPUTES`: the activation recompute granularities in the order both searches try
  them (none, then Megatron-Core's ``--recompute-granularity selective``, then ``full``).

Imports only :mod:`trainc.compiler.derive` and :mod:`trainc.schemas`, so the planner and the
fit check can both read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainc.compiler.derive import megatron_fsdp_runs
from trainc.schemas import Engine, Offload, Recompute, TrainSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCandidates:
    """What one engine's searches may try: a row of :data:`ENGINE_CANDIDATES`."""

    zero_stages: tuple[int, ...]
    """The ``parallel.zero_stage`` values, lowest first."""
    megatron_fsdp_stages: tuple[int, ...] = ()
    """Those of :attr:`zero_stages` offered only where Megatron-FSDP runs
    (:func:`trainc.compiler.derive.megatron_fsdp_runs`)."""
    offloads: tuple[Offload, ...] = ()
    """The ``training.offload_optimizer`` devices besides ``none`` (a ZeRO stage >= 1 needed)."""


#: One row per engine (the module docstring says which upstream behaviour each row mirrors).
ENGINE_CANDIDATES: Mapping[Engine, EngineCandidates] = MappingProxyType(
    {
        Engine.megatron: EngineCandidates(zero_stages=(0, 1, 3), megatron_fsdp_stages=(3,)),
        Engine.deepspeed: EngineCandidates(zero_stages=(0, 1, 2, 3), offloads=(Offload.cpu,)),
        Engine.fsdp: EngineCandidates(zero_stages=(1,)),
    }
)

#: Activation recompute granularities, in the order the searches try them.
RECOMPUTES: tuple[Recompute, ...] = (Recompute.none, Recompute.selective, Recompute.full)


def zero_stages(spec: TrainSpec) -> tuple[int, ...]:
    """The ZeRO stages a search may try for ``spec``'s engine, lowest first: its row's
    :attr:`~EngineCandidates.zero_stages`, without the Megatron-FSDP ones where Megatron-FSDP
    does not run. KeyError for an engine without a row."""
    row = ENGINE_CANDIDATES[spec.engine]
    if not row.megatron_fsdp_stages or megatron_fsdp_runs(spec):
        return row.zero_stages
    return tuple(z for z in row.zero_stages if z not in row.megatron_fsdp_stages)


def zero_steps(spec: TrainSpec) -> tuple[int, ...]:
    """The ZeRO stages above ``spec.parallel.zero_stage`` a single what-if change may move to,
    lowest first: the next stage :func:`zero_stages` allows, and each Megatron-FSDP stage above
    it (Megatron-FSDP is its own change, not the rung after the distributed optimizer)."""
    row = ENGINE_CANDIDATES[spec.engine]
    above = [z for z in zero_stages(spec) if z > spec.parallel.zero_stage]
    return tuple(z for i, z in enumerate(above) if i == 0 or z in row.megatron_fsdp_stages)


def offloads(spec: TrainSpec) -> tuple[Offload, ...]:
    """The optimizer offload devices besides ``none`` a search may try for ``spec``'s engine."""
    return ENGINE_CANDIDATES[spec.engine].offloads


def recompute_steps(spec: TrainSpec) -> tuple[Recompute, ...]:
    """The recompute granularities after ``spec.training.recompute`` in :data:`RECOMPUTES`
    (each a single what-if change)."""
    return RECOMPUTES[RECOMPUTES.index(spec.training.recompute) + 1 :]
