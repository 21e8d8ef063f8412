"""Fuzz of the compile front end, in-process (issue 7): an exception escaping ``compile_spec`` is
a crash (the CLI's exit 3). ``TRAINC_FUZZ_EXAMPLES`` (default 300 per generator) sizes the CI
run; ``scripts/soak.py`` runs 10,000 and more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.support.fuzzing import VALID, check_input, mutated_specs, overrides, yamlish

N = int(os.environ.get("TRAINC_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=N,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(autouse=True)
def _no_preset_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINC_NO_CACHE", "1")


def test_valid_base_compiles(tmp_path: Path) -> None:
    assert check_input(tmp_path, yaml.safe_dump(VALID)).ok


def test_mutated_specs_never_crash(tmp_path: Path) -> None:
    @FUZZ
    @given(mutated_specs())
    def run(text: str) -> None:
        check_input(tmp_path, text)

    run()


def test_yamlish_text_never_crashes(tmp_path: Path) -> None:
    @FUZZ
    @given(yamlish())
    def run(data: bytes) -> None:
        check_input(tmp_path, data)

    run()


def test_overrides_never_crash(tmp_path: Path) -> None:
    base = yaml.safe_dump(VALID)

    @FUZZ
    @given(overrides())
    def run(ovs: list[str]) -> None:
        check_input(tmp_path, base, ovs)

    run()
