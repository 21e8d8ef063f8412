"""The estimator's per-engine functions, one row per :class:`~trainc.schemas.Engine`
(:data:`ESTIMATES`): how an engine holds the model states on a GPU and which data-parallel
collectives it runs, plus the extra process groups whose placement it adds to the rank map.

:func:`trainc.compiler.estimate.estimate` looks the spec's engine up here instead of comparing
names. The engine's other meanings (the ZeRO layout, its kernels, its recompute modes) are
:mod:`trainc.compiler.decide`'s; its config builder is :data:`trainc.compiler.targets.TARGETS`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainc.compiler.estimate.comm import StageComm, deepspeed_dp_comm, megatron_dp_comm
from trainc.compiler.estimate.fsdp import (
    add_fsdp_comm,
    fsdp_crossings,
    fsdp_members,
    fsdp_states,
    offload_host_bytes_per_node,
    offload_seconds,
)
from trainc.compiler.estimate.memory import StateBytes, deepspeed_states, megatron_states
from trainc.compiler.estimate.params import StageParams
from trainc.compiler.ir import Plan
from trainc.schemas import Engine, TrainSpec


def _fsdp_states(spec: TrainSpec, plan: Plan, sp: StageParams) -> StateBytes:
    """FSDP2's model states of one stage (:func:`~.fsdp.fsdp_states`; the plan is not needed)."""
    return fsdp_states(spec, sp)


def _no_groups(spec: TrainSpec) -> dict[str, bool]:
    """No process groups besides Megatron-Core's (whose placement the rank map has)."""
    return {}


def _no_members(spec: TrainSpec) -> dict[str, int]:
    """No process groups besides Megatron-Core's (whose members the rank map counts)."""
    return {}


def _no_host_bytes(spec: TrainSpec, plan: Plan) -> float:
    """No model state of the engine's own offload on the host (DeepSpeed's ZeRO-Offload is
    counted by ``fit.host_offload_bytes_per_node`` from the ``training.offload_*`` keys)."""
    return 0.0


def _no_offload_seconds(spec: TrainSpec, plan: Plan, sp: StageParams, compute: float) -> float:
    """No engine-specific offload time (DeepSpeed's is ``time.offload_seconds``)."""
    return 0.0


def _no_host_optimizer(spec: TrainSpec) -> bool:
    """The optimizer steps on the GPU (unless ``training.offload_optimizer``)."""
    return False


def _fsdp_host_optimizer(spec: TrainSpec) -> bool:
    """FSDP2's ``CPUOffloadPolicy`` runs the optimizer step on the CPU."""
    return spec.fsdp.cpu_offload


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineEstimate:
    """One engine's estimator functions (a row of :data:`ESTIMATES`)."""

    state_bytes: Callable[[TrainSpec, Plan, StageParams], StateBytes]
    """Model-state bytes (params, grads, optimizer) of one GPU of a stage."""
    dp_comm: Callable[[TrainSpec, Plan, StageComm, StageParams], None]
    """Adds the data-parallel collectives of one stage's GPU for one step to its StageComm."""
    group_crossings: Callable[[TrainSpec], dict[str, bool]] = _no_groups
    """The engine's own process groups -> whether each leaves an NVLink domain (added to the
    rank map's ``groups_cross_nvlink_domain`` for the time model)."""
    domain_members: Callable[[TrainSpec], dict[str, int]] = _no_members
    """The engine's own process groups -> members per NVLink domain (time_model=kernels)."""
    host_offload_bytes: Callable[[TrainSpec, Plan], float] = _no_host_bytes
    """Bytes per node the engine's own CPU offload keeps in host memory (the host-memory
    check, TRC420 / TRC421)."""
    offload_seconds: Callable[[TrainSpec, Plan, StageParams, float], float] = _no_offload_seconds
    """Exposed seconds per step the engine's own CPU offload adds on one GPU of a stage, given
    the stage's compute seconds per step."""
    optimizer_on_host: Callable[[TrainSpec], bool] = _no_host_optimizer
    """The engine's own offload runs the optimizer step on the CPU (no GPU optimizer step)."""


#: One row per engine (docs/engines.md "Adding an engine").
ESTIMATES: Mapping[Engine, EngineEstimate] = MappingProxyType(
    {
        Engine.megatron: EngineEstimate(state_bytes=megatron_states, dp_comm=megatron_dp_comm),
        Engine.deepspeed: EngineEstimate(state_bytes=deepspeed_states, dp_comm=deepspeed_dp_comm),
        Engine.fsdp: EngineEstimate(
            state_bytes=_fsdp_states,
            dp_comm=add_fsdp_comm,
            group_crossings=fsdp_crossings,
            domain_members=fsdp_members,
            host_offload_bytes=offload_host_bytes_per_node,
            offload_seconds=offload_seconds,
            optimizer_on_host=_fsdp_host_optimizer,
        ),
    }
)
