"""Helpers every ``trainc`` command shares: exit codes, splitting spec paths from overrides, and
printing diagnostics and JSON records."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from trainc.errors import LaunchError

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


def _is_override(item: str) -> bool:
    """A ``KEY=VALUE`` (or Hydra's ``~KEY`` delete) override, not a spec path: it has '=' (or
    starts with '~'), its key holds no '/', and it is not an existing file
    (``runs/date=2024-01-01/s.yaml`` and ``date=1.yaml`` are paths)."""
    if item.startswith("~") and not os.path.exists(item):  # Hydra's ~KEY (delete)
        return "/" not in item.split("=", 1)[0]
    if "=" not in item or item == "-":
        return False
    return "/" not in item.split("=", 1)[0] and not os.path.isfile(item)


def _split(items: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate spec paths (``-``: standard input) from KEY=VALUE overrides."""
    specs = [i for i in items if not _is_override(i)]
    overrides = [i for i in items if _is_override(i)]
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


def _json_record(result: LintResult, werror: bool) -> dict[str, Any]:
    """One spec's entry of the ``--format json`` output (spec-contract: path, ok, diagnostics)."""
    return {
        "path": result.path,
        "ok": not _failed(result, werror),
        "diagnostics": [d.to_json() for d in result.diagnostics],
    }


class OutputError(LaunchError):
    """Standard output or an output file cannot be written (full disk, closed terminal, a
    read-only folder): the environment refused, exit 4."""


def out(text: str = "", end: str = "\n") -> None:
    """Write command output (what a caller pipes or redirects) to stdout and flush it, so a full
    disk or ``/dev/full`` is an :class:`OutputError` here, not a traceback at exit. A closed pipe
    stays a :class:`BrokenPipeError` (``main`` exits 141 quietly)."""
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write standard output: {e.strerror or e}") from e


def write_file(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to the file ``path`` (UTF-8); any OSError becomes :class:`OutputError`."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise OutputError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from e


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and infinities (strict RFC 8259 JSON, as every JSON
    output of trainc is)."""
    return json.dumps(obj, allow_nan=False, **kwargs)
