"""engine=fsdp with experts: FSDP2 + expert parallelism as torchtitan 0.3.0 builds it.

Rules (trainc/compiler/validate/fsdp.py ``_experts``): EP borrows the ``dp_shard x cp x tp``
ranks (``ParallelDims.build_mesh``: ``efsdp = dp_shard * cp * tp // ep``), there is no expert
tensor-parallel degree, the MoE block has no auxiliary / z-loss, capacity or all-gather
dispatcher, and the trainc FSDP2 worker builds no experts.
"""

from __future__ import annotations

from typing import Any

from specs.kit import errors, find, lint_cfg, make

from trainc.compiler.derive import derive

#: 8 GPUs, an 8-expert top-2 MoE on torchtitan, tp 1 x pp 1 (dp 8), ep 4
TT_MOE: dict[str, Any] = {"engine": "fsdp", "launch.entrypoint": "torchtitan",
                          "model.num_experts": 8, "model.moe_router_topk": 2,
                          "model.moe_router_enable_expert_bias": True,
                          "parallel.tp": 1, "parallel.pp": 1, "parallel.ep": 4}


def test_fsdp2_ep_on_torchtitan_lints_clean() -> None:
    assert errors(lint_cfg(**TT_MOE)) == []


def test_etp_defaults_to_one_with_ep_and_to_tp_without() -> None:
    """torchtitan's experts are not tensor-parallel with EP (EP borrows the tp ranks) and split
    over tp without it; Megatron-Core's default (etp = tp) is kept for engine=megatron."""
    assert derive(make(**{**TT_MOE, "parallel.tp": 2})).etp == 1
    assert derive(make(**{**TT_MOE, "parallel.tp": 2, "parallel.ep": 1})).etp == 2
    assert derive(make(**{**TT_MOE, "engine": "megatron", "launch.entrypoint": "trainc",
                          "parallel.tp": 2, "parallel.sequence_parallel": True,
                          "model.moe_router_score_function": "sigmoid"})).etp == 2


def test_ep_must_divide_dp_shard_cp_tp() -> None:
    """dp_replicate 2 x dp_shard 2 x tp 2 = 8 GPUs: EP borrows dp_shard x tp = 4 ranks, so ep 8
    (which divides the world and the experts: neither TRC104 nor TRC205) cannot unflatten."""
    cfg = {**TT_MOE, "parallel.tp": 2, "fsdp.dp_replicate": 2, "fsdp.dp_shard": 2,
           "parallel.ep": 8}
    hits = find(lint_cfg(**cfg), "TRC348")
    assert [(d.key, d.fix) for d in hits] == [
        ("parallel.ep", "set parallel.ep to one of 1, 2, 4 (divisors of 4 that divide the 8 "
                        "experts)")]
    assert hits[0].edits == {"parallel.ep": 4}
    assert "2 x 1 x 2 = 4" in hits[0].message
    assert {d.rule.id for d in errors(lint_cfg(**cfg))} == {"TRC348"}
    assert errors(lint_cfg(**{**cfg, "parallel.ep": 4})) == []


def test_a_written_etp_torchtitan_cannot_build_is_an_error() -> None:
    diags = lint_cfg(**{**TT_MOE, "parallel.tp": 2, "parallel.etp": 2})
    hits = [d for d in find(diags, "TRC344") if d.key == "parallel.etp"]
    assert len(hits) == 1 and "it is 1 here" in hits[0].fix
    assert errors(lint_cfg(**{**TT_MOE, "parallel.tp": 2, "parallel.etp": 1})) == []


def test_the_trainc_worker_builds_no_experts() -> None:
    diags = lint_cfg(**{**TT_MOE, "launch.entrypoint": "trainc", "parallel.ep": 1})
    hits = find(diags, "TRC344")
    assert [d.key for d in hits] == ["model.num_experts"]
    assert hits[0].edits == {"launch.entrypoint": "torchtitan"}


def test_moe_settings_torchtitan_lacks_are_errors() -> None:
    cases = {"model.moe_aux_loss_coeff": {"model.moe_aux_loss_coeff": 0.01},
             "model.moe_router_load_balancing_type":
                 {"model.moe_router_load_balancing_type": "sinkhorn"},
             "model.moe_z_loss_coeff": {"model.moe_z_loss_coeff": 0.001},
             "model.moe_expert_capacity_factor": {"model.moe_expert_capacity_factor": 1.25},
             "model.moe_token_dispatcher_type": {"model.moe_token_dispatcher_type": "allgather"}}
    for key, change in cases.items():
        hits = [d for d in find(lint_cfg(**{**TT_MOE, **change}), "TRC344") if d.key == key]
        assert len(hits) == 1, key
        assert "torchtitan 0.3.0's MoE has no" in hits[0].message


def test_expert_bias_reaches_torchtitan_with_softmax_scores() -> None:
    """torchtitan's MoE balances with the expert bias (load_balance_coeff), softmax or sigmoid:
    neither TRC386 (Megatron-only key) nor TRC384 (sigmoid only) fires for it there."""
    diags = lint_cfg(**TT_MOE)
    assert not find(diags, "TRC386") and not find(diags, "TRC384")
    assert find(lint_cfg(**{**TT_MOE, "engine": "deepspeed", "launch.entrypoint": "trainc",
                            "parallel.ep": 1}), "TRC386")
