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
    e: kv.BadCombination,
) -> None:
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


def _feats(**kw: object) -> frozenset[str]:
    args: dict[str, object] = dict(
        engine="megatron",
        entrypoint="trainc",
        device="cuda",
        ep=1,
        num_experts=None,
        dispatcher="alltoall",
        cp=1,
        fp8=False,
        zero_stage=0,
        tp_comm_overlap=False,
        gpu="h100-80g",
    )
    args.update(kw)
    return kv.job_features(**args)  # type: ignore[arg-type]


def test_zero2_is_deepspeed_at_stage_2_only() -> None:
    assert "zero2" in _feats(engine="deepspeed", zero_stage=2)
    assert "zero2" not in _feats(engine="deepspeed", zero_stage=3)
    assert "zero2" not in _feats(engine="deepspeed", zero_stage=1)
    assert "zero2" not in _feats(engine="megatron", zero_stage=2)
    assert {"zero3", "deepspeed"} <= _feats(engine="deepspeed", zero_stage=3)


def test_tp_comm_overlap_is_a_megatron_feature() -> None:
    assert "tp_comm_overlap" in _feats(tp_comm_overlap=True)
    assert "tp_comm_overlap" not in _feats(tp_comm_overlap=False)
    assert "tp_comm_overlap" not in _feats(engine="deepspeed", tp_comm_overlap=True)


def test_every_feature_a_job_can_have_is_one_the_table_may_name() -> None:
    everything = _feats(
        engine="deepspeed",
        entrypoint="megatron-lm",
        ep=8,
        num_experts=16,
        cp=2,
        fp8=True,
        zero_stage=2,
    )
    assert everything <= kv.FEATURES
    assert _feats(engine="fsdp") == {"fsdp", "cuda"} and "fsdp" in kv.FEATURES
    assert _feats(tp_comm_overlap=True, cp=2, fp8=True) <= kv.FEATURES


def test_every_entry_is_listed_in_the_versions_doc() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "data_versions_checkpoints.md").read_text()
    assert [e.id for e in ENTRIES if f"| {e.id} " not in doc] == []
    assert all(e.link in doc for e in ENTRIES)


def test_grace_is_cuda_on_a_gb200_or_gb300_profile() -> None:
    assert "grace" in _feats(gpu="gb200") and "grace" in _feats(gpu="gb300")
    assert "grace" not in _feats(gpu="b200") and "grace" not in _feats(gpu="h100-80g")
    assert "grace" not in _feats(gpu="gb200", device="cpu")
