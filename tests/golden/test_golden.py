"""Golden artifacts: every file ``trainc compile`` writes for each case in ``cases/<name>/``
(``spec.yaml`` plus optional ``overrides.txt``, one Hydra override per line) must equal
``cases/<name>/expected/<file>`` byte for byte.

Exception: ``manifest.json`` is not stored (it only holds hashes of the other files; unit tests
check it). Estimates are pinned too, so estimate drift shows up in review. Specs are compiled by a
path relative to the repository, as a user in the checkout would, so the goldens do not depend on
where the checkout lives.

Update: ``pytest tests/golden --update-golden`` or ``TRAINC_UPDATE_GOLDEN=1 pytest tests/golden``;
explain golden diffs in review.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from trainc.compiler.pipeline import compile_spec

CASES_DIR = Path(__file__).parent / "cases"
CASES = sorted(p for p in CASES_DIR.iterdir() if (p / "spec.yaml").is_file())
UPDATE_HINT = "run `pytest tests/golden --update-golden` if the change is intended"


def compile_case(case: Path) -> dict[str, str]:
    """The artifacts of one golden case (without manifest.json)."""
    ov = case / "overrides.txt"
    overrides = (
        [ln.strip() for ln in ov.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        if ov.is_file()
        else []
    )
    repo = CASES_DIR.parents[2]
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        result = compile_spec((case / "spec.yaml").relative_to(repo), overrides)
    finally:
        os.chdir(cwd)
    assert result.ok, [d.to_json() for d in result.diagnostics]
    return dict(result.files)


def comparable(name: str, text: str) -> str:
    """The part of a file the golden pins (all of it)."""
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden(case: Path, update_golden: bool) -> None:
    files = compile_case(case)
    expected_dir = case / "expected"
    if update_golden:
        expected_dir.mkdir(exist_ok=True)
        for old in expected_dir.iterdir():
            if old.name not in files:
                old.unlink()
        for name, text in files.items():
            (expected_dir / name).write_text(text, encoding="utf-8")
        return
    assert expected_dir.is_dir(), f"no goldens for {case.name}: {UPDATE_HINT}"
    expected = {p.name: p.read_text(encoding="utf-8") for p in expected_dir.iterdir()}
    assert sorted(files) == sorted(expected), f"artifact names differ: {UPDATE_HINT}"
    problems = []
    for name in sorted(files):
        want, got = comparable(name, expected[name]), comparable(name, files[name])
        if want != got:
            diff = difflib.unified_diff(
                want.splitlines(keepends=True),
                got.splitlines(keepends=True),
                f"expected/{name}",
                f"actual/{name}",
            )
            problems.append("".join(diff))
    assert not problems, f"{case.name}: golden mismatch ({UPDATE_HINT})\n" + "\n".join(problems)
