"""The one engine-config builder: every setting each engine receives, decided once from the
normalized, validated spec (torch-free). ``plan.json`` stores the result under ``engines``;
``megatron_core.yaml``, ``megatron_args.txt`` and ``ds_config.json`` render it, and the worker
builds its Megatron-Core / DeepSpeed objects from it.

An engine is a registration: :data:`TARGETS` holds one :class:`Target` per
:class:`~trainc.schemas.Engine` (its config builder, the ``plan.json`` ``engines`` section it
fills, the versions it adds to ``target_versions``), and
:func:`engine_configs` looks the spec's engine up instead of comparing names. What the engine
makes of the spec's keys is decided in :mod:`trainc.compiler.decide`; the estimator's
per-engine functions are :data:`trainc.compiler.estimate.engines.ESTIMATES` (a layer above
this one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trainc.compiler.derive import Derived
from trainc.compiler.targets.deepspeed import deepspeed_config
from trainc.compiler.targets.fsdp import TORCHTITAN_VERSION, fsdp_config
from trainc.compiler.targets.megatron import (
    megatron_core_kwargs,
    megatron_lm_entries,
    megatron_lm_flags,
)
from trainc.schemas import Engine, Entrypoint, TrainSpec

#: ``plan.json`` ``engines`` sections, in the order :func:`engine_configs` returns them
#: (the fields of :class:`trainc.compiler.ir.Engines`).
SECTIONS = ("megatron_core", "megatron_lm", "deepspeed", "fsdp")

Core = dict[str, dict[str, Any]]
"""``engines.megatron_core``: Megatron-Core keyword arguments by class."""

Builder = Callable[[TrainSpec, Derived, Core], Any]
"""``(spec, derived, megatron_core kwargs) -> the engine's own section`` (JSON values)."""


def megatron_lm(spec: TrainSpec, d: Derived, core: Core) -> list[list[str]]:
    """``engines.megatron_lm``: Megatron-LM ``pretrain_gpt.py`` arguments, ``[flag]`` or
    ``[flag, value]`` (:func:`~trainc.compiler.targets.megatron.megatron_lm_entries`)."""
    return megatron_lm_flags(megatron_lm_entries(spec, d, core))


def deepspeed(spec: TrainSpec, d: Derived, core: Core) -> dict[str, Any]:
    """``engines.deepspeed``: the DeepSpeed config (:func:`.deepspeed.deepspeed_config`)."""
    return deepspeed_config(spec, d)


def fsdp(spec: TrainSpec, d: Derived, core: Core) -> dict[str, Any]:
    """``engines.fsdp``: the FSDP2 settings (:func:`.fsdp.fsdp_config`)."""
    return fsdp_config(spec, d)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One engine's registration (a row of :data:`TARGETS`)."""

    section: str
    """The ``plan.json`` ``engines`` key :attr:`build` fills (one of :data:`SECTIONS`)."""
    build: Builder
    """Builds that section from the normalized, validated spec."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """Releases this engine adds to ``plan.json`` ``target_versions`` (besides the Megatron-LM,
    megatron-core and DeepSpeed releases every plan names)."""


#: One target per engine (docs/engines.md "Adding an engine").
TARGETS: Mapping[Engine, Target] = MappingProxyType(
    {
        Engine.megatron: Target(
            section="megatron_lm",
            build=megatron_lm,
        ),
        Engine.deepspeed: Target(
            section="deepspeed",
            build=deepspeed,
        ),
        Engine.fsdp: Target(
            section="fsdp",
            build=fsdp,
            versions={"torchtitan": TORCHTITAN_VERSION},
        ),
    }
)


def engine_configs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``{"megatron_core": {group: kwargs}, "megatron_lm": [[flag, value?], ...] | None,
    "deepspeed": {...} | None, "fsdp": {...} | None}`` for a normalized, validated spec.

    ``megatron_core`` is always there (both engines' workers build the Megatron-Core GPTModel);
    the spec's engine fills its own section (:attr:`Target.section`); ``megatron_lm`` also for
    entrypoint megatron-lm (the FSDP2 worker reads the model's shape from ``megatron_core``
    too, so every engine builds the same transformer). Raises KeyError for an engine without
    a :data:`TARGETS` row.
    """
    core = megatron_core_kwargs(spec, d)
    target = TARGETS[spec.engine]
    out: dict[str, Any] = dict.fromkeys(SECTIONS)
    out["megatron_core"] = core
    out[target.section] = target.build(spec, d, core)
    if out["megatron_lm"] is None and spec.launch.entrypoint is Entrypoint.megatron_lm:
        out["megatron_lm"] = megatron_lm(spec, d, core)
    return out
