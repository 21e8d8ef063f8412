"""engine=fsdp with ``fsdp.cpu_offload`` (torch 2.13 ``CPUOffloadPolicy``): the host bytes per
node the host-memory check (TRC420 / TRC421) compares with ``cluster.host_memory_gib``, and the
PCIe copies and CPU optimizer step the time model adds as offload seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kit import make
from trainc.cli import main
from trainc.compiler.estimate.fsdp import offload_host_bytes, offload_seconds
from trainc.compiler.estimate.host import HOST_MEMORY_BYTES_PER_S, PCIE_BYTES_PER_S
from trainc.compiler.estimate.params import StageParams, stage_params
from trainc.compiler.fit import GiB, host_offload_bytes_per_node
from trainc.compiler.pipeline import State, plan_and_estimate, run_passes

FSDP = {"engine": "fsdp", "parallel.pp": 1}  # kit BASE: one node of 8 GPUs, tp 2 -> dp_shard 4
#: the kit model's parameters on one GPU at tp 2: 8 layers x (attention 4 x 512^2 + SwiGLU MLP
#: 3 x 512 x 2048) + untied embedding and output 2 x 32000 x 512 = 66,322,432 split over tp
#: (33,161,216), plus the norms every tp rank holds whole: 8 x 2 x 512 + 512 = 8,704
P_GPU = 33_161_216 + 8_704
GOLDEN_FSDP = str(
    Path(__file__).resolve().parents[4] / "tests/golden/cases/llama3-8b-fsdp-hsdp/spec.yaml"
)


def _plan(**changes):
    _, diags, plan = plan_and_estimate(make(**FSDP, **changes), normalized=True)
    assert plan is not None and not [d for d in diags if d.is_error], diags
    return plan


def _host_diags(gib):
    state = run_passes(
        State(spec=make(**FSDP, **{"fsdp.cpu_offload": True, "cluster.host_memory_gib": gib})),
        stop_after="check_fit",
    )
    return [d for d in state.diagnostics if d.rule.id in ("TRC420", "TRC421")]


def test_host_bytes_worked_example():
    """Per GPU: its shard of P / dp_shard parameters x (fp32 parameter 4 + fp32 gradient 4 +
    AdamW's two fp32 moments 8) bytes; per node x 8 GPUs. 33,169,920 / 4 = 8,292,480 sharded
    parameters x 16 = 132,679,680 bytes per GPU, x 8 = 1,061,437,440 bytes per node
    (0.989 GiB). SGD (one momentum buffer): 12 bytes per parameter. No offload: nothing."""
    plan = _plan(**{"fsdp.cpu_offload": True})
    [sp] = stage_params(plan.spec, plan)
    assert sp.total == P_GPU == 33_169_920
    assert offload_host_bytes(plan.spec, sp) == 8_292_480 * 16 == 132_679_680
    assert host_offload_bytes_per_node(plan) == 132_679_680 * 8 == 1_061_437_440
    sgd = _plan(**{"fsdp.cpu_offload": True, "training.optimizer": "sgd"})
    assert host_offload_bytes_per_node(sgd) == 8_292_480 * 12 * 8
    assert host_offload_bytes_per_node(_plan()) == 0.0
    # a hand-made stage: 1000 dense parameters over dp_shard 4 -> 250 x 16
    spec = make(**FSDP, **{"fsdp.cpu_offload": True, "fsdp.dp_shard": 4})
    assert (
        offload_host_bytes(spec, StageParams(dense=1000.0, expert=0.0, largest_layer=100.0))
        == 4000.0
    )


def test_host_memory_error_warning_and_fit():
    """0.989 GiB per node: TRC420 under it, TRC421 under 1.5x it (1.48 GiB), silent above."""
    need = 1_061_437_440
    [oom] = _host_diags(0.9)
    assert oom.rule.id == "TRC420" and oom.is_error and oom.key == "cluster.host_memory_gib"
    assert oom.facts["host_bytes"] == need and oom.facts["nodes_fit"] == 2
    # two nodes: dp 8, all of it the shard group (dp_replicate 1), half the bytes per node
    assert oom.edits == {"cluster.num_nodes": 2, "fsdp.dp_shard": 8}
    grown = _plan(
        **{"fsdp.cpu_offload": True, "cluster.num_nodes": 2, "fsdp.dp_shard": 8},
    )
    assert host_offload_bytes_per_node(grown) == need / 2
    [tight] = _host_diags(1.2)
    assert tight.rule.id == "TRC421" and tight.severity.value == "warning"
    assert tight.facts["margin"] == round((1.2 * GiB - need) / (1.2 * GiB), 4)
    assert _host_diags(1.5) == []
    assert _host_diags(None) == []


def test_host_memory_text_is_fsdp2s():
    """The message and fix name FSDP2's offload and what applies to it: more nodes (a larger
    shard group), fsdp.cpu_offload=false, a bigger host; not DeepSpeed, not NVMe."""
    for d in (*_host_diags(0.9), *_host_diags(1.2)):
        text = f"{d.message} {d.fix}"
        assert "fsdp.cpu_offload" in d.message and "FSDP2" in d.message
        assert "DeepSpeed" not in text and "NVMe" not in text and "nvme" not in text
        assert "fsdp.cpu_offload=false" in d.fix and "cluster.num_nodes=2" in d.fix
        assert "GiB of host memory" in d.fix
        assert "training.offload_optimizer" not in d.related
    [oom] = _host_diags(0.9)
    assert oom.message.startswith(
        "the sharded states FSDP2's CPU offload (fsdp.cpu_offload) keeps on the host need "
        "1.0 GiB of host memory per node (8 GPUs x their shard of fp32 parameters, fp32 "
        "gradients and optimizer states), 9.8 % over cluster.host_memory_gib (0.9 GiB)"
    )
    assert "cluster.num_nodes=2 with fsdp.dp_shard=8 (the states shard over 16 GPUs" in oom.fix


def test_offload_seconds_worked_example():
    """S = 8,292,480 sharded parameters, M = 4 micro-batches, reshard_after_forward (2
    all-gathers per micro-batch), 8 GPUs sharing the host bandwidth (h = 200e9 / 8 B/s):
    H2D 2 x 4 x 4 S / 25e9 = 10.6 ms, hidden behind the 28.6 ms of compute; the 3 blocking
    D2H copies and CPU adds 3 x (4 S / 25e9 + 12 S / h) = 15.9 ms; the CPU AdamW step
    28 S / h = 9.3 ms: 25.2 ms per step."""
    s, h = 8_292_480, HOST_MEMORY_BYTES_PER_S / 8
    plan = _plan(**{"fsdp.cpu_offload": True})
    [sp] = stage_params(plan.spec, plan)
    d2h = 3 * (4 * s / PCIE_BYTES_PER_S + 12 * s / h)
    step = 28 * s / h
    assert offload_seconds(plan.spec, plan, sp, 0.0286) == pytest.approx(d2h + step)
    # with no compute to hide behind, the H2D copies show
    h2d = 2 * 4 * 4 * s / PCIE_BYTES_PER_S
    assert offload_seconds(plan.spec, plan, sp, 0.0) == pytest.approx(h2d + d2h + step)
    assert plan.estimates is not None
    assert plan.estimates.offload_seconds == pytest.approx(d2h + step, abs=1e-6)
    assert plan.estimates.offload_seconds == 0.0252091


def test_offload_seconds_zero_without_offload_and_unchanged_step():
    """Without cpu_offload: 0 offload seconds and the step time of the model before FSDP2's
    offload was priced (30.29 ms); with it the step grows, and the GPU optimizer step
    (``cluster.optimizer_step``) is no longer counted: the CPU runs it."""
    off, on = _plan(), _plan(**{"fsdp.cpu_offload": True})
    assert off.estimates is not None and on.estimates is not None
    assert off.estimates.offload_seconds == 0.0
    assert off.estimates.step_time_seconds == 0.0302913
    assert on.estimates.step_time_seconds > off.estimates.step_time_seconds
    # with cluster.optimizer_step the GPU step is priced, except under the offload (CPU step)
    gpu = _plan(**{"cluster.optimizer_step": True})
    cpu = _plan(**{"cluster.optimizer_step": True, "fsdp.cpu_offload": True})
    assert gpu.estimates is not None and cpu.estimates is not None
    assert gpu.estimates.compute_seconds_by_kind["optimizer"] > 0.0
    assert cpu.estimates.compute_seconds_by_kind["optimizer"] == 0.0
    [sp] = stage_params(off.spec, off)
    assert offload_seconds(off.spec, off, sp, 0.0) == 0.0


def test_deepspeed_offload_numbers_unchanged():
    """DeepSpeed ZeRO-2 optimizer offload of the same model: host bytes (16 B per parameter of
    the ZeRO partition, 8 GPUs) and offload seconds as before FSDP2's offload was priced."""
    _, _, plan = plan_and_estimate(
        make(
            **{
                "engine": "deepspeed",
                "parallel.pp": 1,
                "parallel.zero_stage": 2,
                "training.offload_optimizer": "cpu",
            },
        ),
        normalized=True,
    )
    assert plan is not None and plan.estimates is not None
    assert host_offload_bytes_per_node(plan) == 1_061_437_440.0
    assert plan.estimates.offload_seconds == 0.0106144
    assert plan.estimates.step_time_seconds == 0.0381399


def test_explain_shows_fsdp_offload(capsys):
    """`trainc explain` prints the CPU offload row with fsdp.cpu_offload, not without it."""
    assert main(["explain", GOLDEN_FSDP, "fsdp.cpu_offload=true"]) == 0
    assert "CPU offload" in capsys.readouterr().out
    assert main(["explain", GOLDEN_FSDP]) == 0
    assert "CPU offload" not in capsys.readouterr().out
