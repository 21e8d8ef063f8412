"""``ds_config.json`` (engine=deepspeed): ``plan.json``'s ``engines.deepspeed``, built by
:func:`trainc.compiler.targets.deepspeed.deepspeed_config` (explicit values only, never "auto")."""

from __future__ import annotations

import json
from typing import Any


def ds_config(plan: dict[str, Any]) -> dict[str, str]:
    """``ds_config.json`` for engine=deepspeed (``json.dumps(indent=2, sort_keys=True)``, strict
    JSON), nothing otherwise. JSON has no comments: provenance is in ``manifest.json``."""
    cfg = plan["engines"]["deepspeed"]
    if cfg is None:
        return {}
    return {"ds_config.json": json.dumps(cfg, indent=2, sort_keys=True, allow_nan=False) + "\n"}
