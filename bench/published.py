"""Published training runs as trainc specs: re-exports :mod:`trainc.planner.published` (the one
row -> spec conversion) with the default location of the shared table.

``load_rows(path=DEFAULT_CSV)``, ``row_to_spec(row) -> dict | None``, ``row_to_spec_reason(row)
-> (dict | None, reason)``, ``published_layout(row)``, ``layout_overrides(row)``.
"""

from __future__ import annotations

from pathlib import Path

from trainc.planner import published as _p
from trainc.planner.published import (
    CLUSTERS,
    MODEL_PRESETS,
    layout_overrides,
    model_key,
    published_layout,
    row_to_spec,
    row_to_spec_reason,
)

#: Default location of the table (the shared, read-only reference folder next to the checkout).
DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "published_runs.csv"

__all__ = ["CLUSTERS", "DEFAULT_CSV", "MODEL_PRESETS", "layout_overrides", "load_rows",
           "model_key", "published_layout", "row_to_spec", "row_to_spec_reason"]


def load_rows(path: str | Path = DEFAULT_CSV) -> list[dict[str, str]]:
    """The table's rows as dicts of column -> text (stripped; empty = not published)."""
    return _p.load_rows(path)
