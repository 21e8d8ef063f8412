"""Property tests over valid specs: estimates never raise, are finite and in range, and per-GPU
parameter memory does not grow with tp or pp."""

from __future__ import annotations

import dataclasses
import json
import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainc.compiler.pipeline import plan_and_estimate
from trainc.schemas import (
    ClusterSpec,
    CpCommType,
    Engine,
    Gpu,
    ModelSpec,
    ParallelSpec,
    Recompute,
    TrainingSpec,
    TrainSpec,
)

P2 = st.sampled_from


@st.composite
def specs(draw):
    engine = draw(P2([Engine.megatron, Engine.megatron, Engine.deepspeed]))
    tp, pp, dp = draw(P2([1, 2, 4, 8])), draw(P2([1, 2, 4])), draw(P2([1, 2, 4]))
    cp = draw(P2([1, 2])) if engine is Engine.megatron else 1
    vpp = draw(P2([1, 2])) if pp > 1 and engine is Engine.megatron else 1
    world = tp * pp * cp * dp
    gpn = min(world, 8)
    moe = engine is Engine.megatron and draw(st.booleans())
    ep = draw(P2([1, 2, 4, 8])) if moe else 1
    zero = draw(P2([0, 1])) if engine is Engine.megatron else draw(P2([0, 1, 2, 3]))
    if engine is Engine.deepspeed and pp > 1:
        zero = min(zero, 1)
    mbs, m = draw(P2([1, 2])), draw(P2([1, 2, 4, 8]))
    m = m * pp if vpp > 1 else m
    model = ModelSpec(
        num_layers=pp * vpp * draw(P2([1, 2, 3])),
        hidden_size=1024,
        num_attention_heads=16,
        num_query_groups=draw(P2([8, 16])),
        ffn_hidden_size=4096,
        vocab_size=32000,
        seq_length=draw(P2([1024, 4096])),
        num_experts=8 if moe else None,
        moe_router_topk=2,
        untie_embeddings_and_output_weights=draw(st.booleans()),
    )
    return TrainSpec(
        engine=engine,
        model=model,
        cluster=ClusterSpec(
            num_nodes=world // gpn,
            gpus_per_node=gpn,
            gpu=Gpu.h100_80g,
            comm_overlap=draw(P2([0.0, 0.5])),
        ),
        parallel=ParallelSpec(
            tp=tp,
            pp=pp,
            vpp=vpp,
            cp=cp,
            ep=ep,
            zero_stage=zero,
            cp_comm_type=draw(P2(list(CpCommType))),
        ),
        training=TrainingSpec(
            micro_batch_size=mbs,
            global_batch_size=mbs * dp * m,
            recompute=draw(P2(list(Recompute))),
        ),
    )


def estimate_or_skip(spec):
    _, _diags, plan = plan_and_estimate(spec)
    assume(plan is not None)
    return plan.to_json()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(specs())
def test_estimates_finite_and_in_range(spec):
    plan = estimate_or_skip(spec)
    e = plan["estimates"]
    json.dumps(e)  # JSON-ready
    for k in ("params", "grads", "optimizer", "activations", "total"):
        assert isinstance(e["memory_bytes"][k], int) and e["memory_bytes"][k] >= 0
    assert all(isinstance(v, int) and v >= 0 for v in e["comm_bytes_per_step"].values())
    for k in ("flops_per_step", "step_time_seconds", "tokens_per_second", "mfu"):
        assert math.isfinite(e[k]) and e[k] >= 0
    assert 0 <= e["mfu"] <= 1
    assert 0 <= e["pipeline_bubble_fraction"] < 1
    assert e["step_time_seconds"] > 0


def _max_stage_params(spec):
    plan = estimate_or_skip(spec)
    return max(s["params"] for s in plan["estimates"]["memory_per_stage"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(specs(), st.sampled_from(["tp", "pp"]))
def test_param_memory_non_increasing_in_tp_and_pp(spec, axis):
    assume(spec.engine is Engine.megatron)
    par = spec.parallel
    bigger = dataclasses.replace(par, **{axis: getattr(par, axis) * 2})
    grown = dataclasses.replace(
        spec,
        parallel=bigger,
        cluster=dataclasses.replace(spec.cluster, num_nodes=spec.cluster.num_nodes * 2),
    )
    if axis == "pp":  # keep layers divisible and the interleaved micro-batch rule
        grown = dataclasses.replace(
            grown, model=dataclasses.replace(spec.model, num_layers=spec.model.num_layers * 2)
        )
        spec = dataclasses.replace(spec, model=grown.model)
    a = _max_stage_params(spec)
    b = _max_stage_params(grown)
    assert b <= a
