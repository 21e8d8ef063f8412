"""training.tp_comm_overlap and overlap_moe_expert_parallel_comm: trainc's default, what the time
model leaves exposed, and the worker's CPU substitution (docs/performance.md, docs/engines.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kit import make
from trainc.compiler.estimate.time import ep_exposed_share, tp_exposed_share

H100 = {"cluster.gpu": "h100-80g"}


@pytest.mark.parametrize(
    ("changes", "on"),
    [
        ({**H100}, True),  # tp 2 with sequence parallelism inside the node, Hopper
        ({**H100, "cluster.gpu": "b200"}, True),
        ({}, False),  # the kit's A100: no userbuffer recipes for Ampere
        ({**H100, "launch.device": "cpu"}, False),
        ({**H100, "parallel.sequence_parallel": False}, False),
        ({**H100, "parallel.tp": 1, "parallel.pp": 1}, False),
        (
            {
                **H100,
                "cluster.gpus_per_node": 4,
                "cluster.num_nodes": 2,
                "parallel.tp": 8,
                "parallel.pp": 1,
            },
            False,
        ),  # the TP group leaves the NVLink domain
        ({**H100, "engine": "deepspeed", "parallel.pp": 1}, False),
        ({**H100, "training.tp_comm_overlap": False}, False),  # the user's value is kept
    ],
)
def test_default_is_on_where_nvidia_recipes_run_it(changes: dict[str, Any], on: bool) -> None:
    assert make(**changes).training.tp_comm_overlap is on


def test_tp_overlap_leaves_half_a_ring_step_and_the_excess() -> None:
    # without the switch: what comm_overlap does not hide
    assert tp_exposed_share(1.0, 10.0, 8, False, 0.25) == pytest.approx(0.75)
    # with it: 1 / (2 tp) of the traffic, plus what exceeds the GEMMs
    assert tp_exposed_share(1.0, 10.0, 8, True, 0.0) == pytest.approx(1 / 16)
    assert tp_exposed_share(2.0, 1.0, 4, True, 0.0) == pytest.approx(
        (2 / 8 + (2 * (1 - 1 / 8) - 1.0)) / 2
    )
    assert tp_exposed_share(0.0, 1.0, 4, True, 0.0) == 0.0


def test_a2a_overlap_leaves_one_micro_batch_and_the_excess() -> None:
    assert ep_exposed_share(1.0, 5.0, 8, False, 0.0) == 1.0
    assert ep_exposed_share(1.0, 5.0, 8, True, 0.0) == pytest.approx(1 / 8)
    # the steady state's A2A (7/8 of a micro-batch's) beyond the 0.5 s it runs under
    assert ep_exposed_share(1.0, 0.5, 8, True, 0.0) == pytest.approx(1 / 8 + 7 / 8 - 0.5)


def test_cuda_plan_on_cpu_turns_the_overlaps_off_and_says_so() -> None:
    """The worker runs a CUDA plan on CPU (--device cpu) with the overlaps off: they are
    communication schedules (TE userbuffers, combined 1F1B), not math; the change is logged."""
    pytest.importorskip("torch", reason="the Megatron worker's model needs the [worker] extra")
    from trainc.compiler.pipeline import plan_and_estimate
    from trainc.launch.shrink import full_dims
    from trainc.launch.worker.model import transformer_config_kwargs

    _, _, plan = plan_and_estimate(make(**H100), normalized=True)
    assert plan is not None
    data = plan.to_json()
    assert data["engines"]["megatron_core"]["TransformerConfig"]["tp_comm_overlap"] is True
    layout = {"tp": 2, "pp": 2, "vpp": 1, "cp": 1, "ep": 1, "etp": 2, "sp": True}
    kw, changes = transformer_config_kwargs(
        data, full_dims(data), layout, cpu=True, precision="bf16"
    )
    assert kw["tp_comm_overlap"] is False
    assert "tp_comm_overlap: True -> False" in changes
    kw, changes = transformer_config_kwargs(
        data, full_dims(data), layout, cpu=False, precision="bf16"
    )
    assert kw["tp_comm_overlap"] is True and not any("tp_comm" in c for c in changes)


def test_tp_group_in_one_nvl72_rack_is_inside_the_domain() -> None:
    """64 GPUs of a 72-GPU rack (16 trays of 4): tp 16 does not tile 72 but the whole job is
    one domain, so the overlap is on by default and TRC382 stays silent."""
    from tests.support.kit import lint

    spec = make(
        **{
            "cluster.gpu": "gb200",
            "cluster.gpus_per_node": 4,
            "cluster.num_nodes": 16,
            "cluster.nvlink_domain_size": 72,
            "parallel.tp": 16,
            "parallel.pp": 1,
            "model.num_attention_heads": 16,
            "model.num_query_groups": 16,
        }
    )
    assert spec.training.tp_comm_overlap is True
    assert "TRC382" not in {d.rule.id for d in lint(spec)}


def test_a2a_overlap_on_a_dense_model_says_there_are_no_experts() -> None:
    from tests.support.kit import lint

    [d] = [
        d
        for d in lint(make(**{"parallel.ep": 1, "training.overlap_moe_expert_parallel_comm": True}))
        if d.rule.id == "TRC381"
    ]
    assert "the model has no experts" in d.message and "needs expert parallelism" not in d.message
