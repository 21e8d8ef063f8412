"""The types of the rule catalog: :class:`Severity`, :class:`Rule` and :class:`Family`.

A rule is declared once, in the module of its family (``trainc/compiler/rules/<family>.py``),
with its id, kebab-case name, summary, source and default severity, and the per-engine grades
where they differ; the module's :class:`Family` record at its end lists it, and
:mod:`trainc.compiler.rules` re-exports it and collects every family's rules into
``ALL_RULES``. ``docs/rules.md`` is generated from the catalog (``python -m trainc.docs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from trainc.schemas.enums import Engine


class Severity(StrEnum):
    """How bad a diagnostic is: errors stop compilation (exit 2), warnings and infos do not.

    ``na`` (``"n/a"``) is a per-engine grade only (:attr:`Rule.engines`): the rule does not
    apply to that engine and its findings are dropped for a spec of that engine; no diagnostic
    carries it. A ``StrEnum``: a member equals its value (``Severity.error == "error"``) and
    renders as it in text and JSON."""

    error = "error"
    warning = "warning"
    info = "info"
    na = "n/a"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A rule of the catalog.

    ``id`` is ``TRCnnn``, stable and never reused (:data:`trainc.compiler.rules.RETIRED`),
    inside its family's id ranges; ``name`` is kebab-case and unique; ``summary`` is the one-line
    statement ``docs/rules.md`` prints; ``source`` is where the rule comes from: the upstream file
    and function that enforces (or silently breaks on) it at a pinned version (unqualified
    Megatron names are Megatron-LM core_v0.16.1, DeepSpeed names DeepSpeed v0.19.8), a paper by
    arXiv id, or a bug case (docs/bug_cases.md). ``severity`` (error, warning or info) is the
    default for every engine; ``engines`` overrides it per engine, e.g. a check Megatron-Core
    enforces at init but DeepSpeed only warns about, or :attr:`Severity.na` where the rule does
    not apply; the validate and fit passes apply it
    (:func:`trainc.compiler.diagnostics.for_engine`)."""

    id: str
    name: str
    summary: str
    source: str
    severity: Severity = Severity.error
    engines: Mapping[Engine, Severity] = field(default_factory=dict, hash=False)

    def severity_for(self, engine: Engine | str) -> Severity:
        """The severity of this rule's findings for ``engine`` (an ``Engine`` or its value): the
        override in :attr:`engines`, else :attr:`severity`; :attr:`Severity.na` when it does
        not apply. Raises ``ValueError`` for a name that is no ``Engine``."""
        return self.engines.get(Engine(engine), self.severity)


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """A family of rules: a module under ``trainc/compiler/rules/`` that declares them and ends
    with this record, the id ranges its rules take (``range(300, 340)`` is TRC300..TRC339; the
    families' ranges are disjoint, so ids cannot collide across families), what it checks, and
    the explicit tuple of its rules."""

    name: str
    ids: tuple[range, ...]
    about: str
    rules: tuple[Rule, ...]

    def owns(self, rule_id: str) -> bool:
        """True when ``rule_id`` (``TRCnnn``) lies in one of this family's ranges."""
        n = int(rule_id.removeprefix("TRC"))
        return any(n in r for r in self.ids)
