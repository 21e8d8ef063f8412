"""The rule catalog: one stable id per rule (never reused), a kebab-case name, a summary, its
source and the default severity, with per-engine grades. ``docs/rules.md`` is generated from it
(``python -m trainc.docs``).

Each family is a module that declares its rules and ends with its
:class:`~trainc.compiler.rules.catalog.Family` record (id ranges, explicit rule tuple):
:mod:`.loading` TRC0xx, :mod:`.topology` TRC1xx, :mod:`.divisibility` TRC2xx,
:mod:`.compatibility` TRC30x-33x and TRC38x-39x, :mod:`.fsdp` TRC34x, :mod:`.data` TRC35x,
:mod:`.precision` TRC37x and TRC36x, :mod:`.fit` TRC4xx, :mod:`.launch` TRC50x-52x, :mod:`.versions`
TRC53x-59x. The checks use the rules as ``R.<NAME>`` (``from trainc.compiler import rules as
R``): this module re-exports every family module's names.

A new rule: declare ``NAME = Rule(id=..., name=..., summary=..., source=...)`` (plus
``severity=`` and ``engines=`` where not an error everywhere) in its family's module, with the id
:func:`next_free_id` gives (the next of the family's ranges that is neither declared nor
:data:`RETIRED`), add ``NAME`` to the ``rules`` of the family record at the end of that module,
and regenerate ``docs/rules.md``. A rule is never deleted or renumbered: a rule taken out of use
moves its id to :data:`RETIRED`.
"""

from collections.abc import Mapping

from trainc.compiler.rules.catalog import Family as Family
from trainc.compiler.rules.catalog import Rule as Rule
from trainc.compiler.rules.catalog import Severity as Severity
from trainc.compiler.rules.compatibility import *  # noqa: F403
from trainc.compiler.rules.compatibility import COMPATIBILITY
from trainc.compiler.rules.data import *  # noqa: F403
from trainc.compiler.rules.data import DATA
from trainc.compiler.rules.divisibility import *  # noqa: F403
from trainc.compiler.rules.divisibility import DIVISIBILITY
from trainc.compiler.rules.fit import *  # noqa: F403
from trainc.compiler.rules.fit import FIT
from trainc.compiler.rules.fsdp import *  # noqa: F403
from trainc.compiler.rules.fsdp import FSDP
from trainc.compiler.rules.launch import *  # noqa: F403
from trainc.compiler.rules.launch import LAUNCH
from trainc.compiler.rules.loading import *  # noqa: F403
from trainc.compiler.rules.loading import LOADING
from trainc.compiler.rules.precision import *  # noqa: F403
from trainc.compiler.rules.precision import PRECISION
from trainc.compiler.rules.topology import *  # noqa: F403
from trainc.compiler.rules.topology import TOPOLOGY
from trainc.compiler.rules.versions import *  # noqa: F403
from trainc.compiler.rules.versions import VERSIONS

#: The severities a rule may take for an engine (``n/a``: the rule does not apply to it).
SEVERITIES = tuple(s.value for s in Severity)

#: The families, in the order of their ids.
FAMILIES: tuple[Family, ...] = (
    LOADING,
    TOPOLOGY,
    DIVISIBILITY,
    COMPATIBILITY,
    FSDP,
    DATA,
    PRECISION,
    FIT,
    LAUNCH,
    VERSIONS,
)

#: Every rule of the catalog, by id.
ALL_RULES: tuple[Rule, ...] = tuple(
    sorted((r for f in FAMILIES for r in f.rules), key=lambda r: r.id)
)
RULES_BY_ID: dict[str, Rule] = {r.id: r for r in ALL_RULES}

#: Ids that no rule may take (id -> why): the ids of retired rules, and ids published before a
#: rule was declared for them.
RETIRED: Mapping[str, str] = {
    "TRC322": "retired: deepspeed-pipe-grad-accum-scale warned that DeepSpeed's PipelineEngine "
    "sums micro-batch gradients (DeepSpeed #7773), but no runner of engine=deepspeed splits pp "
    "(TRC313 refuses it for the trainc worker, TRC325 refuses the other entrypoints), so it "
    "could only ever stand beside an error",
    "TRC345": "published in an earlier fsdp: section docstring (as the rule for fsdp.* keys "
    "set with another engine, which is TRC329) but never declared",
}

#: Where each rule comes from, by id (the ``source`` of each :class:`Rule`).
SOURCES: dict[str, str] = {r.id: r.source for r in ALL_RULES}


def family_of(rule: Rule) -> Family:
    """The family whose id ranges hold ``rule``'s id. Raises ``LookupError`` when none does."""
    for f in FAMILIES:
        if f.owns(rule.id):
            return f
    raise LookupError(f"{rule.id} is in no family's id ranges")


def next_free_id(family: Family) -> str:
    """The id for a new rule of ``family``: in the first of its ranges with room, the lowest
    above the range's first declared rule that no rule has and :data:`RETIRED` does not hold
    (fsdp: past TRC345, which is retired). Raises ``LookupError`` when the ranges are full."""
    used = {int(r.id[3:]) for r in ALL_RULES if family.owns(r.id)}
    for rng in family.ids:
        first = min((n for n in used if n in rng), default=rng.start)
        for n in range(first, rng.stop):
            if n not in used and f"TRC{n:03d}" not in RETIRED:
                return f"TRC{n:03d}"
    raise LookupError(f"family {family.name} has no free id")


def _check_catalog() -> None:
    """Import-time invariants: ids unique, none retired, each in its family's ranges, the
    families' ranges disjoint."""
    assert len(RULES_BY_ID) == len(ALL_RULES), "duplicate rule id"
    assert not set(RULES_BY_ID) & set(RETIRED), "a retired id is in use"
    for f in FAMILIES:
        for r in f.rules:
            assert f.owns(r.id), f"{r.id} is outside family {f.name}'s ids"
    taken = [n for f in FAMILIES for rng in f.ids for n in rng]
    assert len(taken) == len(set(taken)), "two families share ids"


_check_catalog()
