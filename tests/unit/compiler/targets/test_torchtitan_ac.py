"""engine=fsdp activation checkpointing as torchtitan has it: the mode the engine builder decides,
its torchtitan_args.txt flags per version (parsed by torchtitan 0.3.0's own tyro union when the
wheel is importable), and TRC344 for the combinations torchtitan does not run."""

from __future__ import annotations

import pytest

from tests.support.kit import make
from trainc.compiler.derive import derive
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.targets.fsdp import fsdp_config

FSDP = {"engine": "fsdp", "parallel.pp": 1}  # kit BASE: 8 GPUs, tp2 -> dp 4


def ac(**changes):
    spec = make(**{**FSDP, **changes})
    c = fsdp_config(spec, derive(spec))
    tail = [a for a in c["torchtitan"]["args"] if "activation" in a[0]]
    return c["activation_checkpoint"], tail, c["torchtitan"]["args"]


def trc344(**changes) -> list[tuple[str, str]]:
    _, diags, _ = plan_and_estimate(make(**{**FSDP, **changes}))
    return [(d.key, d.fix or "") for d in diags if d.rule.id == "TRC344" and d.is_error]


@pytest.mark.parametrize(
    ("changes", "mode", "tail"),
    [
        ({"training.recompute": "none"}, "none", [["activation-checkpoint:none"]]),
        ({"training.recompute": "full"}, "full", [["activation-checkpoint:full"]]),
        ({}, "selective_op", [["activation-checkpoint:selective"]]),
        ({"fsdp.selective_ac_option": "op"}, "selective_op", [["activation-checkpoint:selective"]]),
        (
            {"fsdp.memory_budget": 0.3, "fsdp.compile": True, "launch.device": "cuda"},
            "memory_budget",
            [
                ["activation-checkpoint:memory-budget"],
                ["--activation_checkpoint.memory_budget", "0.3"],
            ],
        ),
    ],
)
def test_torchtitan_030_subcommand_ends_the_args(changes, mode, tail) -> None:
    cfg, got, args = ac(**changes)
    assert cfg["torchtitan_mode"] == mode
    assert got == tail
    assert args[-len(tail) :] == tail  # tyro: the subcommand after every parent option


@pytest.mark.parametrize(
    ("changes", "mode", "n", "tail"),
    [
        (
            {},
            "selective_op",
            None,
            [
                ["--activation_checkpoint.mode", "selective"],
                ["--activation_checkpoint.selective_ac_option", "op"],
            ],
        ),
        (
            {"fsdp.selective_ac_option": "2"},
            "selective_layer",
            2,
            [
                ["--activation_checkpoint.mode", "selective"],
                ["--activation_checkpoint.selective_ac_option", "2"],
            ],
        ),
        ({"training.recompute": "full"}, "full", None, [["--activation_checkpoint.mode", "full"]]),
        (
            {"fsdp.memory_budget": 0.5, "fsdp.compile": True, "launch.device": "cuda"},
            "memory_budget",
            None,
            [
                ["--activation_checkpoint.mode", "memory_budget"],
                ["--activation_checkpoint.memory_budget", "0.5"],
            ],
        ),
    ],
)
def test_torchtitan_02_mode_flags(changes, mode, n, tail) -> None:
    cfg, got, _ = ac(**{"launch.versions": {"torchtitan": "0.2.2"}, **changes})
    assert (cfg["torchtitan_mode"], cfg["every_n_layers"]) == (mode, n)
    assert got == tail


def test_every_n_layers_needs_a_torchtitan_that_has_it() -> None:
    found = trc344(**{"fsdp.selective_ac_option": "2"})
    assert found == [
        (
            "fsdp.selective_ac_option",
            "set fsdp.selective_ac_option=op, or launch.versions.torchtitan=0.2.2 for "
            "a torchtitan that still checkpoints every N-th layer",
        )
    ]
    _, diags, plan = plan_and_estimate(
        make(
            **{**FSDP, "fsdp.selective_ac_option": "2", "launch.versions": {"torchtitan": "0.2.2"}}
        )
    )
    assert [d.message for d in diags if d.is_error] == []  # torchtitan is a known component
    assert plan is not None


