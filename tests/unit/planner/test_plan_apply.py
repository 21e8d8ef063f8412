"""``trainc plan --apply``: the user's file with only the planned keys changed (comments, order,
quoting, indentation and the defaults list kept), and the result resolves to the planned layout."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import pytest

from trainc.compiler.load import load_spec
from trainc.compiler.normalize import FILLED_FROM, normalize
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.plan import spec_to_dict
from trainc.planner import plan_layouts
from trainc.planner.apply import applied_text

ROOT = Path(__file__).resolve().parents[3]

BLOCK = """\
# Llama-2-70B on 8 DGX-A100 nodes.
defaults:
  - model: llama2-70b   # the published shape
  - cluster: dgx-a100-80g
  - _self_

name: p70
cluster:
  num_nodes: 8   # 64 GPUs
parallel:
  tp: 8
  # the planner picks pp and vpp
training:
  global_batch_size: 1024
  precision: "bf16"
launch:
  time_limit: '04:00:00'
"""

FLOW_4 = """\
defaults: [{model: llama2-70b}, {cluster: dgx-a100-80g}, _self_]  # flow style
name: p70
cluster:
    num_nodes: 8
training:
    global_batch_size: 1024   # tokens: 4M
"""

NO_PARALLEL = """\
defaults:
- model: llama2-13b
- cluster: dgx-a100-80g
- _self_
name: p13
cluster: {num_nodes: 2}
training: {global_batch_size: 256}
"""


def _resolved(path: Path) -> dict:
    loaded = load_spec(path)
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    return spec_to_dict(normalize(loaded.spec))


def _changed_lines(before: str, after: str) -> list[str]:
    return [
        ln
        for ln in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]


@pytest.mark.parametrize("text", [BLOCK, FLOW_4, NO_PARALLEL], ids=["block", "flow-4", "no-par"])
def test_apply_keeps_the_file_and_changes_only_planned_keys(tmp_path, text):
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    res = plan_layouts(spec, top=3)
    best = res.planned[0].spec
    out = tmp_path / "applied.yaml"
    applied = applied_text(spec, [], best, out)
    assert applied.note == "" and applied.changed
    # every line of the original is still there (comments, quotes, defaults), in order
    removed = [ln for ln in _changed_lines(text, applied.text) if ln.startswith("-")]
    before = {k: v for k, v in _leaves_of(_resolved(spec)).items()}
    out.write_text(applied.text)
    after = _leaves_of(_resolved(out))
    assert after == _leaves_of(spec_to_dict(best))
    # the keys reported are those written: every key whose value the plan changes, except the
    # derived ones that follow the written keys (sequence_parallel from tp, ...)
    moved = {k for k in after if before.get(k) != after[k]}
    assert set(applied.changed) <= moved
    assert {k for k in moved - set(applied.changed)} <= set(FILLED_FROM)
    assert all(k.rsplit(".", 1)[1] + ":" in applied.text for k in applied.changed)
    assert all(k.startswith(("parallel.", "training.")) for k in applied.changed)
    added = [ln[1:] for ln in _changed_lines(text, applied.text) if ln.startswith("+")]
    for ln in removed:  # a removed line is an old value of a changed key, or a flow mapping
        key = ln[1:].split(":")[0].strip()  # that got ", key: value" before its brace
        flow = ln.rstrip().endswith("}") and any(
            a.startswith(ln[1:].rstrip()[:-1] + ", ") for a in added
        )
        assert flow or any(c.endswith("." + key) for c in applied.changed), ln
    for ln in text.splitlines():
        if (
            ln.lstrip().startswith("#")
            or "defaults" in ln
            or "_self_" in ln
            or "'" in ln
            or '"' in ln
        ):
            assert ln in applied.text.splitlines()
    r = compile_spec(out)
    assert r.ok, [d.message for d in r.diagnostics]


def _leaves_of(d: dict, prefix: str = "") -> dict:
    from trainc.planner.apply import _leaves

    return _leaves(d, prefix)


def test_apply_with_overrides_edits_the_defaults_list_and_the_keys(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(BLOCK)
    overrides = ["model=llama2-13b", "cluster.num_nodes=2", "parallel.pp=2"]
    res = plan_layouts(spec, overrides, top=1)
    out = tmp_path / "o.yaml"
    applied = applied_text(spec, overrides, res.planned[0].spec, out)
    lines = _changed_lines(BLOCK, applied.text)
    assert "-  - model: llama2-70b   # the published shape" in lines
    assert "+  - model: llama2-13b   # the published shape" in lines
    assert "+  num_nodes: 2   # 64 GPUs" in lines and "+  pp: 2" in lines
    assert applied.changed[0] == "model=llama2-13b"
    out.write_text(applied.text)
    assert _resolved(out) == spec_to_dict(normalize(res.planned[0].spec))


def test_apply_of_a_spec_that_is_already_the_plan_changes_nothing(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(BLOCK)
    first = applied_text(spec, [], plan_layouts(spec, top=1).planned[0].spec, spec)
    spec.write_text(first.text)
    again = applied_text(spec, [], plan_layouts(spec, top=1).planned[0].spec, spec)
    assert again.text == first.text and again.changed == []


def test_apply_elsewhere_with_presets_next_to_the_spec_writes_the_full_spec(tmp_path):
    src = tmp_path / "proj"
    (src / "model").mkdir(parents=True)
    (src / "model" / "mine.yaml").write_text(
        (ROOT / "trainc" / "conf" / "model" / "llama2-13b.yaml").read_text()
    )
    spec = src / "s.yaml"
    spec.write_text(NO_PARALLEL.replace("llama2-13b", "mine"))
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    out = elsewhere / "o.yaml"
    best = plan_layouts(spec, top=1).planned[0].spec
    applied = applied_text(spec, [], best, out)
    assert "wrote the complete resolved spec instead" in applied.note
    assert "defaults" not in applied.text
    out.write_text(applied.text)
    assert _resolved(out) == spec_to_dict(normalize(best))
    # next to the spec, the same edit works in place
    assert applied_text(spec, [], best, src / "o.yaml").note == ""


def test_cli_apply_in_place_and_unwritable(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(BLOCK)
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "plan", str(spec), "--apply", str(spec)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith(f"wrote {spec} (")
    text = spec.read_text()
    assert text.startswith("# Llama-2-70B on 8 DGX-A100 nodes.\ndefaults:\n  - model: llama2-70b")
    assert compile_spec(spec).ok
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainc",
            "plan",
            str(spec),
            "--apply",
            str(tmp_path / "no" / "such" / "o.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert "cannot write" in proc.stderr


@pytest.mark.parametrize(
    ("text", "edits", "expected"),
    [
        # replace in place, keep the comment and the other keys
        ("a:\n  x: 1   # keep\n  y: 'q'\n", {"a.x": 2}, "a:\n  x: 2   # keep\n  y: 'q'\n"),
        # an empty value gets one after the colon
        ("a:\n  x:\n  y: 1\n", {"a.x": 3}, "a:\n  x: 3\n  y: 1\n"),
        # insert after the last key of a block section, at its indentation
        ("a:\n    x: 1  # c\nb: 2\n", {"a.z": True}, "a:\n    x: 1  # c\n    z: true\nb: 2\n"),
        # a flow section grows before its brace; an empty one too
        ("a: {x: 1}  # c\n", {"a.z": "s"}, "a: {x: 1, z: s}  # c\n"),
        ("a: {}\n", {"a.z": 1}, "a: {z: 1}\n"),
        # a missing section is appended, keys grouped; so is a missing top-level key
        ("a: 1\n", {"b.x": 1, "b.y": None, "c": "v"}, "a: 1\nb:\n  x: 1\n  y: null\nc: v\n"),
    ],
)
def test_editor(text, edits, expected):
    from trainc.planner.apply import _Editor, _indent

    ed = _Editor(text)
    for k, v in edits.items():
        ed.set(k, v, _indent(text))
    assert ed.result() == expected


@pytest.mark.parametrize(
    ("text", "group", "option", "expected"),
    [
        (
            "defaults:\n  - model: a  # c\n  - _self_\nx: 1\n",
            "model",
            "b",
            "defaults:\n  - model: b  # c\n  - _self_\nx: 1\n",
        ),
        (
            "defaults:\n- model: a\n- _self_\nx: 1\n",
            "cluster",
            "k",
            "defaults:\n- model: a\n- _self_\n- cluster: k\nx: 1\n",
        ),
        (
            "defaults:\n  - _self_\n\nx: 1\n",
            "cluster",
            "k",
            "defaults:\n  - _self_\n  - cluster: k\n\nx: 1\n",
        ),
        (
            "defaults: [{model: a}, _self_]  # c\n",
            "cluster",
            "k",
            "defaults: [{model: a}, _self_, {cluster: k}]  # c\n",
        ),
        ("x: 1\n", "model", "m", "defaults:\n- _self_\n- model: m\nx: 1\n"),
    ],
)
def test_editor_defaults(text, group, option, expected):
    from trainc.planner.apply import _Editor

    ed = _Editor(text)
    ed.set_group(group, option)
    assert ed.result() == expected


def test_apply_does_not_write_what_normalization_derives(tmp_path):
    """--apply wrote `etp: 2` (and sequence_parallel) next to `tp: 2` for a dense model; a later
    `parallel.tp=4` then broke TRC312 (etp set without experts). Keys normalization fills from
    the written ones are left to it when they come out as planned."""
    from trainc.cli import main

    spec = tmp_path / "d8b.yaml"
    spec.write_text(
        "defaults:\n  - model: llama3-8b\n  - cluster: dgx-h100\n  - _self_\n"
        "cluster:\n  num_nodes: 2\ntraining:\n  global_batch_size: 128\n"
    )
    out = tmp_path / "out.yaml"
    assert main(["plan", str(spec), "--top", "3", "--apply", str(out)]) == 0
    text = out.read_text()
    assert "  tp: 2\n" in text and "etp" not in text and "sequence_parallel" not in text
    assert main(["lint", str(out), "parallel.tp=4"]) == 0


def test_apply_writes_a_filled_key_that_the_edit_moves_off_the_plan(tmp_path):
    """Mixtral at 32K on 16 H100: the pick has tp 8 with etp 1. etp resolved to 1 before the edit
    (filled from tp 1), so it was not a changed key; tp 8 then filled etp 8 and --apply fell back
    to the full resolved spec. The edit writes etp and keeps the user's file."""
    spec = tmp_path / "mx.yaml"
    spec.write_text(
        "defaults: [{model: mixtral-8x7b}, {cluster: dgx-h100}, _self_]\n"
        "name: mx\nmodel: {seq_length: 32768}\ncluster: {num_nodes: 2}\n"
        "training: {global_batch_size: 64, train_iters: 100}\n"
    )
    res = plan_layouts(spec, top=1)
    pick = res.planned[0].spec
    assert pick.parallel.tp > 1 and pick.parallel.etp == 1
    out = tmp_path / "out.yaml"
    applied = applied_text(spec, [], pick, out)
    assert applied.note == "" and applied.text.startswith("defaults: [{model: mixtral-8x7b}")
    assert "etp: 1" in applied.text and "parallel.etp" in applied.changed
    out.write_text(applied.text)
    assert _resolved(out)["parallel"]["etp"] == 1


