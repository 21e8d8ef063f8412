"""Golden-file options: goldens are rewritten only on request, never during a normal run.

``pytest tests/golden --update-golden`` (the option exists when pytest starts from this folder or
below) or ``TRAINC_UPDATE_GOLDEN=1 pytest`` (works from anywhere).
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/cases/*/expected from the current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the goldens should be rewritten instead of compared."""
    try:
        flag = bool(request.config.getoption("--update-golden"))
    except ValueError:  # the option was registered too late to be parsed
        flag = False
    return flag or os.environ.get("TRAINC_UPDATE_GOLDEN", "") not in ("", "0")
