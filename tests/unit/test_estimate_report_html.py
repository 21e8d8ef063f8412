"""report.html: well-formed, self-contained, and its timeline reproduces the bubble formula."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from trainc.compiler.emit.report_html import report_html
from trainc.compiler.estimate.bubble import bubble_fraction
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.estimate.schedule import simulate

from test_estimate_memory import make_spec  # noqa: E402

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
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(mine, mine[1:], strict=False))


@pytest.mark.parametrize("kw", [{}, {"parallel__vpp": 2, "training__global_batch_size": 16},
                                {"parallel__pp": 1}])
def test_report_html_is_wellformed_and_self_contained(kw):
    nspec, _, ir = plan_and_estimate(make_spec(**kw))
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
    subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}",
                    "--hide-scrollbars", "--window-size=1100,1400", f"--screenshot={shot}",
                    page.as_uri()], check=True, capture_output=True, timeout=90)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000  # a blank page is a few KB; tables and SVG bars make it larger
