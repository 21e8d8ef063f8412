"""``#SBATCH --segment`` (GB200 NVL72 block topology) against the local Slurm controller.

What a controller can tell without a block topology: whether its sbatch knows the option.
Slurm before 24.05 (Debian bookworm's 22.05 in the local test cluster) refuses the directive
("unrecognized option '--segment=2'"), which ``trainc lint --slurm`` reports as a rejected
script; with ``launch.slurm_segment: 0`` the same job is accepted. Newer clients parse it; the
placement itself needs ``TopologyPlugin=topology/block`` and a real topology, which the local
cluster does not emulate.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.slurm import SPECS
from trainc.compiler.pipeline import compile_spec
from trainc.launch.host import submit as slurm

pytestmark = pytest.mark.slurm

# two GB200 trays (the local cluster has two nodes): the derived segment is 2
OVERRIDES = [
    "cluster.gpu=gb200",
    "cluster.gpus_per_node=4",
    "cluster.nvlink_domain_size=72",
    "cluster.num_nodes=2",
    "parallel.pp=1",
    "parallel.tp=1",
    "training.global_batch_size=8",
    "launch.device=cpu",
    "launch.shrink=true",
]


def _version() -> tuple[int, int]:
    out = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=True)
    major, minor = re.search(r"(\d+)\.(\d+)", out.stdout).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _sbatch(extra: list[str]) -> str:
    result = compile_spec(SPECS / "tiny-2node-cpu.yaml", overrides=[*OVERRIDES, *extra])
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    return result.files["sbatch.sh"]


def test_segment_directive_on_this_controller(slurm_cluster):
    text = _sbatch([])
    assert "#SBATCH --segment=2" in text
    answer = slurm.test_only(text)
    if _version() < (24, 5):
        assert not answer.ok and "unrecognized option '--segment=2'" in answer.message
    else:  # the client knows the option; without topology/block the controller decides
        assert "unrecognized option" not in answer.message


def test_segment_off_is_accepted(slurm_cluster):
    text = _sbatch(["launch.slurm_segment=0"])
    assert "--segment" not in text
    answer = slurm.test_only(text)
    assert answer.ok, answer.message
