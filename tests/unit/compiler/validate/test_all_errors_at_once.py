"""One lint run reports every error whose inputs are known (issue 12): schema errors (unknown
key, wrong type, bad choice, unquoted string, range) no longer stop the rules; a rule that read
an invalid key has its finding withheld, and one TRC009 note per invalid key says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.kit import find, lint_cfg, make
from trainc.cli import main
from trainc.compiler.derive import derive
from trainc.compiler.validate import PARTS, VALIDATORS

SEVEN = """\
defaults:
  - model: llama3-8b
  - cluster: dgx-h100
  - _self_
name: seven
model:
  activation: swiglo
  num_attention_heads: 30
  kv_channels: 128
cluster:
  num_nodes: 1
parallel:
  tp: 4
  tpp: 2
training:
  global_batch_size: 15
  micro_batch_size: 1
  lr_warmup_iters: 100
  adam_beta2: 0.95
launch:
  time_limit: 4:00:00
  shrink: maybe
  save_interval: 0
"""

EXPECTED = {
    ("TRC002", "parallel.tpp"),  # unknown key
    ("TRC004", "model.activation"),  # bad enum value
    ("TRC001", "launch.shrink"),  # wrong type
    ("TRC007", "launch.time_limit"),  # 4:00:00 read as 14400
    ("TRC006", "launch.save_interval"),  # out of range
    ("TRC201", "parallel.tp"),  # tp does not divide 30 heads
    ("TRC207", "model.num_query_groups"),  # 30 heads, 8 groups
    ("TRC214", "training.global_batch_size"),
}  # 15 not divisible by mbs*dp = 2


def _lint_json(tmp_path: Path, capsys, text: str, *overrides: str) -> tuple[int, list[dict]]:
    f = tmp_path / "spec.yaml"
    f.write_text(text)
    rc = main(["lint", str(f), *overrides, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)["specs"][0]["diagnostics"]


def test_seven_mistakes_in_one_run(tmp_path: Path, capsys) -> None:
    rc, diags = _lint_json(tmp_path, capsys, SEVEN)
    assert rc == 2
    found = {(d["rule"], d["key"]) for d in diags}
    assert found >= EXPECTED, sorted(EXPECTED - found)
    lines = {(d["rule"], d["key"]): d.get("line") for d in diags}
    assert (
        lines[("TRC002", "parallel.tpp")] == 14
        and lines[("TRC214", "training.global_batch_size")] == 16
    )


def test_the_same_findings_as_with_the_broken_keys_fixed(tmp_path: Path, capsys) -> None:
    """Rules that did not read an invalid key report exactly what they report once it is fixed
    (the findings are not computed from stand-in values)."""
    _, broken = _lint_json(tmp_path, capsys, SEVEN)
    fixed_text = (
        SEVEN.replace("swiglo", "swiglu")
        .replace("  tpp: 2\n", "  # tpp\n")
        .replace("shrink: maybe", "shrink: false")
        .replace("save_interval: 0", "save_interval: 100")
        .replace("4:00:00", '"4:00:00"')
    )
    _, fixed = _lint_json(tmp_path, capsys, fixed_text)
    loader = {"TRC001", "TRC002", "TRC004", "TRC006", "TRC007", "TRC009"}
    rest = sorted(json.dumps(d, sort_keys=True) for d in broken if d["rule"] not in loader)
    assert rest == sorted(json.dumps(d, sort_keys=True) for d in fixed)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("parallel.tp=two", "parallel.tp"),
        ("parallel.tp=0", "parallel.tp"),
        ("training.micro_batch_size=-1", "training.micro_batch_size"),
        ("cluster.num_nodes=1.5", "cluster.num_nodes"),
    ],
)
def test_rules_reading_a_broken_key_are_skipped_and_say_so(
    tmp_path: Path, capsys, override: str, key: str
) -> None:
    rc, diags = _lint_json(tmp_path, capsys, SEVEN, override)
    assert rc == 2
    notes = [d for d in diags if d["rule"] == "TRC009"]
    [note] = [d for d in notes if d["key"] == key]
    assert note["severity"] == "info" and f"checks that read {key} were skipped" in note["message"]
    assert note["fix"] == f"fix {key} and lint again"
    # a key normalization fills from the broken one is not named on its own
    assert not {d["key"] for d in notes} & {"parallel.etp", "parallel.sequence_parallel"}
    # nothing is computed from the stand-in: no finding quotes dp from tp=1 (dp = 8)
    assert not [
        d
        for d in diags
        if d["rule"].startswith(("TRC1", "TRC2"))
        and "dp" in d.get("facts", {})
        and d["facts"]["dp"] == 8
    ]
    # findings that do not read it are still there
    found = {(d["rule"], d["key"]) for d in diags}
    assert {
        ("TRC002", "parallel.tpp"),
        ("TRC001", "launch.shrink"),
        ("TRC007", "launch.time_limit"),
    } <= found


def test_a_range_error_no_longer_hides_independent_rules() -> None:
    diags = lint_cfg(**{"parallel.tp": 0, "name": "my job!", "launch.time_limit": "4h"})
    assert find(diags, "TRC006") and find(diags, "TRC501") and find(diags, "TRC502")
    assert [d.key for d in find(diags, "TRC009")] == ["parallel.tp"]
    assert not find(diags, "TRC201")  # heads vs tp: computed from a stand-in, withheld


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"parallel.tp": 3},
        {"training.global_batch_size": 15},
        {"parallel.vpp": 3},
        {"model.num_experts": 6, "model.moe_router_topk": 2, "parallel.ep": 4},
        {"name": "bad name", "launch.env": {"MASTER_ADDR": "x"}},
        {"model.seq_length": 1025},
        {"engine": "deepspeed", "parallel.zero_stage": 3},
    ],
)
def test_the_parts_are_the_families(changes: dict) -> None:
    """PARTS (used when keys are broken) run exactly the rules of VALIDATORS, in order."""
    spec = make(**changes)
    d = derive(spec)
    whole = [x for v in VALIDATORS for x in v(spec, d)]
    parts = [x for v in PARTS for x in v(spec, d)]
    assert whole == parts


@pytest.mark.parametrize(
    "key, value, echo",
    [("parallel.tp", -8, "parallel.etp"), ("training.train_iters", 0, "training.lr_decay_iters")],
)
def test_a_filled_key_does_not_repeat_its_inputs_range_error(key, value, echo):
    """parallel.tp=-8 was reported first as 'parallel.etp must be a positive number' at
    <default> (etp is filled from tp), train_iters=0 as lr_decay_iters: one mistake, one error,
    at the key the user wrote."""
    errs = [d for d in lint_cfg(**{key: value}) if d.is_error]
    assert [d.key for d in errs] == [key], [d.message for d in errs]
    # a value the user wrote for the filled key is still checked on its own
    errs = [d for d in lint_cfg(**{key: value, echo: -1}) if d.is_error]
    assert sorted(d.key for d in errs) == sorted([key, echo])