EMPTY_PARALLEL = """\
# my job: the planner picks the layout
defaults:
  - model: llama3-70b
  - cluster: dgx-h100
  - _self_
name: pl4   # the name
cluster:
  num_nodes: 8   # eight nodes
parallel:
training:
  global_batch_size: 512
  micro_batch_size: 1
"""


def test_apply_fills_an_empty_section_with_every_planned_key(tmp_path):
    """``parallel:`` with no value and a plan that sets tp and pp: each key replaced the same
    empty value (``{tp: 8} {pp: 2}``), the edit failed and --apply SPEC overwrote the commented
    spec with the resolved dump (trial 13). Now one flow mapping fills it, comments kept."""
    spec = tmp_path / "s.yaml"
    spec.write_text(EMPTY_PARALLEL)
    best = plan_layouts(spec, ["parallel.pp=2"], top=1).planned[0].spec
    applied = applied_text(spec, ["parallel.pp=2"], best, spec)
    assert applied.note == ""
    assert "# my job: the planner picks the layout" in applied.text
    assert "  num_nodes: 8   # eight nodes" in applied.text
    line = next(ln for ln in applied.text.splitlines() if ln.startswith("parallel:"))
    assert line.startswith("parallel: {") and "pp: 2" in line
    out = tmp_path / "o.yaml"
    out.write_text(applied.text)
    assert _leaves_of(_resolved(out)) == _leaves_of(spec_to_dict(best))


