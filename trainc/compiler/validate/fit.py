"""TRC4xx: resource fit, checked on the estimates (memory per GPU, pipeline bubble)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from trainc.compiler.diagnostics import Diagnostic
from trainc.schemas import TrainSpec


def check_fit(spec: TrainSpec, plan: dict[str, Any]) -> Iterator[Diagnostic]:
    """Fit diagnostics from ``plan['estimates']`` (filled in by the estimates work)."""
    return iter(())
