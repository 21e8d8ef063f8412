"""Every entry of trainc/conf/known_bad_versions.yaml, checked from the table itself: a job with
the entry's versions and features matches it, and it stops matching when one component is at its
``fixed_in`` release, when one ``when`` feature is off, or when the workaround env is set."""
from __future__ import annotations

import pytest

from trainc import known_versions as kv

ENTRIES = kv.table()


def _inside(spec: str) -> str:
    """A version that satisfies ``spec`` (tried from the clauses' own bounds)."""
    refs = [tuple(int(x) for x in c.strip().lstrip("<>=!").split(".")) for c in spec.split(",")]
    cands: list[tuple[int, ...]] = []
    for r in refs:
        cands += [r, (*r, 1)]
        if r[-1] > 0:
            cands += [(*r[:-1], r[-1] - 1), (*r[:-1], r[-1] - 1, 99)]
    for c in cands:
        if kv.in_range(c, spec):
            return ".".join(map(str, c))
    raise AssertionError(f"no version found inside {spec!r}")


def _job(e: kv.BadCombination) -> dict[str, str]:
    return {c: _inside(r) for c, r in e.versions.items()}


@pytest.mark.parametrize("e", ENTRIES, ids=[e.id for e in ENTRIES])
def test_entry_is_well_formed(e: kv.BadCombination) -> None:
    assert e.link.startswith("https://")
    assert e.severity in ("error", "warning")
    assert e.fixed_in and set(e.fixed_in) <= set(e.versions)
    for comp, fixed in e.fixed_in.items():
        parsed = kv.parse_version(fixed)
        assert parsed is not None, (comp, fixed)
        assert not kv.in_range(parsed, e.versions[comp]), (comp, fixed)


@pytest.mark.parametrize("e", ENTRIES, ids=[e.id for e in ENTRIES])
def test_entry_matches_its_own_job_and_not_a_fixed_or_worked_around_one(
        e: kv.BadCombination) -> None:
    versions, feats = _job(e), set(e.when)
    assert kv.matches(versions, feats, {}, [e]) == [e]
    for comp, fixed in e.fixed_in.items():
        assert kv.matches({**versions, comp: fixed}, feats, {}, [e]) == []
    for f in e.when:
        assert kv.matches(versions, feats - {f}, {}, [e]) == []
    if e.unless_env:
        assert kv.matches(versions, feats, dict(e.unless_env), [e]) == []
    missing = next(iter(e.versions))
    assert kv.matches({c: v for c, v in versions.items() if c != missing}, feats, {}, [e]) == []
