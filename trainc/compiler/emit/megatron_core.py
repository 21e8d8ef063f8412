"""``megatron_core.yaml``: ``plan.json``'s ``engines.megatron_core`` (Megatron-Core 0.16.1 keyword
arguments grouped by the callable or dataclass that takes them, built by
:func:`trainc.compiler.targets.megatron.megatron_core_kwargs`). The trainc worker builds its
Megatron-Core objects from the same values; a user of Megatron-Core's API can pass each group
straight in."""

from __future__ import annotations

from typing import Any

import yaml

from trainc.compiler.emit.render import header


def megatron_core(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_core.yaml``: the kwargs as YAML (``yaml.safe_dump``, sorted keys)."""
    body = yaml.safe_dump(
        plan["engines"]["megatron_core"], sort_keys=True, default_flow_style=False
    )
    return {"megatron_core.yaml": header(plan) + body}
