"""The ``trainc plan`` table: dominated finalists hidden and counted, every layout axis shown (two
rows never read the same), and the terminal's width kept (80, 100, 120 columns, a pipe)."""

from __future__ import annotations

import copy
import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from trainc.compiler.load import load_spec
from trainc.compiler.normalize import normalize
from trainc.planner import Planned, PlanResult, _spec_dp, plan_layouts
from trainc.planner.table import DEFAULT_WIDTH, dominated_by, render

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "llama2-70b-dgx-a100.yaml"


@pytest.fixture(scope="module")
def res() -> PlanResult:
    r = plan_layouts(EXAMPLE, top=8)
    assert len(r.planned) == 8
    return r


def _fake(res: PlanResult, step_mem: list[tuple[float, float]], **cand) -> PlanResult:
    """Copies of the first finalist with the given (step seconds, GiB) and candidate fields."""
    out = copy.copy(res)
    base = res.planned[0]
    out.planned = []
    for i, (t, m) in enumerate(step_mem):
        est = {**base.estimates, "step_time_seconds": t, "memory_bytes": {"total": m * 2**30}}
        c = dataclasses.replace(base.candidate, **{k: v[i] for k, v in cand.items()})
        out.planned.append(Planned(c, base.spec, est, f"reason {i}"))
    return out


@pytest.mark.parametrize(
    ("step_mem", "expected"),
    [
        ([(1.0, 10), (1.0, 10)], [None, None]),  # equal on both: two real choices
        ([(1.0, 20), (2.0, 10)], [None, None]),  # faster but larger: a trade-off
        ([(1.0, 10), (1.0, 11)], [None, 0]),  # same time, more memory
        ([(1.0, 10), (1.5, 10)], [None, 0]),  # slower, same memory
        ([(1.0, 10), (1.5, 12)], [None, 0]),  # worse on both
        ([(1.0, 10), (1.1, 11), (1.2, 12)], [None, 0, 0]),  # a chain: both beaten by the first
        ([(1.0, 30), (1.1, 20), (1.2, 25), (1.3, 10)], [None, None, 1, None]),
    ],
)
def test_dominance(res, step_mem, expected):
    assert dominated_by(_fake(res, step_mem).planned) == expected


def _text(res: PlanResult, width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width)
    for item in render(res, width):
        console.print(item)
    return buf.getvalue()


def test_dominated_rows_are_hidden_and_counted(res):
    beaten = dominated_by(res.planned)
    hidden = [i for i, b in enumerate(beaten) if b is not None]
    assert hidden and beaten[0] is None  # the example has dominated finalists; #1 never is
    text = _text(res, 200)
    rows = [ln.split()[0] for ln in text.splitlines() if ln[:1].isdigit() and "hidden" not in ln]
    assert rows == [str(i + 1) for i, b in enumerate(beaten) if b is None]
    assert f"{len(hidden)} dominated layout(s) hidden" in text
    for i in hidden:
        assert f"#{i + 1} by #{beaten[i] + 1}" in text


def test_rows_that_differ_in_sp_or_etp_read_differently(res):
    fake = _fake(res, [(1.0, 10), (1.0, 10), (1.0, 10)], sp=[True, False, True], etp=[8, 8, 1])
    text = _text(fake, 200)
    head = next(ln for ln in text.splitlines() if ln.startswith("#"))
    assert head.split()[:12] == [
        "#",
        "tp",
        "sp",
        "pp",
        "vpp",
        "cp",
        "ep",
        "etp",
        "dp",
        "mbs",
        "recompute",
        "zero",
    ]
    rows = [ln.split()[:12] for ln in text.splitlines() if ln[:1].isdigit()]
    assert len(rows) == 3 and len({tuple(r[1:]) for r in rows}) == 3
    assert [r[2] for r in rows] == ["yes", "no", "yes"] and [r[7] for r in rows] == ["8", "8", "1"]


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_table_fits_the_width(res, width):
    text = _text(res, width)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width
    shown = [i for i, b in enumerate(dominated_by(res.planned)) if b is None]
    assert [ln.split()[0] for ln in lines if ln[:1].isdigit() and "hidden" not in ln] == [
        str(i + 1) for i in shown
    ]
    # columns equal in every row are said once when they had to leave the table
    if "every row:" in text:
        assert "tp 8" in text and "recompute selective" in text
        assert " tp " not in next(ln for ln in lines if ln.startswith("#"))
    assert "step s" in text and "MFU" in text