def test_apply_in_place_never_replaces_the_spec_with_the_resolved_dump(tmp_path):
    """When only the complete resolved spec would do (here: the spec is one flow mapping, which
    the editor does not edit), --apply SPEC leaves SPEC as it is and says how to get the dump
    (exit 2); --apply NEW.yaml writes the dump there."""
    spec = tmp_path / "s.yaml"
    text = (
        "{defaults: [{model: llama2-7b}, {cluster: dgx-a100-80g}, _self_], name: flow, "
        "cluster: {num_nodes: 1}, training: {global_batch_size: 64}}\n"
    )
    spec.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "plan", str(spec), "--apply", str(spec)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr
    assert "is left as it is: pass --apply NEW.yaml" in proc.stderr
    assert spec.read_text() == text
    new = tmp_path / "new.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "plan", str(spec), "--apply", str(new)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and new.read_text().startswith("# written by trainc plan")


def test_apply_counts_only_the_keys_it_writes(tmp_path, capsys):
    """ "N key(s) changed" is the number of keys written: the derived keys that follow a written
    one (etp and sequence_parallel from tp) move without being written and are not counted."""
    from trainc.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text(NO_PARALLEL)
    out = tmp_path / "applied.yaml"
    assert main(["plan", str(spec), "--top", "1", "--apply", str(out)]) == 0
    text = out.read_text()
    before, after = _leaves_of(_resolved(spec)), _leaves_of(_resolved(out))
    moved = {k for k in after if before.get(k) != after[k]}
    derived = {k for k in moved if k in FILLED_FROM}
    assert {"parallel.etp", "parallel.sequence_parallel"} <= derived
    assert not any(k.rsplit(".", 1)[1] + ":" in text for k in derived)
    written = sorted(moved - derived)
    assert all(k.rsplit(".", 1)[1] + ":" in text for k in written)
    assert f"({len(written)} key(s) changed)" in capsys.readouterr().out
