"""The known-bad entry for Transformer Engine before 1.4 with FP8, pipeline parallelism, full
recompute and gradient accumulation (NVIDIA/TransformerEngine#539, fixed by PR #646 in 1.4), and
the ``recompute_full`` job feature it needs, at lint time and in ``trainc run``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.kit import BASE, apply, find, lint_cfg
from trainc import known_versions as KV
from trainc.compiler.pipeline import compile_spec
from trainc.launch.host.local import version_problems

ENTRY = "te-below-1.4-fp8-pp-recompute-nan"
#: BASE (tp 2, pp 2 on 8 GPUs, 8 micro-batches per step) on H100 with FP8 and full recompute.
FP8_FULL = {
    "cluster.gpu": "h100-80g",
    "training.fp8_format": "hybrid",
    "training.recompute": "full",
}


def _entry_found(te: str, **changes: object) -> bool:
    diags = lint_cfg(**{**FP8_FULL, **changes, "launch.versions": {"transformer_engine": te}})
    return any(d.facts.get("entry") == ENTRY for d in find(diags, "TRC530"))


def test_the_entry_names_its_report_and_fix() -> None:
    diags = lint_cfg(**FP8_FULL, **{"launch.versions": {"transformer_engine": "1.2.0"}})
    [d] = [d for d in find(diags, "TRC530") if d.facts["entry"] == ENTRY]
    assert d.is_error and d.key == "launch.versions.transformer_engine"
    assert d.edits == {"launch.versions.transformer_engine": "1.4"}
    assert d.facts["link"].endswith("/TransformerEngine/issues/539")


@pytest.mark.parametrize(
    "te,changes,found",
    [
        ("1.2.0", {}, True),
        ("1.3.0", {}, True),
        ("1.4.0", {}, False),  # PR #646 casts the FP8 weight in place
        ("1.2.0", {"training.recompute": "selective"}, False),  # no TE layer runs under no_grad
        ("1.2.0", {"parallel.pp": 1}, False),  # no pipeline warm-up
        ("1.2.0", {"training.global_batch_size": 2}, False),  # one micro-batch per step
        ("1.2.0", {"training.fp8_format": "none"}, False),
    ],
    ids=["te1.2", "te1.3", "te1.4", "selective", "no-pp", "one-microbatch", "bf16"],
)
def test_the_entry_needs_all_four_features(
    te: str, changes: dict[str, object], found: bool
) -> None:
    assert _entry_found(te, **changes) is found


def _features(recompute: str = "") -> frozenset[str]:
    return KV.job_features(
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
        recompute=recompute,
    )


def test_recompute_full_is_a_feature_of_full_recompute_only() -> None:
    assert "recompute_full" in _features(recompute="full")
    assert "recompute_full" not in _features(recompute="selective")
    assert "recompute_full" not in _features()
    assert "recompute_full" in KV.FEATURES


def test_trainc_run_reads_the_recompute_from_the_plan(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(apply(BASE, FP8_FULL), sort_keys=False), encoding="utf-8")
    res = compile_spec(spec, [])
    assert res.ok, [d.to_json() for d in res.diagnostics if d.is_error]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in res.files.items():
        (out / name).write_text(text, encoding="utf-8")
    bad, _ = version_problems(str(out), {}, {"transformer_engine": "1.3.0"})
    assert any(ENTRY in b for b in bad), bad
    bad, _ = version_problems(str(out), {}, {"transformer_engine": "1.4.0"})
    assert not any(ENTRY in b for b in bad), bad
