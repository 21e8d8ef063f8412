"""engine=deepspeed: the same GPTModel under deepspeed.initialize, ZeRO-1/2/3 and optimizer offload,
on CPU (DS_ACCELERATOR=cpu, gloo, no JIT builds).

Each case checks (a) equality with a one-process DeepSpeed reference of the same model and data
(the same tolerances as the Megatron cases), (b) the loss falls, (c) the step-16 checkpoint replays
steps 17-24 to the same losses, (d) the groups parallel_state formed. Across ZeRO stages fp32
training is numerically the same, which is checked too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.e2e import (
    base_spec,
    check_case,
    close,
    compile_case,
    launch,
    merge,
    references,
    steps,
)

CASES: dict[str, dict] = {
    "ds_zero1": {"parallel": {"zero_stage": 1}},
    "ds_zero2": {"parallel": {"zero_stage": 2}},
    "ds_zero3": {"parallel": {"zero_stage": 3}},
    "ds_zero2_offload": {"parallel": {"zero_stage": 2}, "training": {"offload_optimizer": "cpu"}},
}
LOGS: dict[str, str] = {}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("e2e_ds")
    return {
        name: compile_case(
            tmp, name, merge(base_spec(name, 2), merge({"engine": "deepspeed"}, over))
        )
        for name, over in CASES.items()
    }


@pytest.fixture(scope="module")
def reference_logs(compiled) -> dict[str, str]:
    return references(list(compiled.values()))


@pytest.mark.parametrize("name", list(CASES))
def test_deepspeed_trains_like_reference(name, compiled, reference_logs):
    out = compiled[name]
    log = launch(out, ["--resume-check", "16"])
    check_case(name, out, log, reference_logs[name])
    assert "torch_adam=true" in log  # no FusedAdam JIT build on CPU
    if "offload" in name:
        assert "offload_optimizer=True" in log
    LOGS[name] = log


def test_zero_stages_agree():
    """fp32 ZeRO partitioning is numerically transparent: every stage logs the same losses."""
    if len(LOGS) < 2:
        pytest.skip("needs the stage runs of this module")
    base = steps(next(iter(LOGS.values())))
    for name, log in LOGS.items():
        for n, rec in steps(log).items():
            assert close(rec["loss"], base[n]["loss"], 2e-3), f"{name} step {n}"


def test_dropout_resumes_to_the_same_losses(tmp_path, compiled):
    """The random-number state travels in DeepSpeed's client state: with hidden and attention
    dropout the step-16 checkpoint replays steps 17-24 to the same losses (which differ from the
    dropout-free run's)."""
    spec = merge(
        base_spec("ds_dropout", 2),
        {
            "engine": "deepspeed",
            "parallel": {"zero_stage": 1},
            "model": {"hidden_dropout": 0.2, "attention_dropout": 0.2},
        },
    )
    log = launch(compile_case(tmp_path, "ds_dropout", spec), ["--resume-check", "16"])
    got, again = steps(log), steps(log, resume=True)
    plain = steps(LOGS["ds_zero1"]) if "ds_zero1" in LOGS else steps(launch(compiled["ds_zero1"]))
    assert any(not close(got[n]["loss"], plain[n]["loss"], 1e-4) for n in range(2, 25))
    assert sorted(again) == list(range(17, 25))
    for n in again:
        assert close(again[n]["loss"], got[n]["loss"], 1e-6), (n, again[n], got[n])
