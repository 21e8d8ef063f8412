"""DeepSpeed ``ds_config.json`` (engine=deepspeed): explicit values only, never "auto"."""

from __future__ import annotations

from typing import Any


def ds_config(plan: dict[str, Any]) -> dict[str, str]:
    """``ds_config.json`` for engine=deepspeed, nothing otherwise."""
    return {}
