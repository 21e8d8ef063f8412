"""trainc diff (text and JSON, exit codes) and the progress helper."""

import json
from pathlib import Path

import pytest

from trainc.cli import main
from trainc.ecosystem import progress as P
from trainc.ecosystem.diff import change, compare, flatten, fmt_value

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = str(ROOT / "examples" / "llama2-70b-dgx-a100.yaml")


def _diff_json(capsys, *args):
    rc = main(["diff", EXAMPLE, EXAMPLE, *args, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def test_identical_specs(capsys):
    rc, out = _diff_json(capsys)
    assert rc == 0 and out["differences"] == [] and out["num_equal"] > 50
    assert {row["key"] for row in out["summary"]} >= {"derived.dp", "derived.num_microbatches"}


def test_overrides_apply_to_b_and_derived_values_follow(capsys):
    rc, out = _diff_json(capsys, "parallel.pp=8", "parallel.tp=4", "training.global_batch_size=512")
    assert rc == 0
    diffs = {d["key"]: (d["a"], d["b"]) for d in out["differences"]}
    assert diffs["parallel.pp"] == (4, 8)
    assert diffs["derived.layers_per_stage"] == ([20] * 4, [10] * 8)
    assert diffs["derived.num_microbatches"] == (512, 256)
    assert "derived.pp" not in diffs  # only repeats parallel.pp
    assert "derived.dp" not in diffs  # 64 / (4*8) == 64 / (8*4)


def test_preset_change_and_estimates_if_present(capsys):
    rc, out = _diff_json(capsys, "model=llama3-8b")
    assert rc == 0
    keys = [d["key"] for d in out["differences"]]
    assert "presets.model" in keys and "model.vocab_size" in keys
    assert keys.index("model.vocab_size") < keys.index("derived.padded_vocab_size")


def test_errors_exit_2(capsys):
    rc = main(["diff", EXAMPLE, EXAMPLE, "parallel.tp=3", "--format", "json"])
    captured = capsys.readouterr()
    assert rc == 2 and "TRC201" in captured.err
    assert json.loads(captured.out)["b"]["ok"] is False
    assert main(["diff", EXAMPLE]) == 2


def test_text_table(capsys):
    assert main(["diff", EXAMPLE, EXAMPLE, "parallel.pp=8"]) == 0
    out = capsys.readouterr().out
    assert "parallel.pp" in out and "summary" in out and "+100.0%" in out
    assert main(["diff", EXAMPLE, EXAMPLE]) == 0
    assert "no differences" in capsys.readouterr().out


def test_flatten_compare_and_formatting():
    a = {
        "spec": {"model": {"n": 1}, "launch": {"env": {"X": "1"}}},
        "derived": {"dp": 2},
        "estimates": {"memory_bytes": {"total": 2**31}},
        "spec_hash": "x",
        "diagnostics": [{"rule": "TRC209"}],
    }
    b = {
        "spec": {"model": {"n": 1}, "launch": {"env": {}}},
        "derived": {"dp": 4},
        "estimates": {},
        "spec_hash": "y",
        "diagnostics": [],
    }
    assert flatten(a)["launch.env"] == {"X": "1"} and "spec_hash" not in flatten(a)
    diffs, same = compare(a, b)
    assert [d["key"] for d in diffs] == [
        "launch.env",
        "derived.dp",
        "estimates.memory_bytes.total",
        "diagnostics",
    ]
    assert diffs[2]["b"] is None
    assert same == {"model.n": 1}
    assert fmt_value("estimates.memory_bytes.total", 2**31) == "2.00 GiB"
    assert fmt_value("estimates.pipeline_bubble_fraction", 0.125) == "12.5%"
    assert change(2, 3) == "+50.0%" and change("a", "b") == ""
    assert fmt_value("derived.layers_per_stage", [20, 20]) == "[20, 20]"
    assert (
        fmt_value("estimates.rank_map.first_node", [{"rank": i} for i in range(8)]) == "[8 items]"
    )


def test_progress_is_a_noop_without_a_tty(monkeypatch):
    monkeypatch.delenv("TRAINC_NO_PROGRESS", raising=False)
    assert not P.enabled()  # pytest captures stdout: not a TTY
    with P.progress("work", total=3) as advance:
        advance()
        advance(2, description="done")
    assert list(P.track(range(3), "items")) == [0, 1, 2]


def test_progress_draws_on_a_tty(monkeypatch):
    pytest.importorskip("rich")
    monkeypatch.setattr(P, "enabled", lambda disable=False: not disable)
    assert list(P.track(range(5), "items")) == list(range(5))
    with P.progress("spinner") as advance:
        advance(description="step")
    monkeypatch.undo()
    monkeypatch.setenv("TRAINC_NO_PROGRESS", "1")
    assert not P.enabled()


def test_command_lines_and_long_lists_differ_row_by_row(capsys):
    """The Megatron-LM argument list was one row printed whole (about 140 wrapped lines for
    tp 8 -> 4); now each flag is a row, and a long list that differs names the items."""
    rc, out = _diff_json(capsys, "parallel.tp=4", "parallel.pp=8")
    diffs = {d["key"]: (d["a"], d["b"]) for d in out["differences"]}
    assert rc == 0 and "engines.megatron_lm" not in diffs
    assert diffs["engines.megatron_lm.--tensor-model-parallel-size"] == ("8", "4")
    assert diffs["engines.megatron_lm.--pipeline-model-parallel-size"] == ("4", "8")
    flat = flatten({"spec": {}, "engines": {"megatron_lm": [["--swiglu"], ["--tp", "2"]]}})
    assert flat["engines.megatron_lm.--swiglu"] is True and flat["engines.megatron_lm.--tp"] == "2"
    assert main(["diff", EXAMPLE, EXAMPLE, "parallel.tp=4", "parallel.pp=8"]) == 0
    text = capsys.readouterr().out
    assert "'--num-layers'" not in text and len(text.splitlines()) < 120


def test_require_resume_exit_code(capsys):
    """`diff` exits 0 for any difference (what it is asked for); with --require-resume a B that
    cannot load A's checkpoints (tp 8 -> 4: the trainc worker's layout-bound files, TRC534) is
    exit 1, for CI; a B that can (another lr) stays 0."""
    assert main(["diff", EXAMPLE, EXAMPLE, "parallel.tp=4", "parallel.pp=8"]) == 0
    assert (
        main(["diff", EXAMPLE, EXAMPLE, "parallel.tp=4", "parallel.pp=8", "--require-resume"]) == 1
    )
    assert "B cannot resume from A's checkpoints (--require-resume)" in capsys.readouterr().err
    assert main(["diff", EXAMPLE, EXAMPLE, "training.lr=0.0002", "--require-resume"]) == 0


def test_compiled_outputs_diff_by_their_plans_spec(capsys, tmp_path):
    """An OUTDIR or its plan.json is diffed by the resolved spec it was compiled from (a new
    user got TRC000 for OUTDIRs and 20 bogus errors for plan.json)."""
    out = tmp_path / "out"
    assert main(["compile", EXAMPLE, "-o", str(out), "parallel.pp=8"]) == 0
    capsys.readouterr()
    for a in (str(out), str(out / "plan.json")):
        rc = main(["diff", a, EXAMPLE, "--format", "json"])
        got = json.loads(capsys.readouterr().out)
        assert rc == 0, got
        diffs = {d["key"]: (d["a"], d["b"]) for d in got["differences"]}
        assert diffs["parallel.pp"] == (8, 4)
        assert diffs["derived.num_microbatches"] == (1024, 512)


def test_a_compiled_output_and_its_own_spec_do_not_differ(capsys, tmp_path):
    """The resolved spec has no defaults list: the output's recorded presets stand in, so an
    output diffed with the spec it came from shows no presets.* difference."""
    out = tmp_path / "out"
    assert main(["compile", EXAMPLE, "-o", str(out)]) == 0
    capsys.readouterr()
    rc = main(["diff", str(out / "plan.json"), EXAMPLE, "--format", "json"])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["differences"] == [], got["differences"]


def test_overrides_on_a_compiled_output_derive_again(capsys, tmp_path):
    """A compiled output stands for the spec as written (plan.json ``spec_as_written``): an
    override of tp re-derives etp, sequence parallelism and TP overlap exactly as the same
    override on the spec file does (trial 13: the resolved spec kept etp 8 and failed TRC312,
    or kept sequence parallelism off and estimated 7 % slower)."""
    out = tmp_path / "out"
    assert main(["compile", EXAMPLE, "-o", str(out)]) == 0
    capsys.readouterr()
    plan = json.loads((out / "plan.json").read_text())
    assert (
        plan["spec"]["parallel"]["etp"] == 8 and plan["spec_as_written"]["parallel"]["etp"] is None
    )
    ov = ["parallel.tp=4", "parallel.pp=8"]
    rc = main(["diff", str(out), str(out), *ov, "--format", "json"])
    from_output = json.loads(capsys.readouterr().out)
    rc_spec = main(["diff", EXAMPLE, EXAMPLE, *ov, "--format", "json"])
    from_spec = json.loads(capsys.readouterr().out)
    assert rc == rc_spec == 0
    assert from_output["differences"] == from_spec["differences"]


def test_errors_in_a_compiled_output_name_its_plan_json(capsys, tmp_path):
    """Diagnostics of a compiled output point at its plan.json, never at the deleted scratch
    file the diff compiled."""
    out = tmp_path / "out"
    assert main(["compile", EXAMPLE, "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["diff", str(out), str(out), "parallel.tp=3"]) == 2
    err = capsys.readouterr().err
    assert "TRC201" in err and f"--> {out / 'plan.json'}" in err and "trainc-diff-" not in err