@pytest.mark.parametrize(
    ("env", "limit"), [({"COLUMNS": "100"}, 100), ({"COLUMNS": "80"}, 80), ({}, DEFAULT_WIDTH)]
)
def test_cli_table_width(env, limit):
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "plan", str(EXAMPLE), "--top", "8"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= limit
    assert max(len(ln) for ln in lines) > limit - 12  # it uses the width it has
    assert "dominated layout(s) hidden" in proc.stdout


def _rows(text: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln[:1].isdigit() and "hidden" not in ln]


@pytest.mark.parametrize(
    ("step_mem", "beaten", "rows", "hidden"),
    [
        # #2 is faster and smaller than #1 (the simpler layout ranked first within the band)
        ([(1.05, 12), (1.0, 10), (1.2, 9)], [1, None, None], ["1", "2", "3"], None),
        # #3 is beaten by #1 and #2: hidden (by #2, the undominated one); #1 stays
        (
            [(1.05, 12), (1.0, 10), (1.1, 13)],
            [1, None, 1],
            ["1", "2"],
            "1 dominated layout(s) hidden, each no faster and no smaller than one shown (#3 by #2)",
        ),
    ],
)
def test_the_top_pick_is_the_first_row_even_when_dominated(res, step_mem, beaten, rows, hidden):
    """The ranking puts the simplest layout within the error band first; when a faster, smaller
    finalist beats it the table used to hide the pick the text calls the top pick."""
    fake = _fake(res, step_mem)
    fake.error_band = 0.1
    assert dominated_by(fake.planned) == beaten
    text = _text(fake, 200)
    assert [r[0] for r in _rows(text)] == rows
    assert (
        "#1, the top pick, is shown although #2 is no slower and no larger: within 10% of "
        "the fastest the simpler layout ranks first"
    ) in text
    if hidden is None:
        assert "hidden" not in text
    else:
        assert hidden in text


P70 = """\
defaults: [{model: llama2-70b}, {cluster: dgx-a100-80g}, _self_]
name: p70
cluster: {num_nodes: 8}
training: {global_batch_size: 512}
"""


def test_real_plan_whose_top_pick_is_dominated_shows_it_first(tmp_path):
    """Llama-2-70B on 64 A100, global batch 512, no layout fixed: #1 (tp 8 x pp 2: the smaller
    model-parallel group within the band) needs more memory than #2 (tp 4 x pp 4) and is
    slower; the table's first row is still #1, the layout the line under the table compares and
    --apply writes. (Session 13's tile overhead moved the case from global batch 1024.)"""
    path = tmp_path / "p70.yaml"
    path.write_text(P70)
    r = plan_layouts(path, top=5)
    beaten = dominated_by(r.planned)
    assert beaten[0] is not None, "the case no longer has a dominated top pick"
    text = _text(r, 250)
    head = next(ln for ln in text.splitlines() if ln.startswith("#"))
    assert head.split()[:4] == ["#", "tp", "sp", "pp"]
    first = _rows(text)[0]
    pick = r.planned[0]
    assert first[:4] == ["1", str(pick.candidate.tp), "yes", str(pick.candidate.pp)]
    gib = f"{pick.estimates['memory_bytes']['total'] / 2**30:.1f}"
    assert gib in first
    assert f"the top pick needs {gib} GiB/GPU" in r.versus_spec
    assert f"#1, the top pick, is shown although #{beaten[0] + 1} is no slower" in text


