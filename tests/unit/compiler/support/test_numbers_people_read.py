"""Floating-point noise never reaches a reader: the bubble's seconds are exactly 0 without a
pipeline (estimate/time.py), every renderer rounds to what it shows (numfmt), and ``diff`` neither
lists values equal as shown nor divides by a base that is zero as shown."""

from __future__ import annotations

import copy
import io
import json

import pytest
from rich.console import Console

from tests.support.emit import compile_case
from trainc.compiler.emit.report import report_text
from trainc.compiler.emit.report_html import report_html
from trainc.compiler.estimate.explain import explain_tables
from trainc.compiler.support.numfmt import fixed, gib, percent, sig
from trainc.ecosystem.diff import change, compare, fmt_value

GIB = 2**30


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (-3.109e-15, 2, "0.00"),
        (-0.004, 2, "0.00"),
        (-0.005001, 2, "-0.01"),
        (0.0, 3, "0.000"),
        (1.7089, 3, "1.709"),
        (-1.7089, 1, "-1.7"),
        (12345.678, 0, "12346"),
    ],
)
def test_fixed_has_no_signed_zero(value, digits, text):
    assert fixed(value, digits) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (-3.109e-15, "0"),
        (3e-13, "0"),
        (-1.11022e-16, "0"),
        (2e-12, "2e-12"),
        (1.70912, "1.709"),
        (-0.25, "-0.25"),
        (0, "0"),
    ],
)
def test_sig_drops_rounding_residues(value, text):
    assert sig(value) == text


def test_percent_and_gib():
    assert percent(-1e-17, 2) == "0.00" and percent(0.27272, 1) == "27.3"
    assert gib(11.2201 * GIB) == "11.22" and gib(1234.5 * GIB) == "1,234.50"
    assert gib(1234.5 * GIB, sep=False) == "1234.50" and gib(-1e-9) == "0.00"


@pytest.mark.parametrize("case", ["env-container", "cpu-shrink-tiny", "mixtral-8x7b-ep8"])
def test_bubble_seconds_is_exact_and_never_negative(case):
    plan, _ = compile_case(case)
    e = plan["estimates"]
    assert e["bubble_seconds"] >= 0.0
    if plan["derived"]["pp"] == 1:
        assert e["pipeline_bubble_fraction"] == 0.0 and e["bubble_seconds"] == 0.0
    else:
        assert e["bubble_seconds"] > 0.0


def _noisy(plan: dict) -> dict:
    """The plan with the residues the estimators used to leave (negative zeros of ~1e-15)."""
    p = copy.deepcopy(plan)
    e = p["estimates"]
    e["bubble_seconds"], e["pipeline_bubble_fraction"] = -3.109e-15, -1e-17
    e["mfu"], e["exposed_comm_seconds"] = -2e-18, -4e-16
    return p


def test_explain_rounds_noise_to_zero():
    plan, _ = compile_case("env-container")
    buf = io.StringIO()
    console = Console(file=buf, width=160)
    for t in explain_tables(_noisy(plan)):
        console.print(t)
    out = buf.getvalue()
    assert "pipeline bubble" in out and "0.00 % (0 s)" in out
    assert "e-1" not in out and "-0.0" not in out and "MFU" in out and "0.0 %" in out


def test_report_md_and_html_round_noise_to_zero():
    plan, files = compile_case("env-container")
    md = report_text(_noisy(plan), sorted(files))
    assert "| pipeline bubble | 0.0% |" in md and "-0.0" not in md
    assert "| MFU (of the BF16 peak) | 0.0% |" in md
    html = report_html(_noisy(plan))["report.html"]
    assert "<td>pipeline bubble</td><td>0.00 % (0 s)</td>" in html
    assert "<td>exposed communication (s)</td><td>0</td>" in html
    assert "e-1" not in html and "-0.0" not in html


