"""``trainc lint --format sarif|github``: diagnostics for CI systems.

* ``sarif``: one SARIF 2.1.0 log (``github/codeql-action/upload-sarif`` and other code-scanning
  tools read it). The run's ``tool.driver.rules`` is the whole rule catalog
  (:data:`trainc.compiler.rules.ALL_RULES`); each result points at the file and line that set the
  diagnostic's key (``physicalLocation``) and names the dotted spec key (``logicalLocations``).
* ``github``: GitHub Actions workflow commands, one per diagnostic
  (``::error file=F,line=L,title=TRC201 heads-divisible-by-tp::message``), which the runner turns
  into annotations on the pull request's changed lines, then one summary line per spec.

Locations that are not files (``<command line>``, ``<default>``, a preset inside the installed
package) fall back to the first related key set in a file, then to the spec file itself (line 1),
and the message says where the value came from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from trainc import __version__
from trainc.compiler.diagnostics import Diagnostic, Location
from trainc.compiler.rules import ALL_RULES

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
GITHUB_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


class LintResult(Protocol):
    """What the renderers read from a :class:`trainc.compiler.pipeline.CompileResult`."""

    path: str
    diagnostics: list[Diagnostic]


def _file_uri(file: str) -> str | None:
    """``file`` as a URI relative to the working directory (or absolute), if it is a real file."""
    if file.startswith("<"):
        return None
    p = Path(file)
    if not p.is_file():
        return None
    try:
        return p.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return p.resolve().as_uri()


def primary_location(d: Diagnostic, spec_path: str) -> tuple[str, int, str | None]:
    """``(uri, line, origin)``: the file position a CI annotation should point at.

    ``origin`` describes the primary key's real source when the annotation had to fall back to
    another key or to the spec file (else None).
    """
    locs: Sequence[Location] = d.locations or (Location(key=d.key),)
    first = locs[0]
    origin = None if first.file is None else first.render()
    for loc in locs:
        uri = _file_uri(loc.file) if loc.file else None
        if uri is not None:
            return uri, loc.line or 1, None if loc is first else (origin or "<default>")
    fallback = _file_uri(spec_path) or (
        Path(spec_path).as_uri() if Path(spec_path).is_absolute() else Path(spec_path).as_posix()
    )
    if first.file == spec_path:  # e.g. an unreadable spec: the location is the file itself
        return fallback, first.line or 1, None
    return fallback, 1, origin or "<default>"


def _message(d: Diagnostic, origin: str | None) -> str:
    text = d.message
    if origin is not None:
        text += f" ({d.key} set at {origin})"
    if d.fix:
        text += f"\nfix: {d.fix}"
    return text


def sarif_log(results: Iterable[LintResult]) -> dict[str, Any]:
    """The SARIF 2.1.0 log of lint results, as a dict."""
    rules = sorted(ALL_RULES, key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(rules)}
    out = []
    for res in results:
        for d in res.diagnostics:
            uri, line, origin = primary_location(d, res.path)
            related = []
            for i, loc in enumerate(d.locations[1:], start=1):
                ruri = _file_uri(loc.file) if loc.file else None
                if ruri is not None:
                    related.append(
                        {
                            "id": i,
                            "message": {"text": loc.key},
                            "physicalLocation": {
                                "artifactLocation": {"uri": ruri},
                                "region": {"startLine": loc.line or 1},
                            },
                        }
                    )
            record: dict[str, Any] = {
                "ruleId": d.rule.id,
                "ruleIndex": index[d.rule.id],
                "level": SARIF_LEVEL[d.severity.value],
                "message": {"text": _message(d, origin)},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": uri},
                            "region": {"startLine": line},
                        },
                        "logicalLocations": [{"fullyQualifiedName": d.key, "kind": "member"}],
                    }
                ],
                "partialFingerprints": {"trainc/v1": f"{d.rule.id}:{d.key}:{uri}"},
                "properties": {
                    "key": d.key,
                    "spec": Path(res.path).as_posix(),
                    **({"fix": d.fix} if d.fix else {}),
                    **({"facts": dict(d.facts)} if d.facts else {}),
                },
            }
            if related:
                record["relatedLocations"] = related
            out.append(record)
    driver = {
        "name": "trainc",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": [
            {
                "id": r.id,
                "name": r.name,
                "shortDescription": {"text": r.summary},
                "fullDescription": {"text": f"{r.id} {r.name}: {r.summary}"},
                "defaultConfiguration": {"level": SARIF_LEVEL[r.severity]},
                "properties": {"tags": ["trainc"]},
            }
            for r in rules
        ],
    }
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "results": out}],
    }


def render_sarif(results: Iterable[LintResult]) -> str:
    """The SARIF log as JSON text (deterministic, trailing newline)."""
    return json.dumps(sarif_log(results), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_command(d: Diagnostic, spec_path: str) -> str:
    """One ``::error file=...,line=...,title=...::message`` workflow command."""
    uri, line, origin = primary_location(d, spec_path)
    if uri.startswith("file:"):
        uri = uri.removeprefix("file://")
    title = _escape_property(f"{d.rule.id} {d.rule.name}")
    props = f"file={_escape_property(uri)},line={line},title={title}"
    return f"::{GITHUB_COMMAND[d.severity.value]} {props}::{_escape_data(_message(d, origin))}"


def render_github(results: Sequence[LintResult], failed: Sequence[bool] | None = None) -> str:
    """Workflow commands for every diagnostic, then ``PATH: ok|FAILED (...)`` per spec
    (``failed``: the verdict per spec, e.g. with ``--werror``; default: has an error)."""
    lines = []
    for i, res in enumerate(results):
        for d in res.diagnostics:
            lines.append(github_command(d, res.path))
        n_err = sum(d.is_error for d in res.diagnostics)
        n_warn = sum(d.severity.value == "warning" for d in res.diagnostics)
        bad = failed[i] if failed is not None else n_err > 0
        lines.append(
            f"{res.path}: {'FAILED' if bad else 'ok'} ({n_err} error(s), {n_warn} warning(s))"
        )
    return "\n".join(lines) + ("\n" if lines else "")
