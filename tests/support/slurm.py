"""Helpers of the Slurm tests (imported by tests/slurm/conftest.py and its test modules)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "tests" / "slurm" / "specs"
REQUIRE = os.environ.get("TRAINC_REQUIRE_SLURM") == "1"


def need(what: str) -> None:
    """Skip (or fail under TRAINC_REQUIRE_SLURM=1) because ``what`` is missing."""
    if REQUIRE:
        pytest.fail(f"TRAINC_REQUIRE_SLURM=1 but {what}")
    pytest.skip(what)


def trainc(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 300,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the trainc command line of this interpreter in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "trainc", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd or ROOT,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def responding_nodes() -> list[str]:
    """Nodes whose slurmd answers (not down, drained, powered off or unknown)."""
    proc = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    nodes = []
    for line in proc.stdout.splitlines():
        name, state = line.split()
        usable = state.rstrip("*~#%$@^-!") == state and state in {"idle", "alloc", "mix", "comp"}
        if usable and name not in nodes:
            nodes.append(name)
    return nodes
