"""The failure corpus (tests/cases/*.yaml, format in tests/cases/README.md): public failure
reports, each linted through ``trainc lint``'s path (compile_spec without emitting files).

For each expressible case: the report's spec gets the expected verdict on the expected rule and
key with a fix, and its corrected control lints with no error. A case trainc gets wrong today
carries ``known_miss`` and is xfail(strict=True): when a rule change makes it pass, the test
fails until the marker is removed. Inexpressible cases are counted in docs/failure_corpus.md.

Regenerate the counts table of the doc with
``PYTHONPATH=. python tests/test_failure_corpus.py --write-doc``.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kit import verdict as _verdict

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
DOC = ROOT / "docs" / "failure_corpus.md"

AREAS = ("layout", "precision", "moe", "data", "checkpoint", "versions", "launcher", "memory")
ENGINES = ("megatron", "deepspeed", "fsdp", "any")
OUTCOMES = ("crash", "hang", "oom", "wrong", "wasted")
VERDICTS = ("reject", "warn", "ok")
#: Warnings every spec of an engine gets, whatever the case is about (TRC317: DeepSpeed's lr
#: scheduler shifted against Megatron-Core's); a case whose rule is one of them still sees it.
UNRELATED = frozenset({"TRC317", "TRC333"})


def load_cases() -> list[dict[str, Any]]:
    """Every case file, sorted by id."""
    out = []
    for path in sorted(CASES.glob("*.yaml")):
        case = yaml.safe_load(path.read_text())
        case["_file"] = path.name
        out.append(case)
    return out


ALL = load_cases()
TESTED = [c for c in ALL if c.get("expressible", True)]


def status(case: dict[str, Any]) -> str:
    """right | known miss | inexpressible."""
    if not case.get("expressible", True):
        return "inexpressible"
    miss = case.get("known_miss") or case.get("control_known_miss")
    return "known miss" if miss else "right"


def lint(tmp_path: Path, spec: dict[str, Any], overrides: list[str]) -> list[Any]:
    """The diagnostics ``trainc lint`` prints for ``spec`` with ``overrides``."""
    from trainc.compiler.pipeline import compile_spec

    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    diags = compile_spec(path, overrides, emit_files=False).diagnostics
    return [d for d in diags if d.rule.id not in UNRELATED or d.is_error]


def _param(case: dict[str, Any]) -> Any:
    marks = []
    if case.get("known_miss"):
        marks.append(pytest.mark.xfail(strict=True, reason=str(case["known_miss"])))
    return pytest.param(case, id=case["id"], marks=marks)


def test_case_files_are_well_formed() -> None:
    ids = [c["id"] for c in ALL]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for c in ALL:
        assert c["_file"] == f"{c['id']}.yaml", c["_file"]
        assert re.match(r"https://(github\.com|lists\.|bugs\.|discuss\.|forums\.)", c["source"]), c[
            "id"
        ]
        assert re.match(r"20(2[3-6])-\d\d-\d\d$", str(c["date"])), c["id"]
        assert c["area"] in AREAS and c["engine"] in ENGINES and c["outcome"] in OUTCOMES, c["id"]
        assert len(c["summary"].split()) >= 8, c["id"]
        assert c.get("fix"), c["id"]
        if not c.get("expressible", True):
            assert c.get("missing") and "spec" not in c and "expect" not in c, c["id"]
            continue
        exp = c["expect"]
        assert exp["verdict"] in VERDICTS, c["id"]
        if exp["verdict"] != "ok":
            assert exp.get("rule") and exp.get("key"), c["id"]
        assert "control" in c, c["id"]


@pytest.mark.parametrize("case", [_param(c) for c in TESTED])
def test_case_verdict(case: dict[str, Any], tmp_path: Path) -> None:
    exp = case["expect"]
    diags = lint(tmp_path, case["spec"], case.get("overrides", []))
    shown = [(d.rule.id, d.severity.value, d.key, d.message) for d in diags]
    assert _verdict(diags) == exp["verdict"], shown
    if exp["verdict"] == "ok":
        return
    sev = "error" if exp["verdict"] == "reject" else "warning"
    hits = [
        d
        for d in diags
        if d.rule.id == exp["rule"] and d.key == exp["key"] and d.severity.value == sev
    ]
    assert hits, shown
    assert hits[0].fix, "a finding without a fix"
    for text in exp.get("fix_contains", []):
        assert text in hits[0].fix, hits[0].fix
    for text in exp.get("fix_excludes", []):  # advice the report shows to be wrong
        assert text not in hits[0].fix, hits[0].fix


def _control(case: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ctl = case["control"]
    if isinstance(ctl, list):
        return case["spec"], ctl
    return ctl.get("spec", case["spec"]), ctl.get("overrides", [])


def _control_param(case: dict[str, Any]) -> Any:
    marks = []
    if case.get("control_known_miss"):  # a false alarm on the corrected job
        marks.append(pytest.mark.xfail(strict=True, reason=str(case["control_known_miss"])))
    return pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", [_control_param(c) for c in TESTED])
def test_control_lints_clean(case: dict[str, Any], tmp_path: Path) -> None:
    spec, overrides = _control(case)
    diags = lint(tmp_path, spec, overrides)
    errors = [(d.rule.id, d.key, d.message) for d in diags if d.is_error]
    assert not errors, errors


# --- the counts in docs/failure_corpus.md ------------------------------------------------------

BEGIN, END = "<!-- counts:begin -->", "<!-- counts:end -->"


def counts_table(cases: list[dict[str, Any]]) -> str:
    """The markdown tables of docs/failure_corpus.md: cases by area and by engine, each split
    into right / known miss / inexpressible."""
    cols = ("right", "known miss", "inexpressible")

    def table(field: str, values: tuple[str, ...]) -> list[str]:
        by: dict[str, Counter[str]] = {v: Counter() for v in values}
        for c in cases:
            by[c[field]][status(c)] += 1
        rows = [f"| {field} | cases | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for v in values:
            n = sum(by[v].values())
            if n:
                rows.append(f"| {v} | {n} | " + " | ".join(str(by[v][k]) for k in cols) + " |")
        tot = Counter(status(c) for c in cases)
        rows.append(f"| **all** | {len(cases)} | " + " | ".join(str(tot[k]) for k in cols) + " |")
        return rows

    expressible = [c for c in cases if c.get("expressible", True)]
    right = sum(1 for c in expressible if status(c) == "right")
    share = f"{100 * right / len(expressible):.0f} %" if expressible else "n/a"
    lines = [
        *table("area", AREAS),
        "",
        *table("engine", ENGINES),
        "",
        f"Right on the expressible cases: {right} of {len(expressible)} ({share}); "
        f"inexpressible: {len(cases) - len(expressible)} of {len(cases)}.",
    ]
    return "\n".join(lines)


def cases_table(cases: list[dict[str, Any]]) -> str:
    """One row per case: id, report, area, engine, outcome, expected verdict, status."""
    rows = [
        "| case | report | area | engine | outcome | expected | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        m = re.match(
            r"https://github\.com/([^/]+/[^/]+)/(issues|pull|discussions)/(\d+)", c["source"]
        )
        link = f"[{m.group(1)} #{m.group(3)}]({c['source']})" if m else f"<{c['source']}>"
        if c.get("expressible", True):
            e = c["expect"]
            expected = e["verdict"] + (f" {e['rule']} `{e['key']}`" if e["verdict"] != "ok" else "")
        else:
            expected = f"n/a (needs `{c['missing']}`)"
        why = c.get("known_miss") or c.get("control_known_miss")
        st = status(c) + (f": {why}" if why else "")
        rows.append(
            f"| {c['id']} | {link} | {c['area']} | {c['engine']} | {c['outcome']} | "
            f"{expected} | {st} |"
        )
    return "\n".join(rows)


def doc_block(cases: list[dict[str, Any]]) -> str:
    """The generated part of docs/failure_corpus.md."""
    return f"{counts_table(cases)}\n\n### Cases\n\n{cases_table(cases)}"


def test_doc_counts_match_the_corpus() -> None:
    text = DOC.read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == doc_block(ALL), (
        "docs/failure_corpus.md is stale: run PYTHONPATH=. python tests/test_failure_corpus.py "
        "--write-doc"
    )


def _write_doc() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{doc_block(ALL)}\n{END}{tail}")


if __name__ == "__main__" and sys.argv[1:] == ["--write-doc"]:
    _write_doc()
