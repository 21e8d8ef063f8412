"""TRC540: a known-bad entry whose range holds the release trainc targets (megatron-core
0.16.1, DeepSpeed 0.19.8) warns when the job does not state that library's release; TRC530 (the
entry's own severity) when it does. The case: Megatron-Core EP 1 with ETP != TP reduces the
expert gradients over the wrong group before core_v0.19.0 (NVIDIA/Megatron-LM#1628, PR 5916;
FC-098)."""

from __future__ import annotations

from typing import Any

from tests.support.kit import errors, find, lint_cfg
from trainc import known_versions as KV
from trainc.compiler.plan import DEEPSPEED_VERSION, MEGATRON_CORE_VERSION
from trainc.compiler.validate.versions import ENGINE_TARGETS
from trainc.schemas import Engine

ENTRY = "mcore-moe-ep1-etp-not-tp-grad-reduction"
FOLD = {
    "model.num_experts": 8,
    "model.moe_router_topk": 2,
    "parallel.tp": 1,
    "parallel.ep": 1,
    "parallel.etp": 2,
}


def _of(diags: list[Any], rule: str) -> list[Any]:
    return [d for d in find(diags, rule) if d.facts["entry"] == ENTRY]


def test_targets_are_the_worker_pins() -> None:
    assert MEGATRON_CORE_VERSION == "0.16.1" and DEEPSPEED_VERSION == "0.19.8"
    want = {
        Engine.megatron: ("megatron_core", "0.16.1"),
        Engine.deepspeed: ("deepspeed", "0.19.8"),
    }
    assert want == ENGINE_TARGETS


def test_unstated_version_warns_with_the_targeted_release() -> None:
    diags = lint_cfg(**FOLD)
    (w,) = _of(diags, "TRC540")
    assert w.severity.value == "warning" and w.key == "launch.versions.megatron_core"
    assert "megatron_core 0.16.1, the release trainc targets" in w.message
    assert "megatron_core >=0.10,<0.19" in w.message
    assert w.fix == (
        "set launch.versions.megatron_core to the release the job runs; on 0.16.1 (or any "
        "release before 0.19): parallel.ep above 1 (with parallel.etp 1), or parallel.etp "
        "equal to parallel.tp, or run megatron_core 0.19 or later"
    )
    assert not _of(diags, "TRC530") and not errors(diags)


def test_stated_version_is_trc530_and_not_trc540() -> None:
    bad = lint_cfg(**FOLD, **{"launch.versions": {"megatron_core": "0.16.1"}})
    (e,) = _of(bad, "TRC530")
    assert e.is_error and "(or avoid it: parallel.ep above 1" in e.fix
    assert not find(bad, "TRC540")
    good = lint_cfg(**FOLD, **{"launch.versions": {"megatron_core": "0.19.0"}})
    assert not _of(good, "TRC530") and not find(good, "TRC540")


def test_an_unreadable_version_is_not_replaced_by_the_target() -> None:
    diags = lint_cfg(**FOLD, **{"launch.versions": {"megatron_core": "latest"}})
    assert find(diags, "TRC531") and not find(diags, "TRC540")


def test_other_versions_given_still_assume_the_target() -> None:
    diags = lint_cfg(**FOLD, **{"launch.versions": {"torch": "2.6.0"}})
    assert _of(diags, "TRC540")


def test_the_feature_is_needed() -> None:
    assert not find(lint_cfg(**{**FOLD, "parallel.ep": 2, "parallel.etp": 1}), "TRC540")
    assert not find(lint_cfg(**{**FOLD, "parallel.etp": 1}), "TRC540")


def test_only_entries_on_the_target_warn() -> None:
    """Every entry TRC540 can raise names the engine library and holds its targeted release
    in its range; today that is the one Megatron-Core entry."""
    hit = [
        e.id
        for e in KV.table()
        for comp, target in ENGINE_TARGETS.values()
        if comp in e.versions and KV.in_range(KV.parse_version(target) or (), e.versions[comp])
    ]
    assert hit == [ENTRY]