def test_versus_spec_names_the_derived_dp_when_the_spec_leaves_it_implicit(tmp_path):
    """Llama-2-7B on 24 A100, global batch 256: the spec's own layout (tp 1, dp implicit: 24)
    breaks TRC214; the line under the table used to print dp=None."""
    path = tmp_path / "dp24.yaml"
    path.write_text(
        "defaults: [{model: llama2-7b}, {cluster: dgx-a100-80g}, _self_]\n"
        "name: d\ncluster: {num_nodes: 3}\ntraining: {global_batch_size: 256}\n"
    )
    r = plan_layouts(path, top=1)
    assert r.versus_spec == (
        "the spec's own layout (tp=1 pp=1 vpp=1 cp=1 ep=1 dp=24 mbs=1 "
        "recompute=selective zero=1) does not compile (TRC214)"
    )
    assert r.versus_spec in _text(r, 200).replace("\n", " ")


@pytest.mark.parametrize(
    ("parallel", "dp"),
    [
        ("{tp: 2}", "8"),  # derived: 16 / 2
        ("{tp: 2, pp: 3}", "16/6"),  # does not divide (TRC101): the fraction, not None
        ("{tp: 2, dp: 4}", "4"),  # as the spec sets it (TRC102 reports the mismatch)
    ],
)
def test_spec_dp_text(tmp_path, parallel, dp):
    path = tmp_path / "s.yaml"
    path.write_text(
        "defaults: [{model: llama2-7b}, {cluster: dgx-a100-80g}, _self_]\n"
        f"name: d\ncluster: {{num_nodes: 2}}\nparallel: {parallel}\n"
        "training: {global_batch_size: 256}\n"
    )
    loaded = load_spec(path)
    assert loaded.spec is not None
    assert _spec_dp(normalize(loaded.spec)) == dp


def test_a_memory_tight_top_pick_is_said_under_the_table(res):
    """Every finalist of Llama-3-70B on 2 nodes estimated 77-82 GiB against 76 GiB (TRC403's
    margin) and the table only called them 'fit'; now a line says the pick is memory-tight."""
    budget = float(res.planned[0].estimates["memory_budget_bytes"]) / 2**30
    fake = _fake(res, [(1.0, budget * 1.01), (1.05, budget * 0.5)])
    fake.error_band = 0.1
    for p in fake.planned:
        p.estimates["memory_budget_bytes"] = budget * 2**30
    text = " ".join(_text(fake, 200).split())
    assert (
        f"#1 is memory-tight: {budget * 1.01:.1f} of {budget:.1f} GiB/GPU, within the "
        "memory model's margin (TRC403: it may run out of memory); 1 of the 2 listed "
        "layouts are tight - measure one step, or add GPUs"
    ) in text
    roomy = _fake(res, [(1.0, budget * 0.5)])
    roomy.error_band = 0.1
    assert "memory-tight" not in _text(roomy, 200)


def test_an_fsdp_plan_shows_no_zero_stage_and_plain_full_recompute(tmp_path):
    """engine=fsdp ignores zero_stage (TRC344): the table and the versus-spec line showed
    'zero 1'; full recompute of every layer read 'full uniform 1'."""
    spec = tmp_path / "f.yaml"
    spec.write_text(
        "defaults: [{model: llama3-8b}, {cluster: dgx-h100}, _self_]\nname: f\n"
        "engine: fsdp\ncluster: {num_nodes: 2}\nparallel: {tp: 2}\n"
        "training: {global_batch_size: 256, micro_batch_size: 2, recompute: full}\n"
        "launch: {entrypoint: torchtitan}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "plan", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "zero" not in proc.stdout and "uniform" not in proc.stdout, proc.stdout
    assert "recompute=full) is the top pick" in proc.stdout
