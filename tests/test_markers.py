"""The suite's markers and options are registered once, in tests/conftest.py, and every marker a
test uses is one of them or one of pytest's own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}


def _sources() -> list[Path]:
    return [p for p in sorted(TESTS.rglob("*.py")) if "golden/cases" not in p.as_posix()]


def test_every_used_marker_is_registered(pytestconfig: pytest.Config) -> None:
    registered = {line.split(":")[0].split("(")[0] for line in pytestconfig.getini("markers")}
    used = {m for p in _sources() for m in re.findall(r"pytest\.mark\.(\w+)", p.read_text())}
    assert used - BUILTIN - registered == set()
    assert {"slow", "worker", "differential", "slurm"} <= registered


def test_markers_and_update_golden_are_registered_only_in_tests_conftest() -> None:
    skip = (TESTS / "conftest.py", Path(__file__).resolve())
    elsewhere = [
        p.relative_to(REPO).as_posix()
        for p in _sources()
        if p not in skip
        and re.search(r'addinivalue_line\(\s*"markers"|"--update-golden",', p.read_text())
    ]
    assert elsewhere == []
    for ini in ("pytest.ini", "setup.cfg", "tox.ini"):
        assert not (REPO / ini).exists(), ini
    pyproject = (REPO / "pyproject.toml").read_text()
    [section] = re.findall(r"\[tool\.pytest\.ini_options\]\n(.*?)\n\[", pyproject, re.S)
    assert not re.search(r"^markers\s*=", section, re.M)
