"""Diagnostic records and their text / JSON renderings (the contract's ``--format json`` shape)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainc.compiler.rules import Rule
from trainc.compiler.rules import Severity as Severity  # the diagnostics' severity
from trainc.schemas.enums import Engine

_SEVERITY_ORDER = {Severity.error: 0, Severity.warning: 1, Severity.info: 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class Location:
    """Where a spec key got its value: a file and 1-based line, ``<command line>``, or
    ``<default>`` (schema or derived default)."""

    key: str
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        """``file:line`` (or just the file, or ``<default>``)."""
        if self.file is None:
            return "<default>"
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnostic:
    """One finding about a spec.

    ``key`` is the dotted spec key the finding is mainly about; ``related`` lists the other keys
    involved. ``facts`` are the values the rule looked at; ``fix`` is a concrete, computed remedy and
    ``edits`` a machine-applicable form of it (dotted key -> new value).
    """

    rule: Rule
    severity: Severity
    message: str
    key: str
    related: tuple[str, ...] = ()
    fix: str | None = None
    edits: Mapping[str, Any] = field(default_factory=dict)
    facts: Mapping[str, Any] = field(default_factory=dict)
    locations: tuple[Location, ...] = ()

    @property
    def is_error(self) -> bool:
        """True for error severity."""
        return self.severity is Severity.error

    def to_json(self) -> dict[str, Any]:
        """The contract's JSON record (plus rule name, related keys, locations and facts)."""
        out: dict[str, Any] = {
            "rule": self.rule.id,
            "name": self.rule.name,
            "severity": self.severity.value,
            "message": self.message,
            "key": self.key,
            "fix": self.fix,
        }
        if self.related:
            out["related"] = list(self.related)
        if self.edits:
            out["edits"] = dict(self.edits)
        if self.facts:
            out["facts"] = dict(self.facts)
        loc = next((loc for loc in self.locations if loc.key == self.key), None)
        if loc is not None and loc.file is not None:
            out["file"] = loc.file
            if loc.line:
                out["line"] = loc.line
        return out


def diag(
    rule: Rule,
    message: str,
    key: str,
    *,
    related: Iterable[str] = (),
    fix: str | None = None,
    edits: Mapping[str, Any] | None = None,
    severity: Severity | None = None,
    **facts: Any,
) -> Diagnostic:
    """Build a :class:`Diagnostic` with the rule's default severity unless one is given."""
    return Diagnostic(
        rule=rule,
        severity=severity or rule.severity,
        message=message,
        key=key,
        related=tuple(related),
        fix=fix,
        edits=dict(edits or {}),
        facts=facts,
    )


def for_engine(diags: Iterable[Diagnostic], engine: Engine | str) -> list[Diagnostic]:
    """``diags`` as the rule catalog grades them for ``engine`` (an ``Engine`` or its value): a finding
    whose rule does not apply to the engine (``n/a``) is dropped; one a check left at its
    rule's default severity takes the engine's (:meth:`Rule.severity_for`). A severity a check
    chose for specific values (a finding it raises or lowers itself) is kept."""
    out = []
    for d in diags:
        sev = d.rule.severity_for(engine)
        if sev is Severity.na:
            continue
        if d.severity == d.rule.severity and sev != d.rule.severity:
            d = replace(d, severity=sev)
        out.append(d)
    return out


def locate(diags: Iterable[Diagnostic], where: Mapping[str, Location]) -> list[Diagnostic]:
    """Attach source locations (primary key first, then related keys) to each diagnostic."""
    out = []
    for d in diags:
        keys = (d.key, *d.related)
        locs = tuple(location_of(k, where) for k in keys)
        out.append(replace(d, locations=locs))
    return out


def location_of(key: str, where: Mapping[str, Location]) -> Location:
    """Where ``key`` was set: its own entry, else where a key inside it was (a section that
    only its keys record: ``+new.key=3`` records ``new.key``, a finding about ``new`` points
    there), else ``<default>``."""
    if key in where:
        return where[key]
    inside = [loc for k, loc in where.items() if k.startswith(key + ".")]
    if not inside:
        return Location(key=key)
    first = min(inside, key=lambda loc: (loc.file or "", loc.line or 0))  # the section's start
    return replace(first, key=key)


def sort_diagnostics(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Errors first, then warnings, then infos; within a severity by rule id, then key."""
    return sorted(diags, key=lambda d: (_SEVERITY_ORDER[d.severity], d.rule.id, d.key, d.message))


def render_text(diags: Iterable[Diagnostic], path: str | None = None) -> str:
    """Human-readable rendering, one block per diagnostic::

    error[TRC201 heads-divisible-by-tp]: num_attention_heads (12) is not divisible by tp (8)
      --> spec.yaml:7   parallel.tp
      fix: set parallel.tp to one of 1, 2, 3, 4, 6, 12
    """
    lines = []
    for d in diags:
        lines.append(f"{d.severity.value}[{d.rule.id} {d.rule.name}]: {d.message}")
        for loc in d.locations or (Location(key=d.key),):
            lines.append(f"  --> {loc.render():<40} {loc.key}")
        if d.fix:
            lines.append(f"  fix: {d.fix}")
    if path is not None and lines:
        lines.insert(0, f"{path}:")
    return "\n".join(lines)


def did_you_mean(word: str, candidates: list[str]) -> str:
    """`` (did you mean `x`?)`` for the closest candidate, or an empty string; a word that
    begins two to four candidates names them all (``a100`` -> `a100-40g` or `a100-80g`).

    >>> did_you_mean("h100", ["a100-80g", "h100-80g", "h800"])
    ' (did you mean `h100-80g`?)'
    >>> did_you_mean("a100", ["a100-40g", "a100-80g", "h800"])
    ' (did you mean `a100-40g` or `a100-80g`?)'
    """
    # a candidate the word begins (``h100`` -> ``h100-80g``) is what a shortened name means;
    # difflib's ratio would rank a same-length neighbour first (``h800``)
    stem = [c for c in candidates if len(word) >= 3 and str(c).lower().startswith(word.lower())]
    if 1 < len(stem) <= 4:
        return " (did you mean " + " or ".join(f"`{c}`" for c in stem) + "?)"
    close = stem if len(stem) == 1 else difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""
