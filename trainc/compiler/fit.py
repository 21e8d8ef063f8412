"""check_fit, the pass after estimate: TRC4xx resource fit, checked on the estimates (memory per
GPU, pipeline bubble).

TRC401 compares the most loaded stage's estimated memory with ``gpu_memory_gib -
memory_reserve_gib`` (GiB = 2**30 bytes) and rejects only a sure out-of-memory: an estimate above
the budget by more than the memory model's error margin (:data:`OOM_MARGIN`). Between a sure fit
(at most ``1 - TIGHT_MARGIN`` of the budget) and a sure OOM the verdict is TRC403, a warning with
the margin. When it does not fit, the fix lists the cheapest changes
that would: each candidate (more tp or pp or cp, selective/full recompute, the distributed
optimizer or a higher ZeRO stage, optimizer offload, a smaller micro batch) is applied to a copy of
the spec, validated with the same rules as the spec itself (candidates that break a divisibility or
topology rule are dropped), re-estimated, and ranked by predicted step time. If no single change
fits, pairs of changes are tried. The re-estimates go through the driver's own passes: it hands
``check_fit`` an ``evaluate`` function (:func:`trainc.compiler.pipeline.plan_and_estimate`), so
this module imports no other pass.

TRC402 warns when the pipeline bubble exceeds 25 % of the step and computes the micro-batch count
that brings it under: ``(p - 1)/(v*m + p - 1) <= 1/4  <=>  v*m >= 3(p - 1)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from itertools import combinations
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.ir import Estimates, Plan
from trainc.schemas import Device, Engine, Offload, Recompute, TrainSpec

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
MAX_SUGGESTIONS = 4

#: Normalize, validate, plan and estimate a spec; None when it breaks a rule.
Evaluate = Callable[[TrainSpec], Plan | None]


def _set(spec: TrainSpec, dotted: str, value: Any) -> None:
    obj: Any = spec
    *path, last = dotted.split(".")
    for part in path:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def _candidate_edits(spec: TrainSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(shown edits, side edits) of every single change worth trying."""
    p, t, c = spec.parallel, spec.training, spec.cluster
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    domain = c.nvlink_domain_size or c.gpus_per_node
    if p.tp * 2 <= domain:
        side: dict[str, Any] = {"parallel.dp": None, "parallel.sequence_parallel": True}
        if p.etp == p.tp:
            side["parallel.etp"] = p.tp * 2
        out.append(({"parallel.tp": p.tp * 2}, side))
    if p.pipeline_first_stage_layers is None and p.pipeline_last_stage_layers is None:
        out.append(({"parallel.pp": p.pp * 2}, {"parallel.dp": None}))
    if spec.engine is Engine.megatron and spec.model.seq_length >= 8192:
        out.append(({"parallel.cp": p.cp * 2}, {"parallel.dp": None}))
    if t.recompute is Recompute.none:
        out.append(({"training.recompute": Recompute.selective}, {}))
    if t.recompute is not Recompute.full:
        out.append(({"training.recompute": Recompute.full},
                    {"training.recompute_method": None, "training.recompute_num_layers": None}))
    if spec.engine is Engine.megatron:
        if p.zero_stage == 0:
            out.append(({"parallel.zero_stage": 1}, {}))
    else:
        if p.zero_stage < 3:
            out.append(({"parallel.zero_stage": p.zero_stage + 1}, {}))
        if t.offload_optimizer is Offload.none and p.zero_stage >= 1:
            out.append(({"training.offload_optimizer": Offload.cpu}, {}))
    if t.micro_batch_size > 1:
        out.append(({"training.micro_batch_size": t.micro_batch_size // 2}, {}))
    return out


def _try(spec: TrainSpec, edits: dict[str, Any], side: dict[str, Any],
         evaluate: Evaluate) -> dict[str, Any] | None:
    cand = copy.deepcopy(spec)
    for k, v in {**side, **edits}.items():
        _set(cand, k, v)
    plan = evaluate(cand)
    if plan is None or plan.estimates is None:
        return None
    e = plan.estimates
    return {"edits": edits, "total": e.memory_bytes.total,
            "budget": e.memory_budget_bytes, "step": e.step_time_seconds}


def _show(edits: dict[str, Any]) -> str:
    return ", ".join(f"{k}={getattr(v, 'value', v)}" for k, v in edits.items())


def fitting_changes(spec: TrainSpec, evaluate: Evaluate) -> tuple[list[dict[str, Any]], bool]:
    """Candidates ranked by predicted step time; the flag says whether they fit the budget."""
    singles = _candidate_edits(spec)
    tried = [r for e, s in singles if (r := _try(spec, e, s, evaluate)) is not None]
    fits = [r for r in tried if r["total"] <= r["budget"]]
    if not fits:
        for (e1, s1), (e2, s2) in combinations(singles, 2):
            if set(e1) & set(e2):
                continue
            r = _try(spec, {**e1, **e2}, {**s1, **s2}, evaluate)
            if r is not None and r["total"] <= r["budget"]:
                fits.append(r)
    if fits:
        return sorted(fits, key=lambda r: (r["step"], r["total"]))[:MAX_SUGGESTIONS], True
    # only changes that reduce memory are "reductions" (selective recompute saves nothing with
    # fused attention, for example)
    now = evaluate(copy.deepcopy(spec))
    current = now.estimates.memory_bytes.total if now and now.estimates else math.inf
    smaller = [r for r in tried if r["total"] < 0.99 * current]  # at least 1 %
    return sorted(smaller, key=lambda r: r["total"])[:MAX_SUGGESTIONS], False


def _memory(plan: Plan, e: Estimates, evaluate: Evaluate | None) -> Iterator[Diagnostic]:
    mem, budget = e.memory_bytes, e.memory_budget_bytes
    if mem.total <= budget * (1 - TIGHT_MARGIN):
        return
    spec = plan.spec
    c = spec.cluster
    parts = ", ".join(f"{k} {getattr(mem, k) / GiB:.1f}"
                      for k in ("params", "grads", "optimizer", "activations"))
    margin = (budget - mem.total) / budget if budget > 0 else -1.0
    if mem.total <= budget * (1 + OOM_MARGIN):
        word = "under" if margin >= 0 else "over"
        yield diag(R.MEMORY_TIGHT,
                   f"estimated memory per GPU ({mem.total / GiB:.1f} GiB on pipeline stage "
                   f"{e.memory_stage}: {parts}) is {abs(100 * margin):.1f} % {word} "
                   f"gpu_memory_gib - memory_reserve_gib ({c.gpu_memory_gib:g} - "
                   f"{c.memory_reserve_gib:g} = {budget / GiB:.1f} GiB), inside the memory "
                   f"model's margin (-{100 * TIGHT_MARGIN:g} % .. +{100 * OOM_MARGIN:g} %): it "
                   f"may run out of memory", "cluster.gpu_memory_gib",
                   related=("training.recompute", "training.micro_batch_size"),
                   fix="measure the peak on one step (torch.cuda.max_memory_allocated), or "
                       "leave room: recompute, a smaller micro batch, more tp/pp "
                       "(trainc lint lists the cheapest when it is a sure OOM)",
                   memory_bytes=mem.total, budget_bytes=budget, margin=round(margin, 4),
                   stage=e.memory_stage)
        return
    msg = (f"estimated memory per GPU ({mem.total / GiB:.1f} GiB on pipeline stage "
           f"{e.memory_stage}: {parts}) exceeds gpu_memory_gib - memory_reserve_gib "
           f"({c.gpu_memory_gib:g} - {c.memory_reserve_gib:g} = {budget / GiB:.1f} GiB) by "
           f"{-100 * margin:.1f} %, more than the memory model's {100 * OOM_MARGIN:g} % margin")
    suggest = evaluate is not None
    cands, fit = fitting_changes(spec, evaluate) if evaluate is not None else ([], False)
    listed = "; ".join(f"{_show(r['edits'])} -> {r['total'] / GiB:.1f} GiB, "
                       f"{r['step']:.3g} s/step" for r in cands)
    if fit:
        fix = f"cheapest changes that fit (fastest first): {listed}"
        edits = {k: getattr(v, "value", v) for k, v in cands[0]["edits"].items()}
    elif cands:
        fix = f"no single or paired change fits; largest reductions: {listed}; add GPUs"
        edits = {}
    elif suggest:
        fix = "no valid change found: add GPUs or use a GPU with more memory"
        edits = {}
    else:
        fix = ("more tp/pp, recompute, ZeRO sharding or a smaller micro batch "
               "(trainc lint lists them)")
        edits = {}
    related = tuple(sorted({k for r in cands for k in r["edits"]}))
    yield diag(R.MEMORY_FIT, msg, "cluster.gpu_memory_gib", related=related, fix=fix,
               edits=edits, memory_bytes=mem.total, budget_bytes=budget,
               margin=round(margin, 4), stage=e.memory_stage)


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
    smaller = [b for b in range(mbs - 1, 0, -1) if mbs % b == 0
               and spec.training.global_batch_size // (b * dp) >= need]
    if smaller:
        options.insert(0, f"training.micro_batch_size={smaller[0]}")
        edits = {"training.micro_batch_size": smaller[0]}
    msg = (f"pipeline bubble ({100 * bubble:.1f} % of the step) exceeds 25 %: pp ({p}) with "
           f"{m} micro-batches{f' and vpp {v}' if v > 1 else ''}; (p-1)/(v*m+p-1)")
    yield diag(R.BUBBLE_HIGH, msg, "training.global_batch_size",
               related=("parallel.pp", "training.micro_batch_size"),
               fix="raise the micro-batch count: " + " or ".join(options), edits=edits,
               bubble=bubble, pp=p, num_microbatches=m, vpp=v)


def check_fit(plan: Plan, *, evaluate: Evaluate | None = None) -> Iterator[Diagnostic]:
    """Fit diagnostics of ``plan.estimates``: TRC401 (error), TRC402 and TRC403 (warnings).

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
    yield from _bubble(plan, e)
