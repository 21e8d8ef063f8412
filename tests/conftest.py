"""Shared pytest set-up: hypothesis profiles, and the one place where every marker and
command-line option of the suite is registered.

Profiles: ``dev`` (few examples, fast feedback) and ``ci`` (more examples, derandomized so a
failure replays). Select with HYPOTHESIS_PROFILE; the default is ``ci``.

Markers (``--strict-markers`` is on: an unregistered marker is an error): see ``MARKERS``.
Options: ``--update-golden`` (or ``TRAINC_UPDATE_GOLDEN=1``) rewrites the checked-in expected
files (tests/golden/cases/*/expected, tests/data/cli_surface.txt) instead of comparing; tests read
it through the ``update_golden`` fixture.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "dev", max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Every marker of the suite, registered once here (not in pyproject.toml or other conftests).
MARKERS = {
    "slow": "long-running tests",
    "worker": "needs the [worker] extra (torch, megatron-core, deepspeed); skipped without it",
    "differential": "checks trainc's verdicts against megatron-core / deepspeed",
    "slurm": "needs a reachable Slurm controller (scripts/slurm_testcluster.sh); skipped without "
    "one unless TRAINC_REQUIRE_SLURM=1",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the checked-in expected files (tests/golden/cases/*/expected, "
        "tests/data/cli_surface.txt) from the current output",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when expected files should be rewritten instead of compared: goldens are rewritten
    only on request (``--update-golden`` or ``TRAINC_UPDATE_GOLDEN=1``), never in a normal run."""
    flag = bool(request.config.getoption("--update-golden"))
    return flag or os.environ.get("TRAINC_UPDATE_GOLDEN", "") not in ("", "0")
