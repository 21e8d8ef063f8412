"""Megatron-FSDP (engine=megatron, zero_stage 3): the flags every artifact carries, TRC383, the
memory and communication it is priced with (docs/engines.md, docs/performance.md).

Sources of the expected values (Megatron-LM core_v0.16.1): the flags from
docs/discussions/megatron-fsdp-user-guide ("Required Configurations") and
megatron/training/arguments.py validate_args; the sharded weight / main-weight / gradient buffers
and the two-slot gathered pools from megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py; the per-micro-batch gathers and reduce-scatter from megatron_fsdp.py
(as PyTorch FSDP, Zhao et al. 2023, arXiv 2304.11277 §3.2-3.3); ring volumes (n-1)/n x D as
trainc.compiler.estimate.comm (seed 000)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kit import find, ids, lint_cfg, make
from trainc.compiler.estimate.params import stage_params
from trainc.compiler.pipeline import plan_and_estimate

#: The kit's tp 2 x pp 2 x dp 2 on one A100 node, as Megatron-FSDP in pretrain_gpt.py.
MFSDP = {
    "parallel.zero_stage": 3,
    "launch.entrypoint": "megatron-lm",
    "launch.megatron_lm_path": "/opt/Megatron-LM",
}


def _plan(**changes: Any) -> Any:
    _, diags, plan = plan_and_estimate(make(**changes), normalized=True)
    assert plan is not None, [d.to_json() for d in diags if d.is_error]
    return plan


def test_megatron_fsdp_reaches_every_artifact() -> None:
    data = _plan(**MFSDP).to_json()
    d, core = data["derived"], data["engines"]["megatron_core"]
    assert d["megatron_fsdp"] and d["distributed_optimizer"]
    assert d["checkpoint_format"] == "fsdp_dtensor"
    assert d["cuda_device_max_connections_1"] is False  # Megatron-FSDP asserts != 1
    ddp = core["DistributedDataParallelConfig"]
    assert (ddp["use_megatron_fsdp"], ddp["data_parallel_sharding_strategy"]) == (
        True,
        "optim_grads_params",
    )
    assert ddp["overlap_grad_reduce"] and ddp["overlap_param_gather"]  # forced on by MegatronFSDP
    assert core["TransformerConfig"]["gradient_accumulation_fusion"] is False
    flat = [" ".join(a) for a in data["engines"]["megatron_lm"]]
    for want in (
        "--use-megatron-fsdp",
        "--data-parallel-sharding-strategy optim_grads_params",
        "--use-distributed-optimizer",
        "--no-gradient-accumulation-fusion",
        "--ckpt-format fsdp_dtensor",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
    ):
        assert want in flat, want


def test_distributed_optimizer_plan_has_no_megatron_fsdp_keys() -> None:
    data = _plan(**{**MFSDP, "parallel.zero_stage": 1}).to_json()
    ddp = data["engines"]["megatron_core"]["DistributedDataParallelConfig"]
    assert "use_megatron_fsdp" not in ddp and not data["derived"]["megatron_fsdp"]
    assert data["derived"]["checkpoint_format"] == "torch_dist"
    assert (
        "gradient_accumulation_fusion" not in data["engines"]["megatron_core"]["TransformerConfig"]
    )


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"launch.entrypoint": "trainc"}, "parallel.zero_stage"),  # the worker on CUDA
        ({"training.overlap_grad_reduce": False}, "training.overlap_grad_reduce"),
        ({"training.overlap_param_gather": False}, "training.overlap_param_gather"),
        (
            {"resume.checkpoint_format": "torch_dist", "resume.load_dir": "/ckpt"},
            "resume.checkpoint_format",
        ),
        (
            {
                "parallel.zero_stage": 1,
                "resume.checkpoint_format": "fsdp_dtensor",
                "resume.load_dir": "/ckpt",
            },
            "resume.checkpoint_format",
        ),
    ],
)
def test_trc383(changes: dict[str, Any], key: str) -> None:
    found = find(lint_cfg(**{**MFSDP, **changes}), "TRC383")
    assert [d.key for d in found] == [key]


def test_megatron_fsdp_accepted_where_it_runs() -> None:
    assert "TRC383" not in ids(lint_cfg(**MFSDP))
    # the worker runs its math on CPU with the distributed optimizer (override line)
    assert "TRC383" not in ids(lint_cfg(**{"parallel.zero_stage": 3, "launch.device": "cpu"}))


def test_zero_stage_2_is_still_refused_on_megatron() -> None:
    [dg] = find(lint_cfg(**{**MFSDP, "parallel.zero_stage": 2}), "TRC307")
    assert "3 (Megatron-FSDP" in dg.message


def test_megatron_fsdp_memory_shards_weights_and_grads() -> None:
    """bf16 weights 2 B and fp32 grads 4 B per parameter over dp x cp (2 here), plus two
    gathered layers (at most the whole stage); the optimizer state (12 B) as the distributed
    optimizer's."""
    spec = make(**MFSDP)
    plan = _plan(**MFSDP)
    dist = _plan(**{**MFSDP, "parallel.zero_stage": 1})
    sp = stage_params(spec, plan)[plan.estimates.memory_stage]
    n = plan.derived.dp * plan.derived.cp
    assert n == 2
    got = plan.estimates.memory_per_stage[plan.estimates.memory_stage]
    held = min(sp.total / n + 2 * sp.largest_layer, sp.total)  # the kit's embedding is large
    assert got.params == pytest.approx(2 * held, abs=1)
    assert got.grads == pytest.approx(4 * held, abs=1)
    ref = dist.estimates.memory_per_stage[dist.estimates.memory_stage]
    assert got.optimizer == ref.optimizer
    assert ref.params == pytest.approx(2 * sp.total, abs=1)


