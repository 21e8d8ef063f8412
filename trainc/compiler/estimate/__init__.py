"""estimate: per-GPU memory, communication, pipeline bubble, FLOPs, step time and the rank map
``estimate(plan)`` returns the typed :class:`~trainc.compiler.ir.Estimates` (plan.json's
``estimates``).

Modules, one quantity each: :mod:`.params` (parameter counts per stage), :mod:`.memory` (model
states by engine / ZeRO stage), :mod:`.engines` (the per-engine functions, looked up by Engine),
:mod:`.activations` (Korthikanti et al. 2022), :mod:`.comm`
(collectives by axis), :mod:`.bubble`, :mod:`.flops` (Megatron's count), :mod:`.kernels` (kernel
times on the GPU profile), :mod:`.time` (step time, tokens/s, MFU, exposed seconds per
collective), :mod:`.rankmap` (Megatron-Core's rank layout), :mod:`.band` (the step time's
p10-p90 range), :mod:`.megatron_ref` (Megatron's own theoretical estimator, the reference the
tests compare with).

Which GPU the per-GPU numbers describe: ``memory_bytes`` is the most loaded pipeline stage
(``memory_stage``; every stage is in ``memory_per_stage``); ``comm_bytes_per_step`` takes, per axis,
the busiest stage; the time model and ``comm_seconds_per_step`` / ``comm_collectives`` describe
the slowest stage (``critical_stage``).

Output is deterministic: bytes are ints, other floats are rounded to 6 significant digits.
"""

from __future__ import annotations

from trainc.compiler.estimate.activations import stage_activation_bytes
from trainc.compiler.estimate.band import step_time_band
from trainc.compiler.estimate.bubble import bubble_fraction
from trainc.compiler.estimate.comm import AXES, stage_comm, time_collectives
from trainc.compiler.estimate.engines import ESTIMATES
from trainc.compiler.estimate.flops import flops_per_step, hardware_flops_per_step
from trainc.compiler.estimate.params import StageParams, stage_params, total_params
from trainc.compiler.estimate.rankmap import members_per_domain, rank_map_summary
from trainc.compiler.estimate.time import step_time
from trainc.compiler.ir import (
    CollectiveEstimate,
    Estimates,
    MemoryBytes,
    Plan,
    StageMemory,
    filled,
)
from trainc.schemas import TimeModel, TrainSpec


def r6(x: float) -> float:
    """Round to 6 significant digits (byte-stable JSON).

    >>> r6(0.123456789), r6(123456789.0)
    (0.123457, 123457000.0)
    """
    return float(f"{x:.6g}")


def _int(x: float) -> int:
    return round(x)


def memory_per_stage(
    spec: TrainSpec, plan: Plan, sp: list[StageParams] | None = None
) -> list[StageMemory]:
    """Bytes per GPU on every stage: params, grads, optimizer, activations, total.
    ``sp``: :func:`~.params.stage_params` of the plan when the caller has it already."""
    sp = stage_params(spec, plan) if sp is None else sp
    state_bytes = ESTIMATES[spec.engine].state_bytes
    states = [state_bytes(spec, plan, x) for x in sp]
    acts = stage_activation_bytes(spec, plan)
    out = []
    for r, (st, act) in enumerate(zip(states, acts, strict=True)):
        params, grads, opt, a = _int(st.params), _int(st.grads), _int(st.optimizer), _int(act)
        out.append(
            StageMemory(
                stage=r,
                layers=plan.derived.layers_per_stage[r],
                params=params,
                grads=grads,
                optimizer=opt,
                activations=a,
                total=params + grads + opt + a,
            )
        )
    return out


def estimate(plan: Plan) -> Estimates:
    """Estimates of a planned, validated spec (never raises for one)."""
    spec, cl = plan.spec, plan.spec.cluster
    d = plan.derived.to_json()
    sp = stage_params(spec, plan)
    mem = memory_per_stage(spec, plan, sp)
    worst = max(range(len(mem)), key=lambda r: (mem[r].total, -r))
    gpn = cl.gpus_per_node
    domain = filled(cl.nvlink_domain_size, "cluster.nvlink_domain_size")
    rmap = rank_map_summary(d, gpn, domain)
    by_engine = ESTIMATES[spec.engine]
    comms = stage_comm(spec, plan, sp, by_engine.dp_comm)
    crosses = dict(rmap["groups_cross_nvlink_domain"]) | by_engine.group_crossings(spec)
    members = members_per_domain(d, domain) if cl.time_model is TimeModel.kernels else None
    if members is not None:
        members |= by_engine.domain_members(spec)
    time_collectives(spec, comms, crosses, members)
    bubble = bubble_fraction(plan.derived.pp, plan.derived.num_microbatches, plan.derived.vpp)
    flops = flops_per_step(spec, plan)
    st = step_time(spec, plan, comms, bubble, flops, sps=sp)
    by_axis = [c.bytes_by_axis() for c in comms]
    crit = comms[st.critical_stage]
    budget = (filled(cl.gpu_memory_gib, "cluster.gpu_memory_gib") - cl.memory_reserve_gib) * 2**30
    w = mem[worst]
    band = step_time_band(spec)  # the step time's p10-p90 range (.band)
    return Estimates(
        memory_bytes=MemoryBytes(
            params=w.params,
            grads=w.grads,
            optimizer=w.optimizer,
            activations=w.activations,
            total=w.total,
        ),
        memory_stage=worst,
        memory_per_stage=tuple(mem),
        memory_budget_bytes=_int(max(budget, 0.0)),
        params_total=int(total_params(spec, plan)),
        params_per_gpu=_int(sp[worst].total),
        comm_bytes_per_step={a: _int(max(b[a] for b in by_axis)) for a in AXES},
        comm_seconds_per_step={a: r6(v) for a, v in crit.seconds_by_axis().items()},
        comm_collectives=tuple(
            CollectiveEstimate(
                axis=c.axis,
                name=c.name,
                group_size=c.group_size,
                count=c.count,
                sent_bytes=_int(c.sent_bytes),
                received_bytes=_int(c.received_bytes),
                crosses_nodes=c.crosses_nodes,
                bandwidth_gbps=r6(c.bandwidth_gbps),
                seconds=r6(c.seconds),
                exposed_seconds=r6(c.exposed_seconds),
            )
            for c in crit.collectives.values()
        ),
        pipeline_bubble_fraction=r6(bubble),
        flops_per_step=r6(flops),
        hardware_flops_per_step=r6(hardware_flops_per_step(spec, plan)),
        step_time_seconds=r6(st.step_time_seconds),
        compute_seconds=r6(st.compute_seconds),
        exposed_comm_seconds=r6(st.exposed_comm_seconds),
        bubble_seconds=r6(st.bubble_seconds),
        offload_seconds=r6(st.offload_seconds),
        compute_seconds_by_kind={k: r6(v) for k, v in st.compute_by_kind.items()},
        memory_margin=r6((budget - w.total) / budget) if budget > 0 else -1.0,
        critical_stage=st.critical_stage,
        tokens_per_second=r6(st.tokens_per_second),
        mfu=r6(st.mfu),
        assumptions={
            "time_model": cl.time_model.value,
            "compute_efficiency": cl.compute_efficiency,
            "comm_efficiency": cl.comm_efficiency,
            "comm_overlap": cl.comm_overlap,
            "memory_reserve_gib": cl.memory_reserve_gib,
        },
        rank_map=rmap,
        step_time_p10_seconds=r6(st.step_time_seconds * band[0]) if band else None,
        step_time_p90_seconds=r6(st.step_time_seconds * band[1]) if band else None,
        step_time_band=band[2] if band else None,
    )
