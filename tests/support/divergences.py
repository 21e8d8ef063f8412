"""The divergence table of ``docs/divergences.md``, parsed."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "divergences.md"
_ROW = re.compile(r"^\| (TRC\d{3}) ([a-z0-9-]+) \| (stricter|emit) \| ([^|]+) \|")


def table(path: Path = DOC) -> dict[str, tuple[str, str]]:
    """rule id -> (rule name, kind) for every row of the table."""
    rows: dict[str, tuple[str, str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice in {path.name}"
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def stricter(path: Path = DOC) -> set[str]:
    """Rules where trainc may reject what the libraries accept."""
    return {r for r, (_, kind) in table(path).items() if kind == "stricter"}
