"""Fixtures of the Slurm tests.

Tests marked ``slurm`` need a reachable controller, e.g. the local test cluster::

    bash scripts/slurm_testcluster.sh install
    eval "$(bash scripts/slurm_testcluster.sh start)"   # exports SLURM_CONF
    .venv/bin/python -m pytest -q tests/slurm
    bash scripts/slurm_testcluster.sh stop

Without one they are skipped, unless ``TRAINC_REQUIRE_SLURM=1`` (CI): then they fail, so that a
run can never go green by skipping them.
"""

from __future__ import annotations

import shutil

import pytest

from tests.support.slurm import need, responding_nodes
from trainc.launch.host import submit as slurm


@pytest.fixture(scope="session")
def slurm_cluster() -> list[str]:
    """The reachable controller's responding nodes (at least two); skips/fails without one."""
    up, why = slurm.controller_status()
    if not up:
        need(
            f"no Slurm controller reachable ({why}); start the test cluster: "
            "bash scripts/slurm_testcluster.sh install && "
            'eval "$(bash scripts/slurm_testcluster.sh start)"'
        )
    nodes = responding_nodes()
    if len(nodes) < 2:
        pytest.fail(f"the Slurm cluster must have at least 2 responding nodes, has {nodes}")
    return nodes


@pytest.fixture(scope="session")
def shellcheck() -> str:
    """Path of Debian's shellcheck (scripts/slurm_testcluster.sh install brings it)."""
    path = shutil.which("shellcheck")
    if path is None:
        need(
            "shellcheck is not installed (apt-get install shellcheck, or "
            "bash scripts/slurm_testcluster.sh install)"
        )
    return str(path)
