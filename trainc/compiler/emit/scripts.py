"""Shell launchers: ``torchrun.sh`` (one node's share) and ``sbatch.sh`` (Slurm)."""

from __future__ import annotations

from typing import Any


def torchrun(plan: dict[str, Any]) -> dict[str, str]:
    """``torchrun.sh``."""
    return {}


def sbatch(plan: dict[str, Any]) -> dict[str, str]:
    """``sbatch.sh``."""
    return {}