def test_report_html_rounds_times_where_read():
    plan, files = compile_case("llama3-8b-pp2-vpp2")
    html = files["report.html"]
    e = plan["estimates"]
    assert f"<td>step time (s)</td><td>{sig(e['step_time_seconds'])}</td>" in html
    assert f"<td>tokens / s</td><td>{e['tokens_per_second']:,.0f}</td>" in html
    assert f"<td>compute (s)</td><td>{sig(e['compute_seconds'])}</td>" in html
    assert repr(e["compute_seconds"]) != sig(e["compute_seconds"])  # 5+ digits in plan.json
    assert f"<td>{e['compute_seconds']!r}</td>" not in html


@pytest.mark.parametrize(
    ("key", "a", "b", "shown"),
    [
        # zero base: no percentage of zero, nor of a rounding residue of either sign
        ("estimates.bubble_seconds", -3.109e-15, 1.709, "new"),
        ("estimates.bubble_seconds", 0.0, 1.709, "new"),
        ("estimates.bubble_seconds", 3e-16, 0.5, "new"),
        ("estimates.mfu", 1e-19, 0.4, "new"),
        ("estimates.flops_per_step", 1e-3, 1e16, "new"),  # a billionth of b
        # equal as shown: no change at all
        ("estimates.memory_bytes.total", int(11.2201 * GIB), int(11.2203 * GIB), ""),
        ("estimates.bubble_seconds", -3e-15, 0.0, ""),
        ("estimates.pipeline_bubble_fraction", 0.12501, 0.12504, ""),
        # real changes, small ones included
        ("estimates.step_time_seconds", 2.0, 3.0, "+50.0%"),
        ("estimates.step_time_seconds", 100.0, 100.01, "+0.01%"),
        ("estimates.step_time_seconds", 2.0, 1.0, "-50.0%"),
        ("derived.dp", 2, 3, "+50.0%"),
        ("estimates.step_time_seconds", 1.0, 0.0, "-100.0%"),
    ],
)
def test_diff_change(key, a, b, shown):
    assert change(a, b, key) == shown


def test_diff_shows_noise_as_zero():
    assert fmt_value("estimates.bubble_seconds", -3.109e-15) == "0.000 s"
    assert fmt_value("estimates.pipeline_bubble_fraction", -1e-17) == "0.0%"
    assert fmt_value("estimates.memory_bytes.total", -1) == "0.00 GiB"
    assert fmt_value("estimates.flops_per_step", -2e-15) == "0"
    assert fmt_value("estimates.flops_per_step", 1.234567e15) == "1.235e+15"
    assert fmt_value("estimates.tokens_per_second", 153024.4) == "153,024"


def test_diff_lists_only_values_that_differ_as_shown():
    a = {
        "spec": {"training": {"lr": 1e-4}},
        "derived": {"dp": 2},
        "estimates": {
            "memory_bytes": {"total": int(11.2201 * GIB)},
            "bubble_seconds": -3e-15,
            "step_time_seconds": 1.5,
        },
    }
    b = {
        "spec": {"training": {"lr": 1.00001e-4}},
        "derived": {"dp": 2},
        "estimates": {
            "memory_bytes": {"total": int(11.2203 * GIB)},
            "bubble_seconds": 0.0,
            "step_time_seconds": 1.6,
        },
    }
    diffs, same = compare(a, b)
    # a spec value the user changed is a difference even past the shown digits
    assert [d["key"] for d in diffs] == ["training.lr", "estimates.step_time_seconds"]
    assert "estimates.memory_bytes.total" in same and "estimates.bubble_seconds" in same


def test_diff_command_on_a_pipeline_change(capsys):
    from tests.support.emit import CASES_DIR
    from trainc.cli import main

    spec = str(CASES_DIR / "env-container" / "spec.yaml")
    assert main(["diff", spec, spec, "parallel.pp=2", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    bub = [d for d in out["differences"] if d["key"] == "estimates.bubble_seconds"]
    assert bub and bub[0]["a"] == 0.0 and bub[0]["b"] > 0
    assert main(["diff", spec, spec, "parallel.pp=2"]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if "estimates.bubble_seconds" in line)
    assert "0.000 s" in row and "new" in row and "-0.000" not in text and "%" not in row
