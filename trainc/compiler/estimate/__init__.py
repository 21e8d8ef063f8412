"""estimate: per-GPU memory, communication, pipeline bubble, FLOPs and step time (issue #3).

``estimate(spec, plan)`` returns the ``estimates`` dict of plan.json.
"""

from __future__ import annotations

from typing import Any

from trainc.schemas import TrainSpec


def estimate(spec: TrainSpec, plan: dict[str, Any]) -> dict[str, Any]:
    """Estimates of a planned spec (filled in by the estimates work)."""
    return {}
