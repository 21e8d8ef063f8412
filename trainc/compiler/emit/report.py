"""``report.md``: the human-readable summary."""

from __future__ import annotations

from typing import Any


def report(plan: dict[str, Any]) -> dict[str, str]:
    """``report.md``."""
    s, d = plan["spec"], plan["derived"]
    text = (f"# {s['name']}\n\nworld {d['world_size']} = tp {d['tp']} x pp {d['pp']} x cp "
            f"{d['cp']} x dp {d['dp']}\n")
    return {"report.md": text}
