"""Golden artifacts: every file ``trainc compile`` writes for each case in ``cases/<name>/``
(``spec.yaml`` plus optional ``overrides.txt``, one Hydra override per line) must equal
``cases/<name>/expected/<file>`` byte for byte.

Exceptions: ``plan.json`` is compared without its ``estimates`` (owned by the estimates work, so
that their changes do not break these goldens) and ``manifest.json`` is not stored (it only holds
hashes of the other files; unit tests check it).

Update: ``pytest tests/golden --update-golden`` or ``TRAINC_UPDATE_GOLDEN=1 pytest tests/golden``;
explain golden diffs in review.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from trainc.compiler.pipeline import compile_spec

CASES_DIR = Path(__file__).parent / "cases"
CASES = sorted(p for p in CASES_DIR.iterdir() if (p / "spec.yaml").is_file())
UPDATE_HINT = "run `pytest tests/golden --update-golden` if the change is intended"


def compile_case(case: Path) -> dict[str, str]:
    """The artifacts of one golden case (without manifest.json)."""
    ov = case / "overrides.txt"
    overrides = [ln.strip() for ln in ov.read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")] if ov.is_file() else []
    result = compile_spec(case / "spec.yaml", overrides)
    assert result.ok, [d.to_json() for d in result.diagnostics]
    return dict(result.files)


def comparable(name: str, text: str) -> str:
    """The part of a file the golden pins (plan.json without estimates)."""
    if name == "plan.json":
        obj = json.loads(text)
        obj.pop("estimates", None)
        return json.dumps(obj, indent=2, sort_keys=True) + "\n"
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
            diff = difflib.unified_diff(want.splitlines(keepends=True),
                                        got.splitlines(keepends=True),
                                        f"expected/{name}", f"actual/{name}")
            problems.append("".join(diff))
    assert not problems, f"{case.name}: golden mismatch ({UPDATE_HINT})\n" + "\n".join(problems)
