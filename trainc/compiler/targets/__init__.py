"""The one engine-config builder: every setting each engine receives, decided once from the
normalized, validated spec (torch-free). ``plan.json`` stores the result under ``engines``;
``megatron_core.yaml``, ``megatron_args.txt`` and ``ds_config.json`` render it, and the worker
builds its Megatron-Core / DeepSpeed objects from it.
"""

from __future__ import annotations

from typing import Any

from trainc.compiler.derive import Derived
from trainc.compiler.targets.deepspeed import deepspeed_config
from trainc.compiler.targets.fsdp import fsdp_config
from trainc.compiler.targets.megatron import (
    megatron_core_kwargs,
    megatron_lm_entries,
    megatron_lm_flags,
)
from trainc.schemas import Engine, Entrypoint, TrainSpec


def engine_configs(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``{"megatron_core": {group: kwargs}, "megatron_lm": [[flag, value?], ...] | None,
    "deepspeed": {...} | None, "fsdp": {...} | None}`` for a normalized, validated spec.

    ``megatron_core`` is always there (both engines' workers build the Megatron-Core GPTModel);
    ``megatron_lm`` for engine=megatron or entrypoint megatron-lm; ``deepspeed`` for
    engine=deepspeed; ``fsdp`` for engine=fsdp (the FSDP2 worker reads the model's shape from
    ``megatron_core`` too, so both engines build the same transformer).
    """
    core = megatron_core_kwargs(spec, d)
    lm = None
    if spec.engine is Engine.megatron or spec.launch.entrypoint is Entrypoint.megatron_lm:
        lm = megatron_lm_flags(megatron_lm_entries(spec, d, core))
    ds = deepspeed_config(spec, d) if spec.engine is Engine.deepspeed else None
    fsdp = fsdp_config(spec, d) if spec.engine is Engine.fsdp else None
    return {"megatron_core": core, "megatron_lm": lm, "deepspeed": ds, "fsdp": fsdp}
