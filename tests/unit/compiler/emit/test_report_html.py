"""report.html: well-formed, self-contained, and its timeline reproduces the bubble formula."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from tests.support.estimate import make_spec
from trainc.compiler.emit.report_html import report_html
from trainc.compiler.estimate.bubble import bubble_fraction
from trainc.compiler.estimate.schedule import simulate
from trainc.compiler.pipeline import plan_and_estimate

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 16, 1), (4, 8, 2), (8, 16, 4), (4, 2, 1)])
def test_simulated_schedule_matches_bubble_formula(p, m, v):
    ops = simulate(p, m, v)
    assert len(ops) == 2 * p * m * v
    makespan = max(o.end for o in ops)
    busy = m * 3.0  # per stage: m forwards (1) + m backwards (2)
    assert 1 - busy / makespan == pytest.approx(bubble_fraction(p, m, v))
    for s in range(p):  # a stage never runs two ops at once
        mine = sorted((o.start, o.end) for o in ops if o.stage == s)
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(mine))


@pytest.mark.parametrize(
    "kw", [{}, {"parallel__vpp": 2, "training__global_batch_size": 16}, {"parallel__pp": 1}]
)
def test_report_html_is_wellformed_and_self_contained(kw):
    _nspec, _, ir = plan_and_estimate(make_spec(**kw))
    plan = ir.to_json()
    html = report_html(plan)["report.html"]
    assert "<script" not in html and "src=" not in html and "href=" not in html
    root = ET.fromstring(html.split("\n", 1)[1])  # drop the doctype
    svgs = list(root.iter(f"{SVG}svg"))
    assert len(svgs) == 2
    ops = [r for r in svgs[0].iter(f"{SVG}rect") if r.get("class") == "op"]
    d = plan["derived"]
    assert len(ops) % (2 * d["pp"] * d["vpp"]) == 0 and ops
    mem = [r for r in svgs[1].iter(f"{SVG}rect") if r.get("class") == "mem"]
    assert len(mem) == 4 * d["pp"]
    assert "Rank map" in html and "MFU" in html


def test_report_html_needs_estimates():
    assert report_html({"estimates": {}}) == {}


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path):
    """~15 s (browser start): runs with TRAINC_BROWSER_TEST=1 where chromium is installed."""
    import os
    import shutil
    import subprocess

    if os.environ.get("TRAINC_BROWSER_TEST") != "1":
        pytest.skip("set TRAINC_BROWSER_TEST=1 to render report.html in headless chromium")

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    _, _, ir = plan_and_estimate(make_spec(parallel__vpp=2, training__global_batch_size=16))
    plan = ir.to_json()
    page = tmp_path / "report.html"
    page.write_text(report_html(plan)["report.html"])
    shot = tmp_path / "shot.png"
    # The machine has no network: without the background-networking flags chromium keeps
    # retrying connections; a fresh profile keeps runs independent.
    subprocess.run(
        [
            browser,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            "--window-size=1100,1400",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000  # a blank page is a few KB; tables and SVG bars make it larger


def _svg_counts(svg: str) -> tuple[int, int, int, str]:
    root = ET.fromstring(svg)
    rects = list(root.iter(f"{SVG}rect"))
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    ops = [r for r in rects if r.get("class") == "op"]
    return len(ops), len(rects), len(texts), " ".join(texts)


@pytest.mark.parametrize(
    ("p", "m", "v"), [(32, 96, 4), (32, 128, 4), (64, 128, 1), (48, 96, 2), (16, 48, 8)]
)
def test_timeline_draws_what_fits_and_says_what_is_left_out(p, m, v):
    from trainc.compiler.emit.report_html import MAX_OPS, MAX_STAGE_ROWS, timeline_svg

    svg, drawn, note = timeline_svg(p, m, v)
    n_ops, n_rects, n_texts, text = _svg_counts(svg)
    assert n_ops == drawn <= MAX_OPS
    rows = min(p, MAX_STAGE_ROWS)
    assert n_rects == n_ops + rows  # one idle bar per drawn stage
    assert n_texts <= n_ops + rows + 2  # op labels, stage names, the gap line, the legend
    assert note and note in text and f"of {2 * p * m * v} operations shown" in note
    assert "not drawn: time " in note  # a window of the schedule
    if p > MAX_STAGE_ROWS:
        half = MAX_STAGE_ROWS // 2
        assert f"stages {half} to {p - half - 1} ({p - 2 * half} of {p})" in note
        assert f"stage {p - 1}" in text and f"stage {half} " not in text + " "
    # every drawn operation is at least MIN_OP_PX wide before its 0.6 px gap, or cut at the end
    widths = [
        float(r.get("width"))
        for r in ET.fromstring(svg).iter(f"{SVG}rect")
        if r.get("class") == "op"
    ]
    assert sorted(widths)[len(widths) // 10] >= 3.0 - 0.6


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (8, 16, 2), (16, 32, 1)])
def test_small_timelines_are_drawn_whole(p, m, v):
    from trainc.compiler.emit.report_html import timeline_svg

    svg, drawn, note = timeline_svg(p, m, v)
    assert note == "" and drawn == 2 * p * m * v
    assert "not drawn" not in svg


def test_report_html_pp32_vpp4_is_bounded_and_notes_the_window():
    from trainc.compiler.emit.report_html import MAX_OPS

    _, _, ir = plan_and_estimate(
        make_spec(
            gpn=8,
            nodes=16,
            model__num_layers=128,
            parallel__pp=32,
            parallel__vpp=4,
            parallel__tp=4,
            training__global_batch_size=256,
        )
    )
    plan = ir.to_json()
    d = plan["derived"]
    assert (d["pp"], d["vpp"]) == (32, 4)
    html = report_html(plan)["report.html"]
    root = ET.fromstring(html.split("\n", 1)[1])
    svg = next(root.iter(f"{SVG}svg"))
    ops = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "op"]
    assert 0 < len(ops) <= MAX_OPS
    assert len(list(svg.iter())) < 3 * MAX_OPS
    notes = [p.text or "" for p in root.iter("{http://www.w3.org/1999/xhtml}p")]
    assert any("not drawn: time " in n and "operations shown" in n for n in notes)
