"""Helpers every ``trainc`` command shares: exit codes, splitting spec paths from overrides, and
printing diagnostics and JSON records."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trainc.compiler.diagnostics import Diagnostic

EXIT_OK, EXIT_SPEC, EXIT_INTERNAL, EXIT_ENV = 0, 2, 3, 4


class LintResult(Protocol):
    """What the commands read from a compile or plan result."""

    path: str
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        """True when no diagnostic is an error."""


def _split(items: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate spec paths from KEY=VALUE overrides (an item with '=' is an override)."""
    specs = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    return specs, overrides


def _failed(result: LintResult, werror: bool) -> bool:
    """The result has an error, or a warning while ``--werror`` is given."""
    if not result.ok:
        return True
    return werror and any(d.severity.value == "warning" for d in result.diagnostics)


def _print_text(result: LintResult) -> None:
    """The result's diagnostics as text on stderr."""
    from trainc.compiler.diagnostics import render_text

    text = render_text(result.diagnostics, path=result.path)
    if text:
        print(text, file=sys.stderr)


def _json_record(result: LintResult, werror: bool) -> dict:  # type: ignore[type-arg]
    """One spec's entry of the ``--format json`` output (spec-contract: path, ok, diagnostics)."""
    return {"path": result.path, "ok": not _failed(result, werror),
            "diagnostics": [d.to_json() for d in result.diagnostics]}
