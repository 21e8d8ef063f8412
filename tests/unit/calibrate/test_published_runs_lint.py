"""No false alarms: every published run in the repo's tables lints without an error diagnostic.

The tables (``bench/published_runs.csv``, the table the time model is fitted on, sources in
``bench/published_runs.md``; ``bench/heldout_runs.csv``, ``bench/validation_nvidia.csv``,
``bench/validation_papers.csv``) hold runs that really ran; each row is converted to a spec by
:mod:`trainc.calibrate.published` (the one converter) and goes through the lint passes
(normalize .. check_fit, no emission). A row that gets an error today is a strict xfail naming
the rule ids it gets and why: when the rule (or the estimate) is fixed the test passes, the
strict xfail fails, and the row leaves :data:`KNOWN`. A row that gets a *different* error fails.

The repo carries its own data: no file of bench/, tests/, trainc/, scripts/, docs/ or README
reads the shared reference folder outside the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trainc.calibrate.published import load_rows, row_to_spec_reason
from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import State, run_passes

ROOT = Path(__file__).resolve().parents[3]
TABLES = (
    "published_runs.csv",
    "heldout_runs.csv",
    "validation_nvidia.csv",
    "validation_papers.csv",
)

_MEM = (
    "TRC401",
    "memory estimate exceeds the GPU for a run that ran (the recipes' recompute / "
    "offload settings are not in the table, or the activation estimate is high)",
)
_MLA_FSDP = (
    "TRC344",
    "DeepSeek-V3 under NeMo AutoModel's FSDP2 (HF model code): engine=fsdp "
    "builds grouped-query attention only (no MLA), and torchtitan 0.3.0's MoE has no "
    "seq_aux_loss (its balancing is the auxiliary-loss-free expert bias)",
)
#: (table, CSV line) -> (the error rule ids it gets today, why). Lines count the header as 1.
KNOWN: dict[tuple[str, int], tuple[str, str]] = {
    **{("published_runs.csv", n): _MEM for n in (11, 49, 58, 70, 76, 81, 82, 83)},
    ("published_runs.csv", 86): (
        "TRC104",
        "DeepSeek-V3 tokendrop on 256 GB200 with pp 8 x ep 64: "
        "world 256 is not a multiple of etp*ep*pp = 512 as converted "
        "(the published EP folding needs checking against the recipe)",
    ),
    **{("heldout_runs.csv", n): _MEM for n in (2,)},
    **{("heldout_runs.csv", n): _MLA_FSDP for n in (175, 176)},
    ("heldout_runs.csv", 178): (
        "TRC401",
        "GPT-OSS-120B, FSDP2 + EP 64 on 64 GPUs: efsdp = 64 / 64 "
        "= 1, so each rank keeps its 2 experts per layer unsharded "
        "(34 GiB of states), and 54 GiB of activations are estimated "
        "without recompute (mbs 2, seq 4096; its sliding-window "
        "attention layers are not modelled)",
    ),
    **{("validation_nvidia.csv", n): _MEM for n in (34, 36, 95)},
    **{
        ("validation_nvidia.csv", n): (
            "TRC214",
            "NeMo long-sequence table: the printed batch "
            "(read as global batch) does not divide dp derived from "
            "the printed GPU count (the table's DP is doubtful)",
        )
        for n in (118, 119)
    },
    ("validation_papers.csv", 62): (
        "TRC344",
        "OPT-175B (metaseq FSDP + Megatron TP 8) is refused: "
        "the FSDP2 worker's TP plan has no tied embedding",
    ),
    ("validation_papers.csv", 65): _MEM,
}


class KnownFalseAlarm(Exception):
    """The row got exactly the errors :data:`KNOWN` lists for it."""


def _rows() -> list[object]:
    out = []
    for table in TABLES:
        for i, row in enumerate(load_rows(ROOT / "bench" / table)):
            line = i + 2
            known = KNOWN.get((table, line))
            marks = (
                [
                    pytest.mark.xfail(
                        raises=KnownFalseAlarm, strict=True, reason=f"{known[0]}: {known[1]}"
                    )
                ]
                if known
                else []
            )
            out.append(
                pytest.param(table, line, row, id=f"{table}:{line}:{row['model']}", marks=marks)
            )
    return out


def _errors(spec: dict[str, object], tmp_path: Path) -> list[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_spec(path)
    diags = list(loaded.diagnostics)
    if loaded.spec is not None:
        st = run_passes(
            State(spec=loaded.spec, where=loaded.where, suggest=False), stop_after="check_fit"
        )
        diags += list(st.diagnostics)
    return [f"{d.rule.id} {d.message}" for d in diags if d.is_error]


@pytest.mark.parametrize(("table", "line", "row"), _rows())
def test_published_run_gets_no_error(table, line, row, tmp_path):
    spec, _why = row_to_spec_reason(row)
    if spec is None:  # the converter cannot build it (an unknown GPU, no layers): not linted
        return
    errors = _errors(spec, tmp_path)
    known = KNOWN.get((table, line))
    if known and errors and {e.split()[0] for e in errors} == set(known[0].split()):
        raise KnownFalseAlarm("; ".join(errors))
    assert errors == []


def test_every_known_false_alarm_names_a_row():
    lines = {t: sum(1 for _ in load_rows(ROOT / "bench" / t)) + 1 for t in TABLES}
    assert all(t in lines and 2 <= n <= lines[t] for t, n in KNOWN)


def test_the_published_tables_are_in_the_repo_with_their_sources():
    table = ROOT / "bench" / "published_runs.csv"
    rows = load_rows(table)
    assert len(rows) == 126 and all(r["source"] for r in rows)
    sources = (ROOT / "bench" / "published_runs.md").read_text()
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["source"].split()[0]] = counts.get(r["source"].split()[0], 0) + 1
    assert counts == {
        "NVIDIA-NeMo/Megatron-Bridge": 102,
        "NVIDIA/NeMo": 21,
        "NVIDIA/Megatron-LM": 3,
    }
    for n, src in (
        (102, "NVIDIA-NeMo/Megatron-Bridge"),
        (12, "NVIDIA/NeMo"),
        (9, "NVIDIA/NeMo"),
        (3, "NVIDIA/Megatron-LM"),
    ):
        assert re.search(rf"^\| {n} \| {re.escape(src)} ", sources, re.M)
    import bench.fidelity as fidelity
    import bench.planner_fidelity as planner_fidelity

    assert table == fidelity.DEFAULT_CSV
    assert table == planner_fidelity.DEFAULT_CSV


def test_no_repo_file_reads_the_shared_folder_outside_the_checkout():
    # the failure-report corpus (tests/test_bug_cases.py and its expectations / docs) is moved
    # into the repo separately
    skip = {
        "tests/test_bug_cases.py",
        "tests/specs/bug_cases/expectations.yaml",
        "docs/bug_cases.md",
        "tests/unit/calibrate/test_published_runs_lint.py",
    }
    pat = re.compile(r"/work/|\.\./shared|shared/(calibration|reference|cases)")
    bad = []
    for top in ("bench", "tests", "trainc", "scripts", "docs", "examples", "README.md"):
        base = ROOT / top
        for p in [base] if base.is_file() else base.rglob("*"):
            rel = p.relative_to(ROOT).as_posix()
            if (
                not p.is_file()
                or rel in skip
                or p.suffix not in (".py", ".md", ".yaml", ".yml", ".txt", ".toml")
            ):
                continue
            bad += [
                f"{rel}:{i}"
                for i, ln in enumerate(p.read_text(errors="replace").splitlines(), 1)
                if pat.search(ln)
            ]
    assert bad == []