def test_megatron_fsdp_collectives_every_micro_batch() -> None:
    """Per micro-batch: a gather for forward and one for backward (bf16), a reduce-scatter of
    the fp32 gradients; exposed as FSDP2's (what exceeds the compute, plus one layer's)."""
    spec = make(**MFSDP)
    plan = _plan(**MFSDP)
    M, n = plan.derived.num_microbatches, plan.derived.dp
    cols = {c.name: c for c in plan.estimates.comm_collectives if c.axis == "dp"}
    ag_name, rs_name = "dense fsdp param all_gather (fwd+bwd)", "dense fsdp grad reduce_scatter"
    assert set(cols) == {ag_name, rs_name}
    ag, rs = cols[ag_name], cols[rs_name]
    [sp] = [
        sp
        for sp in stage_params(spec, plan)  # the critical stage's
        if ag.sent_bytes == pytest.approx(2 * M * (n - 1) / n * 2 * sp.dense, abs=1)
    ]
    assert rs.sent_bytes == pytest.approx(M * (n - 1) / n * 4 * sp.dense, abs=1)
    assert (ag.count, rs.count) == (2 * M, M)
    assert 0 < ag.exposed_seconds < ag.seconds


def test_trc383_cuda_device_max_connections_1() -> None:
    found = find(
        lint_cfg(**{**MFSDP, "launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}), "TRC383"
    )
    assert [d.key for d in found] == ["launch.env.CUDA_DEVICE_MAX_CONNECTIONS"]
    assert not find(
        lint_cfg(**{**MFSDP, "launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}}), "TRC383"
    )


def test_overlap_false_is_one_error_not_two() -> None:
    diags = lint_cfg(**{**MFSDP, "training.overlap_grad_reduce": False})
    assert "TRC324" not in ids(diags)


@pytest.mark.parametrize(
    ("saved", "zero_stage", "bad"),
    [
        ("torch_dist", 3, True),
        ("fsdp_dtensor", 1, True),
        ("fsdp_dtensor", 3, False),
        ("torch_dist", 1, False),
    ],
)
def test_resume_across_fsdp_dtensor_and_torch_dist(saved: str, zero_stage: int, bad: bool) -> None:
    """Megatron-FSDP reads and writes fsdp_dtensor only: a torch_dist checkpoint does not load
    into it, nor its checkpoint into the distributed optimizer (trainc diff says the same)."""
    diags = lint_cfg(
        **{
            **MFSDP,
            "parallel.zero_stage": zero_stage,
            "resume.load_dir": "/ckpt",
            "resume.saved.engine": "megatron",
            "resume.saved.checkpoint_format": saved,
        }
    )
    found = [d for d in find(diags, "TRC534") if d.key == "parallel.zero_stage"]
    assert bool(found) is bad, [d.message for d in diags if d.is_error]


def test_tiny_model_holds_no_more_than_itself() -> None:
    """Two gathered layers of a 2-layer model are the whole model: the weights never exceed the
    unsharded stage."""
    changes = {**MFSDP, "model.num_layers": 2, "parallel.pp": 1}
    plan, dist = _plan(**changes), _plan(**{**changes, "parallel.zero_stage": 1})
    assert plan.estimates.memory_bytes.params <= dist.estimates.memory_bytes.params
