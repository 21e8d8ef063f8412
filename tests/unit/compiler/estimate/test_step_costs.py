"""What a step costs besides its GEMMs: the optimizer step (bytes per parameter by dtype over
HBM), the host's per-step cost, NCCL's alpha-beta latency per collective, in-network reduction
(cluster.sharp), a power / clock cap (cluster.clock_cap, TRC109) and the B300 profile."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.estimate import make_spec, run_ir
from trainc.compiler.estimate.comm import collective_seconds, ring_steps
from trainc.compiler.estimate.kernels import hardware
from trainc.compiler.estimate.time import (
    optimizer_bytes_per_param,
    optimizer_shards,
    optimizer_step_seconds,
)
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.support.hardware import GPUS
from trainc.schemas import Gpu, Optimizer, StateDtype


def _with(spec, section, **kw):
    return dataclasses.replace(spec, **{section: dataclasses.replace(getattr(spec, section), **kw)})


def test_optimizer_bytes_per_param_by_dtype():
    s = make_spec()
    assert optimizer_bytes_per_param(s) == 34  # 2x4 grad + 2x4 main + 2x(4+4) moments + 2
    bf16 = _with(
        s,
        "training",
        main_grads_dtype=StateDtype.bf16,
        exp_avg_dtype=StateDtype.bf16,
        exp_avg_sq_dtype=StateDtype.bf16,
    )
    assert optimizer_bytes_per_param(bf16) == 2 * 2 + 2 * 4 + 2 * (2 + 2) + 2  # 22
    assert optimizer_bytes_per_param(_with(s, "training", optimizer=Optimizer.sgd)) == 26


def test_optimizer_step_seconds_and_shards():
    s = _with(make_spec(nodes=2), "cluster", optimizer_step=True)  # tp 2 x pp 2 x dp 4
    plan = run_ir(s)
    assert optimizer_shards(s, plan) == (4, 4)
    # 8e9 parameters over 64 ranks, 34 B each, 6.4e12 B/s: 0.664 ms
    assert optimizer_step_seconds(s, 8e9, 0, 64, 1, 6.4e12) == pytest.approx(8e9 / 64 * 34 / 6.4e12)
    assert optimizer_step_seconds(s, 1e9, 1e9, 1, 8, 1e12) == pytest.approx(1.125e9 * 34 / 1e12)
    assert optimizer_step_seconds(s, 1e9, 0, 1, 1, 0) == 0.0
    # the critical stage's optimizer step in the plan: its parameters / 4 shards x 34 B over the
    # A100's 2039 GB/s x 0.8
    opt = plan.estimates.compute_seconds_by_kind["optimizer"]
    hbm = hardware(plan.spec).hbm
    stage_params = [opt * hbm / 34 * 4]
    assert 1e9 < stage_params[0] < 4e9  # a quarter of 8B params (tp 2 x pp 2), a few 1e9


def test_step_overhead_adds_to_the_step_exactly():
    s = make_spec(nodes=2)
    base = run_ir(s).estimates.step_time_seconds
    slow = run_ir(_with(s, "cluster", step_overhead_us=5000.0)).estimates.step_time_seconds
    assert slow - base == pytest.approx(0.005, abs=2e-6)  # reported to 6 significant digits


def test_step_cost_switches_are_off_by_default():
    """optimizer_step and collective_latency default to off: the step is bytes over bandwidth
    and micro-batches, as without the terms; each switch on only adds time."""
    s = make_spec(nodes=2)
    assert (s.cluster.optimizer_step, s.cluster.collective_latency) == (False, False)
    off = run_ir(s).estimates
    assert off.compute_seconds_by_kind["optimizer"] == 0.0
    opt = run_ir(_with(s, "cluster", optimizer_step=True)).estimates
    assert opt.compute_seconds_by_kind["optimizer"] > 0
    assert opt.step_time_seconds - off.step_time_seconds == pytest.approx(
        opt.compute_seconds_by_kind["optimizer"], abs=2e-6
    )  # 6 significant digits
    lat = run_ir(_with(s, "cluster", collective_latency=True)).estimates
    b = {c.name: c for c in off.comm_collectives}
    for c in lat.comm_collectives:
        if c.count:
            assert c.seconds > b[c.name].seconds, c.name
    assert lat.step_time_seconds > off.step_time_seconds


def test_userbuffers_tp_collectives_pay_no_nccl_latency():
    """Under tp_comm_overlap Transformer Engine's userbuffers, not NCCL, carry the attention /
    MLP TP collectives: collective_latency leaves them at bytes over bandwidth."""
    s = _with(make_spec(nodes=2), "cluster", collective_latency=True)
    name = "all_gather+reduce_scatter"
    seconds = {}
    for ub in (False, True):
        est = run_ir(_with(s, "training", tp_comm_overlap=ub)).estimates
        seconds[ub] = {c.name: c.seconds for c in est.comm_collectives if c.axis == "tp"}
    plain = run_ir(_with(s, "cluster", collective_latency=False)).estimates
    p = {c.name: c.seconds for c in plain.comm_collectives if c.axis == "tp"}
    assert name in p
    assert seconds[True][name] == pytest.approx(p[name])
    assert seconds[False][name] > p[name]


def test_ring_steps_per_collective():
    assert ring_steps("dense grad all_reduce", 8) == (14, 1)
    assert ring_steps("all_gather+reduce_scatter", 8) == (14, 2)
    assert ring_steps("dense grad reduce_scatter", 8) == (7, 1)
    assert ring_steps("p2p", 4) == (3, 3)  # the CP ring: one send/recv per step
    assert ring_steps("all_reduce", 1) == (0, 0)


def test_collective_latency_alpha_beta():
    # no bytes: LL's latency, 6.6 us + 14 NVLink steps x 0.6 us (NCCL tuning.cc)
    assert collective_seconds(0, 1, 14, 1, 0, 1e11) == pytest.approx(15.0e-6)
    # across the network: 2 network steps at 2.7 us (LL)
    assert collective_seconds(0, 1, 14, 1, 2, 1e11) == pytest.approx(
        (6.6 + 12 * 0.6 + 2 * 2.7) * 1e-6
    )
    # large messages: Simple (full bandwidth) plus its latency
    big = collective_seconds(1e9, 1, 14, 1, 0, 1e11)
    assert big == pytest.approx(1e-2 + (8.4 + 14 * 3.4) * 1e-6)
    # count 0 (timed by bytes): no latency
    assert collective_seconds(1e9, 0, 14, 1, 0, 1e11) == pytest.approx(1e-2)
    # SHARP: one network hop whatever the ring's network steps
    assert collective_seconds(0, 1, 14, 1, 6, 1e11, sharp=True) == collective_seconds(
        0, 1, 14, 1, 1, 1e11
    )


def test_sharp_halves_the_dp_reduction_across_nodes():
    s = make_spec(nodes=4, parallel__tp=8, parallel__pp=1)  # dp 4 across 4 nodes

    base = run_ir(s).estimates
    sharp = run_ir(_with(s, "cluster", sharp=True)).estimates
    lat = _with(s, "cluster", collective_latency=True)
    assert (
        run_ir(_with(lat, "cluster", sharp=True)).estimates.step_time_seconds
        < run_ir(lat).estimates.step_time_seconds
    )
    b = {c.name: c for c in base.comm_collectives}
    h = {c.name: c for c in sharp.comm_collectives}
    rs = "dense grad reduce_scatter"
    ag = "dense param all_gather"
    assert b[rs].crosses_nodes
    assert h[rs].seconds < 0.6 * b[rs].seconds  # half the bytes (latency aside)
    assert h[ag].seconds == b[ag].seconds  # gathers are not reductions


def test_clock_cap_scales_every_peak():
    s = run_ir(make_spec()).spec
    full, capped = hardware(s), hardware(_with(s, "cluster", clock_cap=0.8))
    assert {k: capped.peaks[k] / v for k, v in full.peaks.items()} == pytest.approx(
        dict.fromkeys(full.peaks, 0.8)
    )
    assert capped.hbm == full.hbm


@pytest.mark.parametrize("cap", [0.0, -1.0, 1.2])
def test_trc109_clock_cap_outside_0_1(cap):
    _, diags, _ = plan_and_estimate(_with(make_spec(), "cluster", clock_cap=cap))
    [d] = [d for d in diags if d.rule.id == "TRC109"]
    assert d.key == "cluster.clock_cap" and d.is_error
    assert f"cluster.clock_cap ({cap}) must be in (0, 1]" in d.message


def test_b300_profile():
    b = GPUS[Gpu.b300]
    assert b.peaks == {"bf16": 2250.0, "fp8": 4500.0, "fp4": 13500.0}
    assert (
        b.memory_bandwidth_gbps,
        b.intra_node_bandwidth_gbps,
        b.inter_node_bandwidth_gbps,
        b.sm_count,
    ) == (8000.0, 900.0, 100.0, 160)
