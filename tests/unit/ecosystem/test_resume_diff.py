"""`trainc diff A B`: can B resume from A's checkpoints (the TRC533-TRC538 comparison)."""

import json
from pathlib import Path

from trainc.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "llama2-70b-dgx-a100.yaml")


def _resume(capsys, *overrides):
    rc = main(["diff", EXAMPLE, EXAMPLE, *overrides, "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    return rc, out["resume"]


def test_same_spec_resumes(capsys):
    rc, r = _resume(capsys)
    assert rc == 0 and r == {"ok": True, "reasons": []}


def test_layout_change_needs_a_resharding_format(capsys):
    # the trainc worker's files are layout-bound; pretrain_gpt.py's torch_dist reshards
    _, r = _resume(capsys, "parallel.tp=4", "parallel.pp=8")
    assert not r["ok"]
    keys = {(x["rule"], x["key"], x["a"], x["b"]) for x in r["reasons"]}
    assert ("TRC534", "parallel.tp", 8, 4) in keys and ("TRC534", "parallel.pp", 4, 8) in keys
    # a dense model's etp follows tp: no finding of its own, and the message does not name it
    assert not any(x["key"] == "parallel.etp" for x in r["reasons"])
    assert all("etp" not in x["message"] for x in r["reasons"])


def test_vocab_padding_change_is_reported_with_the_rows(capsys):
    # vocab 32000 at tp 8: 128 x 8 -> 32768 rows, 64 x 8 -> 32256 rows
    _, r = _resume(capsys, "model.make_vocab_size_divisible_by=64")
    [v] = [x for x in r["reasons"] if x["rule"] == "TRC535"]
    assert not r["ok"] and (v["a"], v["b"]) == (32768, 32256)
    assert "make_vocab_size_divisible_by to 4096" in v["fix"]


def test_batch_change_warns_and_finetune_waives_it(capsys):
    _, r = _resume(capsys, "training.global_batch_size=512")
    assert r["ok"] and [x["rule"] for x in r["reasons"]] == ["TRC537"]
    _, r = _resume(capsys, "training.global_batch_size=512", "resume.finetune=true")
    assert all(x["rule"] != "TRC537" for x in r["reasons"])


def test_optimizer_change_blocks_resume(capsys):
    _, r = _resume(capsys, "training.optimizer=sgd")
    assert not r["ok"] and [x["key"] for x in r["reasons"]] == ["training.optimizer"]