@pytest.mark.parametrize(
    ("changes", "key", "fix"),
    [
        (
            {"fsdp.selective_ac_option": "every"},
            "fsdp.selective_ac_option",
            "set fsdp.selective_ac_option=op, or a positive integer such as 2",
        ),
        (
            {"fsdp.selective_ac_option": "0"},
            "fsdp.selective_ac_option",
            "set fsdp.selective_ac_option=op, or a positive integer such as 2",
        ),
        (
            {"fsdp.selective_ac_option": "op", "training.recompute": "full"},
            "fsdp.selective_ac_option",
            "set training.recompute=selective, or remove fsdp.selective_ac_option",
        ),
        (
            {"fsdp.memory_budget": 0.5, "training.recompute": "none"},
            "fsdp.memory_budget",
            "set training.recompute=selective, or remove fsdp.memory_budget",
        ),
        (
            {"fsdp.memory_budget": 0.5, "launch.device": "cuda"},
            "fsdp.memory_budget",
            "set fsdp.compile=true, or remove fsdp.memory_budget (per-op selective checkpointing)",
        ),
        (
            {"fsdp.memory_budget": 1.5, "fsdp.compile": True, "launch.device": "cuda"},
            "fsdp.memory_budget",
            "set fsdp.memory_budget between 0 and 1, e.g. 0.5 (torchtitan's default)",
        ),
        (
            {
                "fsdp.memory_budget": 0.5,
                "fsdp.compile": True,
                "launch.device": "cuda",
                "fsdp.selective_ac_option": "op",
            },
            "fsdp.memory_budget",
            "remove fsdp.selective_ac_option (the compiler chooses within the budget), or remove "
            "fsdp.memory_budget",
        ),
        (
            {
                "fsdp.memory_budget": 0.5,
                "fsdp.compile": True,
                "launch.device": "cuda",
                "launch.versions": {"torchtitan": "0.1.0"},
            },
            "fsdp.memory_budget",
            "remove fsdp.memory_budget, or set launch.versions.torchtitan=0.3.0",
        ),
    ],
)
def test_bad_combinations_are_trc344_with_a_fix(changes, key, fix) -> None:
    assert trc344(**changes) == [(key, fix)]


def test_the_030_wheel_parses_every_subcommand() -> None:
    """torchtitan 0.3.0's ``ActivationCheckpointingConfig`` union, parsed by tyro as its
    ``ConfigManager`` does, yields the config class each mode means."""
    tyro = pytest.importorskip("tyro")
    tt_ac = pytest.importorskip("torchtitan.distributed.activation_checkpoint")
    from dataclasses import field, make_dataclass

    job_cls = make_dataclass(
        "Job",
        [
            (
                "activation_checkpoint",
                tt_ac.ActivationCheckpointingConfig,
                field(default_factory=tt_ac.SelectiveAC.Config),
            )
        ],
        kw_only=True,
    )

    want = {
        "none": type(None),
        "full": tt_ac.FullAC.Config,
        "selective_op": tt_ac.SelectiveAC.Config,
        "memory_budget": tt_ac.MemoryBudgetAC.Config,
    }
    for changes in (
        {"training.recompute": "none"},
        {"training.recompute": "full"},
        {},
        {"fsdp.memory_budget": 0.25, "fsdp.compile": True, "launch.device": "cuda"},
    ):
        cfg, tail, _ = ac(**changes)
        job = tyro.cli(job_cls, args=[x for a in tail for x in a])
        assert type(job.activation_checkpoint) is want[cfg["torchtitan_mode"]]
        if cfg["torchtitan_mode"] == "memory_budget":
            assert job.activation_checkpoint.memory_budget == 0.25


def test_worker_applies_each_mode_and_keeps_the_gradients() -> None:
    """The FSDP2 worker's blocks: every-N checkpoints the N-th, 2N-th ... block only; per-op
    SAC (torchtitan's policy) and full checkpointing give the gradients of no checkpointing."""
    torch = pytest.importorskip("torch")
    from trainc.launch.shrink import shrink
    from trainc.launch.worker import torch_gpt
    from trainc.launch.worker.engines.fsdp import apply_recompute

    _, diags, plan = plan_and_estimate(make(**{**FSDP, "parallel.tp": 1}))
    assert plan is not None, [d.message for d in diags if d.is_error]
    j = plan.to_json()
    dims, opts = shrink(j), torch_gpt.options(j)
    model = torch_gpt.GPT(dims, opts)
    assert (
        apply_recompute(model, {"torchtitan_mode": "selective_layer", "every_n_layers": 2})
        == "selective_layer(every 2)"
    )
    assert [b.recompute for b in model.layers.values()] == ["none", "full"] * (
        len(model.layers) // 2
    ) + ["none"] * (len(model.layers) % 2)
    grads = []
    for mode in ("none", "selective_op", "full"):
        torch.manual_seed(0)
        m = torch_gpt.GPT(dims, opts)
        m.train()
        apply_recompute(m, {"torchtitan_mode": mode})
        block = m.layers["0"]
        x = torch.randn(2, 16, dims.hidden_size, requires_grad=True)
        block(x, None).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])
    torch.testing.assert_close(grads[2], grads[0])
