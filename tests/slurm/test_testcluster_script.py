"""scripts/slurm_testcluster.sh: shellcheck clean; a second, private cluster starts on free ports,
is idempotent, and its stop leaves no daemon, no /etc/hosts line and no directory behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.slurm import ROOT, need

SCRIPT = ROOT / "scripts" / "slurm_testcluster.sh"


def _run(cmd: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), cmd],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_shellcheck_clean(shellcheck):
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout


def test_usage_and_nothing_to_stop(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "TRAINC_SLURM_ROOT")}
    assert _run("bogus", env).returncode == 2
    proc = _run("stop", dict(env, TRAINC_SLURM_ROOT=str(tmp_path)))  # not a cluster directory
    assert proc.returncode == 0 and "no test cluster" in proc.stderr
    assert _run("status", env).returncode == 1


def _pids(root: Path) -> list[int]:
    return [int(p.read_text()) for p in root.glob("run/**/*.pid") if p.read_text().strip()]


@pytest.mark.slurm
def test_private_cluster_lifecycle(tmp_path):
    if os.geteuid() != 0 or not Path("/usr/sbin/slurmctld").exists() or not shutil.which("sinfo"):
        need("root and the Slurm packages (bash scripts/slurm_testcluster.sh install)")
    root = tmp_path / "cluster"
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(
        TRAINC_SLURM_ROOT=str(root),
        TRAINC_SLURM_NODES="2",
        TRAINC_SLURM_SPARE="0",
        TRAINC_SLURM_GPUS="0",
    )
    try:
        t0 = time.monotonic()
        up = _run("start", env)
        assert up.returncode == 0, up.stderr
        started_in = time.monotonic() - t0
        assert up.stdout.splitlines() == [
            f"export TRAINC_SLURM_ROOT={root}",
            f"export SLURM_CONF={root}/etc/slurm.conf",
        ]
        pids = _pids(root)
        assert len(pids) == 4, pids  # munged, slurmctld, 2 x slurmd
        assert all(Path(f"/proc/{p}").exists() for p in pids)
        again = _run("start", env)  # idempotent: same cluster, same exports
        assert again.returncode == 0 and again.stdout == up.stdout and _pids(root) == pids
        status = _run("status", env)
        assert status.returncode == 0 and "n[1-2]" in status.stdout, status.stdout
        assert f"# trainc-slurm-testcluster {root}" in Path("/etc/hosts").read_text()
        assert started_in < 60
    finally:
        down = _run("stop", env)
    assert down.returncode == 0, down.stderr
    assert not any(Path(f"/proc/{p}").exists() for p in pids), "a daemon outlived stop"
    assert not root.exists()
    assert f"# trainc-slurm-testcluster {root}" not in Path("/etc/hosts").read_text()
