"""Topology-aware Slurm: ``#SBATCH --segment`` for NVLink domains wider than a node (GB200 NVL72)
and TRC520, its check against the node count, the domain and the TP x CP / ETP x EP groups."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.kit import find, lint_cfg
from trainc.compiler.derive import domain_group_nodes, slurm_segment
from trainc.compiler.emit.scripts import sbatch
from trainc.compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[4]
GB200 = ROOT / "tests" / "golden" / "cases" / "mixtral-8x7b-gb200-nvl72" / "spec.yaml"
DGX = ROOT / "examples" / "llama2-70b-dgx-a100.yaml"
NVL72 = {
    "cluster.gpu": "gb200",
    "cluster.gpus_per_node": 4,
    "cluster.nvlink_domain_size": 72,
    "parallel.pp": 1,
}
MOE = {"model.num_experts": 64, "model.moe_router_topk": 2, "parallel.tp": 1}


@pytest.mark.parametrize(
    ("nodes", "gpus", "domain", "requested", "span", "segment"),
    [
        (36, 4, 72, None, 1, 18),  # two racks: one segment per rack
        (18, 4, 72, None, 1, 18),
        (4, 4, 72, None, 1, 4),  # a job smaller than a rack: all of it in one rack
        (20, 4, 72, None, 1, 10),  # 20 = 2 x 10: the largest divisor that fits a rack
        (36, 4, 72, None, 4, 12),  # 4-tray EP groups: 18 would cut one, 12 holds three
        (19, 4, 72, None, 1, 0),  # prime: no segment above 1 divides it
        (18, 4, 72, None, 4, 18),  # one rack: a single segment cuts no group
        (18, 4, 72, 9, 4, 9),
        (1, 4, 72, None, 1, 0),
        (8, 8, 8, None, 1, 0),  # DGX: the NVLink domain is the node, no --segment
        (36, 4, 72, 0, 1, 0),  # launch.slurm_segment: 0 turns it off
        (8, 8, 8, 4, 1, 4),  # an explicit segment is kept as written
    ],
)
def test_segment_sizes(nodes, gpus, domain, requested, span, segment):
    assert slurm_segment(nodes, gpus, domain, requested, span) == segment


def test_group_span_in_nodes():
    assert domain_group_nodes(tp=2, cp=1, etp=1, ep=8, gpus_per_node=4) == 2
    assert domain_group_nodes(tp=4, cp=4, etp=1, ep=1, gpus_per_node=4) == 4
    assert domain_group_nodes(tp=1, cp=1, etp=1, ep=1, gpus_per_node=4) == 1
    assert domain_group_nodes(tp=8, cp=1, etp=1, ep=1, gpus_per_node=8) == 1


def _directives(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]


def test_gb200_sbatch_requests_whole_racks():
    result = compile_spec(GB200)
    assert result.ok
    text = result.files["sbatch.sh"]
    assert "#SBATCH --segment=18" in _directives(text)
    assert "#SBATCH --nodes=36" in _directives(text)
    # all directives come before the first command (sbatch stops reading at it)
    first_cmd = text.index("set -euo pipefail")
    assert text.index("#SBATCH --segment=18") < first_cmd
    assert "span 2 node(s)" in text  # EP 8 x ETP 1 = 8 GPUs = 2 trays of 4
    assert not [d for d in result.diagnostics if d.rule.id == "TRC520"]


def test_no_segment_on_dgx_or_when_turned_off():
    result = compile_spec(DGX)
    assert not [d for d in _directives(result.files["sbatch.sh"]) if "--segment" in d]
    plan = copy.deepcopy(compile_spec(GB200).plan)
    assert plan is not None
    plan["spec"]["launch"]["slurm_segment"] = 0
    assert "--segment" not in sbatch(plan)["sbatch.sh"]
    plan["spec"]["launch"]["slurm_segment"] = 9
    assert "#SBATCH --segment=9" in _directives(sbatch(plan)["sbatch.sh"])


def test_trc520_groups_cut_by_the_segment():
    # EP 64 on 20 trays: a group spans 16 trays; the derived segment is 10, which cuts them
    [d] = find(lint_cfg(**NVL72, **MOE, **{"cluster.num_nodes": 20, "parallel.ep": 64}), "TRC520")
    assert d.severity.value == "warning" and d.key == "launch.slurm_segment"
    assert d.facts["segment"] == 10 and d.facts["group_nodes"] == 16
    assert "span 16 nodes" in d.message and "etp*ep = 64" in d.message
    assert d.fix.startswith("set cluster.num_nodes=32") and d.edits == {"cluster.num_nodes": 32}
    fixed = lint_cfg(**NVL72, **MOE, **{"cluster.num_nodes": 32, "parallel.ep": 64})
    assert not find(fixed, "TRC520")
    assert slurm_segment(32, 4, 72, None, 16) == 16


def test_trc520_node_count_and_domain():
    [d] = find(lint_cfg(**NVL72, **{"cluster.num_nodes": 19}), "TRC520")
    assert d.key == "cluster.num_nodes" and d.edits == {"cluster.num_nodes": 20}
    assert "segments of 10 nodes" in d.fix
    [d] = find(lint_cfg(**NVL72, **{"cluster.num_nodes": 36, "launch.slurm_segment": 36}), "TRC520")
    assert "wider than one NVLink domain (18 nodes" in d.message
    assert d.fix.startswith("set launch.slurm_segment to one of {18, 12, 9, 6, 4, 3, 2}")
    [d] = find(lint_cfg(**NVL72, **{"cluster.num_nodes": 20, "launch.slurm_segment": 8}), "TRC520")
    assert "does not divide cluster.num_nodes (20)" in d.message
    assert d.edits == {"launch.slurm_segment": 10}
    # 4-tray EP groups on one rack: one segment, nothing cut; segments of 9 cut them
    moe16 = {**NVL72, **MOE, "parallel.ep": 16, "cluster.num_nodes": 18}
    assert not find(lint_cfg(**moe16), "TRC520")
    [d] = find(lint_cfg(**moe16, **{"launch.slurm_segment": 9}), "TRC520")
    assert "span 4 nodes" in d.message and d.edits == {"launch.slurm_segment": 18}
    # an ordinary cluster with no segment asked for: nothing to say
    assert not find(lint_cfg(**{"cluster.num_nodes": 7}), "TRC520")


def test_trc520_explicit_segment_on_a_one_node_domain():
    """DGX H100: the NVLink domain is one node, so --segment=2 keeps nothing more on NVLink;
    the fix removes the key (derived: no --segment), as for segments wider than a GB200 rack."""
    dgx = {"cluster.num_nodes": 8, "cluster.gpus_per_node": 8, "cluster.nvlink_domain_size": 8}
    [d] = find(lint_cfg(**dgx, **{"launch.slurm_segment": 2}), "TRC520")
    assert d.severity.value == "warning" and d.key == "launch.slurm_segment"
    assert "wider than one NVLink domain (1 node: cluster.nvlink_domain_size 8" in d.message
    assert d.edits == {"launch.slurm_segment": None}
    assert d.fix.startswith("remove launch.slurm_segment")
    assert d.facts["segment"] == 2 and d.facts["nodes_per_domain"] == 1
    assert not find(lint_cfg(**dgx), "TRC520")
    assert not find(lint_cfg(**dgx, **{"launch.slurm_segment": 0}), "TRC520")


def test_trc107_reasons_about_the_segment_on_nvl72():
    """GB200 NVL72, 36 trays, EP 8 x ETP 2 = 16 GPUs: 16 does not divide 72, but the derived
    --segment=12 (48 GPUs) holds three whole groups, so no TRC107; --segment=18 (72 GPUs) cuts
    the groups at ranks 64-79 and TRC107 says "does not divide" (not "does not fit")."""
    moe = {
        **NVL72,
        "model.num_experts": 8,
        "model.moe_router_topk": 2,
        "parallel.tp": 2,
        "parallel.etp": 2,
        "parallel.ep": 8,
        "cluster.num_nodes": 36,
    }
    diags = lint_cfg(**moe)
    assert not find(diags, "TRC107") and not find(diags, "TRC520")
    [d] = find(lint_cfg(**moe, **{"launch.slurm_segment": 18}), "TRC107")
    assert "etp*ep (2*8 = 16) does not divide the NVLink domain (72 GPUs = 18 nodes)" in d.message
    assert "--segment=18 (18 nodes = 72 GPUs) does not hold whole groups" in d.message
    assert "does not fit" not in d.message
    assert "launch.slurm_segment in {12, 4}" in d.fix
    assert d.facts["slurm_segment"] == 18 and d.facts["nodes_per_domain"] == 18
    # segments turned off: nothing keeps the groups whole
    [d] = find(lint_cfg(**moe, **{"launch.slurm_segment": 0}), "TRC107")
    assert "sbatch.sh asks for no --segment" in d.message


def test_trc107_ep64_inside_one_nvl72_domain():
    """EP 64 (16 trays) on 32 trays: the derived segment is 16 trays = 64 GPUs, one group each,
    inside one 72-GPU domain: no TRC107. EP 128 is wider than the domain: "does not fit"."""
    ep64 = {**NVL72, **MOE, "parallel.ep": 64, "cluster.num_nodes": 32}
    diags = lint_cfg(**ep64)
    assert not find(diags, "TRC107") and not find(diags, "TRC520")
    [d] = find(lint_cfg(**{**ep64, "model.num_experts": 128, "parallel.ep": 128}), "TRC107")
    assert "etp*ep (1*128 = 128) does not fit the NVLink domain (72 GPUs)" in d.message
    assert "launch.slurm_segment" not in d.fix


def test_trc105_tp_across_trays_of_one_rack():
    """TP 8 on 4-GPU trays spans two trays of one NVL72 rack: 8 divides 72, no TRC105; on a
    DGX (domain = node of 8) TP 16 does not fit."""
    assert not find(lint_cfg(**{**NVL72, "parallel.tp": 8, "cluster.num_nodes": 18}), "TRC105")
    [d] = find(
        lint_cfg(
            **{
                "cluster.num_nodes": 2,
                "cluster.gpus_per_node": 8,
                "cluster.nvlink_domain_size": 8,
                "parallel.tp": 16,
                "parallel.pp": 1,
            }
        ),
        "TRC105",
    )
    assert "tp (16) does not fit the NVLink domain (8 GPUs)" in d.message
