"""check_fit, the pass after estimate: TRC4xx resource fit, checked on the estimates (memory per
GPU, pipeline bubble).

TRC401 compares the most loaded stage's estimated memory with ``gpu_memory_gib -
memory_reserve_gib`` (GiB = 2**30 bytes) and rejects only a sure out-of-memory: an estimate above
the budget by more than the memory model's error margin (:data:`OOM_MARGIN`). Between a sure fit
(at most ``1 - TIGHT_MARGIN`` of the budget) and a sure OOM the verdict is TRC403, a warning with
the margin. When it does not fit, the fix lists the cheapest changes that would, found by the
what-if search (:func:`trainc.compiler.fit.whatif.fitting_changes`) on the ``evaluate`` function
the driver hands ``check_fit`` (:func:`trainc.compiler.pipeline.plan_and_estimate`), so this
module imports no other pass.

TRC420 / TRC421 check DeepSpeed's and FSDP2's CPU offload against the node's host memory
(``cluster.host_memory_gib``): see :func:`host_offload_bytes_per_node`.

TRC402 warns when the pipeline bubble exceeds 25 % of the step and computes the micro-batch count
that brings it under: ``(p - 1)/(v*m + p - 1) <= 1/4  <=>  v*m >= 3(p - 1)``.

TRC404 checks the step time against ``launch.time_limit``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.estimate.engines import ESTIMATES
from trainc.compiler.estimate.params import stage_params
from trainc.compiler.fit.whatif import Evaluate, fitting_changes
from trainc.compiler.ir import Estimates, Plan
from trainc.compiler.support.slurm_time import signal_lead_seconds, time_limit_seconds
from trainc.schemas import Device, Engine, Offload

GiB = 2**30

BUBBLE_LIMIT = 0.25

#: The memory model's error margin over the budget: an estimate above ``budget x (1 + this)`` is
#: a sure OOM (TRC401). The estimate counts the buffers Megatron-Core / DeepSpeed allocate at the
#: peak, not the caching allocator's fragmentation nor workspaces beyond memory_reserve_gib; on
#: the published runs (bench/fidelity.py, read with the recompute / sharding the recipes use)
#: no layout that ran is above its budget by more than this (docs/performance.md).
OOM_MARGIN = 0.10

#: Below ``budget x (1 - this)`` the estimate is a sure fit; between that and the OOM margin
#: TRC403 warns (the allocator's fragmentation is typically a few per cent of the peak).
TIGHT_MARGIN = 0.05


def is_tight(total_bytes: float, budget_bytes: float) -> bool:
    """Per-GPU memory above ``1 - TIGHT_MARGIN`` of the budget (bytes both): TRC403's range
    (and TRC401's beyond its margin); False without a budget."""
    return budget_bytes > 0 and total_bytes > budget_bytes * (1 - TIGHT_MARGIN)


#: DeepSpeed's ``additional_buffer_factor`` in its ZeRO-2/3 memory estimators (0.19.8): the host
#: needs up to this multiple of the offloaded states for pinned transfer buffers and the CPU
#: Adam's work space. Offloaded states within ``host_memory_gib / this`` are a sure fit.
HOST_BUFFER_FACTOR = 1.5


def _show(edits: dict[str, Any]) -> str:
    return ", ".join(f"{k}={getattr(v, 'value', v)}" for k, v in edits.items())


def _listed(r: dict[str, Any]) -> str:
    added = f", +{r['gpus_added']} GPUs" if r["gpus_added"] else ""
    tight = ""
    share = (r["budget"] - r["total"]) / r["budget"] if r["budget"] > 0 else -math.inf
    if r["total"] > r["budget"] * (1 + OOM_MARGIN):  # a reduction that still does not fit
        tight = f" (still {-100 * share:.1f} % over)" if math.isfinite(share) else " (still over)"
    elif is_tight(r["total"], r["budget"]):  # fits, but TRC403
        word = "under" if share >= 0 else "over, inside the margin"
        tight = f" (tight: {abs(100 * share):.1f} % {word})"
    return (
        f"{_show(r['edits'])} -> {r['total'] / GiB:.1f} GiB{tight}, {r['step']:.3g} s/step{added}"
    )


def _memory(plan: Plan, e: Estimates, evaluate: Evaluate | None) -> Iterator[Diagnostic]:
    mem, budget = e.memory_bytes, e.memory_budget_bytes
    if not is_tight(mem.total, budget):
        return
    spec = plan.spec
    c = spec.cluster
    parts = ", ".join(
        f"{k} {getattr(mem, k) / GiB:.1f}" for k in ("params", "grads", "optimizer", "activations")
    )
    margin = (budget - mem.total) / budget if budget > 0 else -1.0
    if mem.total <= budget * (1 + OOM_MARGIN):
        word = "under" if margin >= 0 else "over"
        yield diag(
            R.MEMORY_TIGHT,
            f"estimated memory per GPU ({mem.total / GiB:.1f} GiB on pipeline stage "
            f"{e.memory_stage}: {parts}) is {abs(100 * margin):.1f} % {word} "
            f"gpu_memory_gib - memory_reserve_gib ({c.gpu_memory_gib:g} - "
            f"{c.memory_reserve_gib:g} = {budget / GiB:.1f} GiB), inside the memory "
            f"model's margin (-{100 * TIGHT_MARGIN:g} % .. +{100 * OOM_MARGIN:g} %): it "
            f"may run out of memory",
            "cluster.gpu_memory_gib",
            related=("training.recompute", "training.micro_batch_size"),
            fix="measure the peak on one step (torch.cuda.max_memory_allocated), or "
            "leave room: recompute, a smaller micro batch, more tp/pp "
            "(trainc lint lists the cheapest when it is a sure OOM)",
            memory_bytes=mem.total,
            budget_bytes=budget,
            margin=round(margin, 4),
            stage=e.memory_stage,
        )
        return
    msg = (
        f"estimated memory per GPU ({mem.total / GiB:.1f} GiB on pipeline stage "
        f"{e.memory_stage}: {parts}) exceeds gpu_memory_gib - memory_reserve_gib "
        f"({c.gpu_memory_gib:g} - {c.memory_reserve_gib:g} = {budget / GiB:.1f} GiB) by "
        f"{-100 * margin:.1f} %, more than the memory model's {100 * OOM_MARGIN:g} % margin"
    )
    suggest = evaluate is not None
    cands, fit = fitting_changes(spec, evaluate) if evaluate is not None else ([], False)
    listed = "; ".join(_listed(r) for r in cands)
    if fit:
        top = cands[0]
        faster = min((r["step"] for r in cands if not r["gpus_added"]), default=top["step"])
        how = (
            f"adds {top['gpus_added']} GPUs"
            if top["gpus_added"]
            else "on the same GPUs, the fastest"
            if top["step"] <= faster
            else "on the same GPUs, within 10 % of the fastest without context parallelism "
            "or offload"
        )
        fix = (
            f"cheapest changes that fit (same GPUs first by step time, context parallelism "
            f"or offload after a change within 10 % of it, then the fewest GPUs added): "
            f"{listed}; "
            f"cheapest: {_show(top['edits'])} ({how})"
        )
        edits = {k: getattr(v, "value", v) for k, v in cands[0]["edits"].items()}
    elif cands:
        fix = f"no single or paired change fits; largest reductions: {listed}; add GPUs"
        edits = {}
    elif suggest:
        fix = "no valid change found: add GPUs or use a GPU with more memory"
        edits = {}
    else:
        fix = (
            "more tp/pp, recompute, ZeRO sharding or a smaller micro batch (trainc lint lists them)"
        )
        edits = {}
    related = tuple(sorted({k for r in cands for k in r["edits"]}))
    yield diag(
        R.MEMORY_FIT,
        msg,
        "cluster.gpu_memory_gib",
        related=related,
        fix=fix,
        edits=edits,
        memory_bytes=mem.total,
        budget_bytes=budget,
        margin=round(margin, 4),
        stage=e.memory_stage,
    )


def host_offload_bytes_per_node(plan: Plan) -> float:
    """Bytes of model state DeepSpeed offloads to the host of one node (0 without CPU offload);
    with another engine, what its own offload keeps there (the engine table's
    ``host_offload_bytes``: FSDP2's ``fsdp.cpu_offload``,
    :func:`trainc.compiler.estimate.fsdp.offload_host_bytes_per_node`).

    Per GPU, for its shard of ``P`` parameters over the ZeRO group ``n = dp x cp``: optimizer
    offload (``offload_optimizer: cpu``, ZeRO >= 1) keeps the fp32 master weights and Adam's two
    moments (12 B/param; 8 with fp32 training, whose params are the masters) plus the fp32
    gradient partition the CPU step reads (4 B/param) on the host; parameter offload
    (``offload_param: cpu``, ZeRO-3) adds the 16-bit parameters (2 B/param; 4 in fp32). Summed over
    the ``gpus_per_node`` GPUs of a node (the most loaded pipeline stage's GPUs, a bound for
    pp > 1): with dp = world this is DeepSpeed's ``estimate_zero3_model_states_mem_needs``
    (0.19.8, zero_init=True) ``16 P / nodes`` (``18 P / nodes`` with parameter offload) before its
    1.5x ``additional_buffer_factor`` (:data:`HOST_BUFFER_FACTOR`).

    NVMe offload keeps the states on disk (only pinned buffers on the host): not counted.
    """
    spec = plan.spec
    if spec.engine is not Engine.deepspeed:
        return ESTIMATES[spec.engine].host_offload_bytes(spec, plan)
    t, z = spec.training, spec.parallel.zero_stage
    fp32 = t.precision.value == "fp32"
    per_param = 0.0
    if t.offload_optimizer is Offload.cpu and z >= 1:
        per_param += (8 if fp32 else 12) + 4
    if t.offload_param is Offload.cpu and z >= 3:
        per_param += 4 if fp32 else 2
    if per_param == 0.0:
        return 0.0
    n = plan.derived.dp * plan.derived.cp
    most = max(sp.total for sp in stage_params(spec, plan))
    return per_param * most / n * spec.cluster.gpus_per_node


@dataclass(frozen=True, slots=True)
class _HostOffload:
    """What TRC420 / TRC421 say of one kind of CPU offload (DeepSpeed's ZeRO-Offload or an
    engine's own): the texts and edits that differ between them."""

    head: str
    """The finding's opening: what the states are and their bytes per node against the budget."""
    keys: tuple[str, ...]
    """The spec keys that turn the offload on (the findings' related keys)."""
    shard_edits: Callable[[int], dict[str, Any]]
    """The edits besides ``cluster.num_nodes`` that shard over the grown data-parallel degree."""
    instead: str
    """The option that moves the states off the host."""
    move: str
    """TRC420's fix after "add nodes or "."""
    tight: str
    """TRC421's clause after the head: why a fit within the budget may still run out."""
    measure: str
    """What measures the host peak, after ``free -g``."""


def _host_memory(plan: Plan) -> Iterator[Diagnostic]:
    """TRC420 / TRC421: the host memory per node the CPU offload needs
    (:func:`host_offload_bytes_per_node`) against ``cluster.host_memory_gib``."""
    spec = plan.spec
    c = spec.cluster
    if c.host_memory_gib is None:
        return
    need = host_offload_bytes_per_node(plan)
    budget = c.host_memory_gib * GiB
    if need == 0.0 or need * HOST_BUFFER_FACTOR <= budget:
        return
    margin = (budget - need) / budget
    own = ESTIMATES[spec.engine].host_offload_bytes(spec, plan) > 0  # FSDP2's CPUOffloadPolicy
    offload = (_own_offload if own else _zero_offload)(plan, need, margin)
    yield from _host_findings(plan, need, budget, margin, offload)


def _over(margin: float, host_memory_gib: float) -> str:
    """How far the need is under or over ``cluster.host_memory_gib`` (``margin`` = (budget -
    need) / budget): the last words of the findings' head."""
    return (
        f"{100 * abs(margin):.1f} % {'under' if margin >= 0 else 'over'} "
        f"cluster.host_memory_gib ({host_memory_gib:g} GiB)"
    )


def _zero_offload(plan: Plan, need: float, margin: float) -> _HostOffload:
    """DeepSpeed's ZeRO-Offload (``training.offload_optimizer`` / ``offload_param: cpu``): more
    nodes grow dp, NVMe offload moves the states to disk; its estimator's buffer factor."""
    c, t = plan.spec.cluster, plan.spec.training
    what = " and ".join(
        k
        for k, v in (("optimizer", t.offload_optimizer), ("parameters", t.offload_param))
        if v is Offload.cpu
    )
    return _HostOffload(
        head=f"the {what} states DeepSpeed offloads to the CPU need {need / GiB:.1f} GiB of host "
        f"memory per node ({c.gpus_per_node} GPUs x their ZeRO shard of fp32 master weights, "
        f"Adam moments and fp32 gradients{', and 16-bit parameters' if 'param' in what else ''}"
        f"), {_over(margin, c.host_memory_gib or 0)}",
        keys=("training.offload_optimizer", "training.offload_param"),
        shard_edits=lambda dp: {},
        instead="offload to NVMe (training.offload_optimizer=nvme with training.nvme_path)",
        move="move the states",
        tight=f", but DeepSpeed's estimator asks {HOST_BUFFER_FACTOR:g}x that "
        f"({need * HOST_BUFFER_FACTOR / GiB:.1f} GiB) for pinned buffers and the CPU optimizer",
        measure=", or DeepSpeed's see_memory_usage",
    )


def _own_offload(plan: Plan, need: float, margin: float) -> _HostOffload:
    """An engine's own CPU offload (FSDP2's ``fsdp.cpu_offload``): more nodes grow the shard
    group (``fsdp.dp_shard``, dp_replicate kept), ``fsdp.cpu_offload=false`` moves the states to
    the GPUs; FSDP2 has no NVMe offload."""
    spec = plan.spec
    c = spec.cluster
    replicate = max(spec.fsdp.dp_replicate, 1)
    return _HostOffload(
        head=f"the sharded states FSDP2's CPU offload (fsdp.cpu_offload) keeps on the host need "
        f"{need / GiB:.1f} GiB of host memory per node ({c.gpus_per_node} GPUs x their shard of "
        f"fp32 parameters, fp32 gradients and optimizer states), "
        f"{_over(margin, c.host_memory_gib or 0)}",
        keys=("fsdp.cpu_offload",),
        shard_edits=lambda dp: {"fsdp.dp_shard": dp // replicate},
        instead="fsdp.cpu_offload=false if the GPU memory allows (the states then live on the "
        "GPUs)",
        move="keep the states on the GPUs",
        tight=f", but pinned buffers and the CPU optimizer's work space can take "
        f"{HOST_BUFFER_FACTOR:g}x that ({need * HOST_BUFFER_FACTOR / GiB:.1f} GiB)",
        measure="",
    )


def _host_findings(
    plan: Plan, need: float, budget: float, margin: float, o: _HostOffload
) -> Iterator[Diagnostic]:
    """TRC420 (``need`` bytes per node over ``budget``: a sure host OOM) or TRC421 (within it,
    but not within :data:`HOST_BUFFER_FACTOR` x ``need``) for the offload ``o``; ``margin`` =
    (budget - need) / budget. The fix: the nodes over which the offloaded states fit the budget
    with the buffer factor (more nodes shard them further: dp grows with num_nodes at fixed
    tp/pp/cp), ``o.instead``, or a node with more host memory."""
    spec = plan.spec
    c, p, tr = spec.cluster, spec.parallel, spec.training
    total = need * c.num_nodes
    nodes_fit = math.ceil(total * HOST_BUFFER_FACTOR / budget - 1e-9)
    dp_new = nodes_fit * c.gpus_per_node // (p.tp * p.pp * p.cp)
    edits: dict[str, Any] = {"cluster.num_nodes": nodes_fit, **o.shard_edits(dp_new)}
    step = tr.micro_batch_size * dp_new
    if tr.global_batch_size % step:
        edits["training.global_batch_size"] = math.ceil(tr.global_batch_size / step) * step
    also = " and ".join(f"{k}={v}" for k, v in edits.items() if k != "cluster.num_nodes")
    options = (
        f"cluster.num_nodes={nodes_fit}{f' with {also}' if also else ''} (the states shard "
        f"over {nodes_fit * c.gpus_per_node} GPUs: {total / nodes_fit / GiB:.1f} GiB per node, "
        f"within the {HOST_BUFFER_FACTOR:g}x buffer factor), {o.instead}, or a node with at "
        f"least {math.ceil(need * HOST_BUFFER_FACTOR / GiB)} GiB of host memory"
    )
    facts: dict[str, Any] = dict(
        host_bytes=round(need),
        host_budget_bytes=round(budget),
        margin=round(margin, 4),
        nodes_fit=nodes_fit,
    )
    if need > budget:
        yield diag(
            R.HOST_MEMORY_FIT,
            o.head + ": a sure host out-of-memory (the OOM killer ends the ranks)",
            "cluster.host_memory_gib",
            related=(*o.keys, "cluster.num_nodes"),
            fix=f"add nodes or {o.move}: " + options,
            edits=edits,
            **facts,
        )
    else:
        yield diag(
            R.HOST_MEMORY_TIGHT,
            o.head + o.tight + ": the host may run out of memory",
            "cluster.host_memory_gib",
            related=o.keys,
            fix=f"measure the host peak on one step (free -g{o.measure}), or leave room: "
            + options,
            **facts,
        )


def _bubble(plan: Plan, e: Estimates) -> Iterator[Diagnostic]:
    spec, d = plan.spec, plan.derived
    bubble = e.pipeline_bubble_fraction
    if bubble <= BUBBLE_LIMIT:
        return
    p, v, m = d.pp, d.vpp, d.num_microbatches
    mbs, dp = spec.training.micro_batch_size, d.dp
    need = math.ceil(3 * (p - 1) / v)
    if v > 1:
        need = math.ceil(need / p) * p  # interleaving needs m % p == 0
    gbs = mbs * dp * need
    options = [f"training.global_batch_size={gbs} ({need} micro-batches)"]
    edits: dict[str, Any] = {"training.global_batch_size": gbs}
    smaller = [
        b
        for b in range(mbs - 1, 0, -1)
        if mbs % b == 0 and spec.training.global_batch_size // (b * dp) >= need
    ]
    if smaller:
        options.insert(0, f"training.micro_batch_size={smaller[0]}")
        edits = {"training.micro_batch_size": smaller[0]}
    msg = (
        f"pipeline bubble ({100 * bubble:.1f} % of the step) exceeds 25 %: pp ({p}) with "
        f"{m} micro-batches{f' and vpp {v}' if v > 1 else ''}; (p-1)/(v*m+p-1)"
    )
    yield diag(
        R.BUBBLE_HIGH,
        msg,
        "training.global_batch_size",
        related=("parallel.pp", "training.micro_batch_size"),
        fix="raise the micro-batch count: " + " or ".join(options),
        edits=edits,
        bubble=bubble,
        pp=p,
        num_microbatches=m,
        vpp=v,
    )


def _time_limit(plan: Plan, e: Estimates) -> Iterator[Diagnostic]:
    """TRC404: the step time (its p90 where the estimate carries a band) against
    ``launch.time_limit``. A step longer than the limit never completes. A job makes no lasting
    progress either when no checkpoint falls inside it: the ``save_interval`` checkpoints come
    later than the limit, and the one ``--signal=USR1@LEAD`` asks for
    (:func:`trainc.compiler.support.slurm_time.signal_lead_seconds`) needs the running step to end
    within the lead; each requeue then starts again from the same checkpoint."""
    lc = plan.spec.launch
    limit = time_limit_seconds(lc.time_limit)
    if limit is None:
        return
    step = e.step_time_p90_seconds or e.step_time_seconds
    lead = signal_lead_seconds(lc.time_limit)
    shown = f"{step:,.0f} s" + (" (p90)" if e.step_time_p90_seconds else "")
    shorten = "shorten the step (a smaller training.global_batch_size or more GPUs)"
    # the partition's MaxTime (cluster.max_time_limit, TRC514) bounds how far the limit can rise
    most_text = plan.spec.cluster.max_time_limit
    cap = time_limit_seconds(most_text) if most_text is not None else None
    if step >= limit:
        if cap is not None and step >= cap:
            fix = (
                f"{shorten}: the partition's MaxTime (cluster.max_time_limit {most_text} = "
                f"{cap:,} s) is shorter than one step"
            )
        else:
            within = f" (at most cluster.max_time_limit {most_text})" if cap is not None else ""
            fix = f"raise launch.time_limit above {step:,.0f} s{within}, or {shorten}"
        yield diag(
            R.STEP_TIME_LIMIT,
            f"one step ({shown}) is longer than launch.time_limit "
            f"({lc.time_limit} = {limit:,} s): the job ends before its first step",
            "launch.time_limit",
            related=("training.global_batch_size",),
            fix=fix,
            step_seconds=step,
            time_limit_seconds=limit,
        )
    elif step > lead and lc.save_interval * step > limit:
        most = max(1, int(limit // step) - 1)
        yield diag(
            R.STEP_TIME_LIMIT,
            f"no checkpoint is written inside one job: save_interval "
            f"({lc.save_interval}) x step ({shown}) = {lc.save_interval * step / 3600:,.1f}"
            f" h exceeds launch.time_limit ({lc.time_limit}), and the checkpoint Slurm's "
            f"SIGUSR1 asks for {lead} s before the limit needs the running step to end "
            "within that lead; every requeue starts again from the same checkpoint",
            "launch.save_interval",
            related=("launch.time_limit",),
            fix=f"set launch.save_interval to at most {most}, "
            + ("raise launch.time_limit, or " if cap is None or limit < cap else "or ")
            + shorten,
            edits={"launch.save_interval": most},
            step_seconds=step,
            signal_lead_seconds=lead,
            save_interval=lc.save_interval,
        )


def check_fit(plan: Plan, *, evaluate: Evaluate | None = None) -> Iterator[Diagnostic]:
    """Fit diagnostics of ``plan.estimates``: TRC401 (error), TRC402, TRC403 and TRC404
    (warnings).

    ``evaluate`` re-plans a changed spec for the what-if search behind TRC401's fix (a few dozen
    re-estimates); without it (the layout planner needs only the verdict) the fix is generic.
    """
    e = plan.estimates
    if e is None:
        return
    spec = plan.spec
    # A shrunk or CPU run does not hold the full model on GPUs: the GPU fit does not apply.
    if not (spec.launch.shrink or spec.launch.device is Device.cpu):
        yield from _memory(plan, e, evaluate)
        yield from _host_memory(plan)
        yield from _time_limit(plan, e)
    yield from _bubble(plan, e)
