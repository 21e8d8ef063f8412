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

from trainc.planner import Planned, PlanResult, plan_layouts
from trainc.planner.table import DEFAULT_WIDTH, dominated_by, render

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize(("step_mem", "expected"), [
    ([(1.0, 10), (1.0, 10)], [None, None]),            # equal on both: two real choices
    ([(1.0, 20), (2.0, 10)], [None, None]),            # faster but larger: a trade-off
    ([(1.0, 10), (1.0, 11)], [None, 0]),               # same time, more memory
    ([(1.0, 10), (1.5, 10)], [None, 0]),               # slower, same memory
    ([(1.0, 10), (1.5, 12)], [None, 0]),               # worse on both
    ([(1.0, 10), (1.1, 11), (1.2, 12)], [None, 0, 0]),  # a chain: both beaten by the first
    ([(1.0, 30), (1.1, 20), (1.2, 25), (1.3, 10)], [None, None, 1, None]),
])
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
    fake = _fake(res, [(1.0, 10), (1.0, 10), (1.0, 10)], sp=[True, False, True],
                 etp=[8, 8, 1])
    text = _text(fake, 200)
    head = next(ln for ln in text.splitlines() if ln.startswith("#"))
    assert head.split()[:12] == ["#", "tp", "sp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs",
                                 "recompute", "zero"]
    rows = [ln.split()[:12] for ln in text.splitlines() if ln[:1].isdigit()]
    assert len(rows) == 3 and len({tuple(r[1:]) for r in rows}) == 3
    assert [r[2] for r in rows] == ["yes", "no", "yes"] and [r[7] for r in rows] == ["8", "8", "1"]


@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_table_fits_the_width(res, width):
    text = _text(res, width)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width
    shown = [i for i, b in enumerate(dominated_by(res.planned)) if b is None]
    assert [ln.split()[0] for ln in lines if ln[:1].isdigit() and "hidden" not in ln] \
        == [str(i + 1) for i in shown]
    # columns equal in every row are said once when they had to leave the table
    if "every row:" in text:
        assert "tp 8" in text and "recompute selective" in text
        assert " tp " not in next(ln for ln in lines if ln.startswith("#"))
    assert "step s" in text and "MFU" in text


@pytest.mark.parametrize(("env", "limit"), [({"COLUMNS": "100"}, 100), ({"COLUMNS": "80"}, 80),
                                            ({}, DEFAULT_WIDTH)])
def test_cli_table_width(env, limit):
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "trainc", "plan", str(EXAMPLE), "--top", "8"],
                          capture_output=True, text=True, timeout=120, env={**base, **env},
                          check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= limit
    assert max(len(ln) for ln in lines) > limit - 12  # it uses the width it has
    assert "dominated layout(s) hidden" in proc.stdout
