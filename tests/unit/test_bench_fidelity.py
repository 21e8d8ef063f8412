"""bench/fidelity.py's command line: --help describes every option, and a missing published-runs
CSV ends it with exit status 2 and one line naming the path and how to pass another (no
traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "fidelity.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


@pytest.mark.parametrize("args", [[], ["--rows"], ["--band"], ["--band", "--rows"]])
def test_missing_csv_exits_2_with_one_line(tmp_path, args):
    missing = tmp_path / "nowhere" / "published_runs.csv"
    proc = _run(*args, str(missing))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr == (
        f"bench/fidelity.py: published-runs CSV {missing}: no such file; "
        "pass another as the CSV argument (.venv/bin/python "
        "bench/fidelity.py PATH.csv, see --help)\n"
    )


def test_a_folder_is_not_a_csv(tmp_path):
    proc = _run(str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"bench/fidelity.py: published-runs CSV {tmp_path}: not a file; pass another as the "
        "CSV argument (.venv/bin/python bench/fidelity.py PATH.csv, see --help)"
    ]


def test_help_describes_every_option():
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert text.startswith(
        "usage: bench/fidelity.py [-h] [--rows] [--planner] "
        "[--cluster KEY=VALUE] [--all] [--band] [CSV ...] "
    )
    for expected in (
        "CSV the published-runs table to compile",
        "Default: ",
        "--rows also print every row",
        "--planner also report the planner's top-5 rate",
        "--band print only the step-time band",
        "--all compile every published table in the repo",
        "--cluster KEY=VALUE set a cluster key on every row (YAML value)",
    ):
        assert expected in text


def test_all_reports_every_table_then_pooled():
    proc = _run("--all")
    assert proc.returncode == 0, proc.stderr
    heads = [ln for ln in proc.stdout.splitlines() if ln.startswith("== ")]
    assert heads == [
        "== bench/published_runs.csv",
        "== bench/heldout_runs.csv",
        "== bench/validation_nvidia.csv",
        "== bench/validation_papers.csv",
        "== every table pooled",
    ]
    pooled = proc.stdout.split("== every table pooled")[1]
    subsets = {ln.split("  ")[0] for ln in pooled.splitlines() if " | " in ln}
    assert {
        "all",
        "engine=megatron",
        "engine=fsdp",
        "short step (<1 s)",
        "MoE",
        "FP8/FP4",
        "gb300",
    } <= subsets


def test_two_tables_without_band_is_a_usage_error(tmp_path):
    proc = _run(str(tmp_path / "a.csv"), str(tmp_path / "b.csv"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "bench/fidelity.py: error: one CSV at a time (several only with --band)"
    )
