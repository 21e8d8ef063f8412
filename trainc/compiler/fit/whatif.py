"""The what-if search behind TRC401's fix: the cheapest changes that make a spec fit.

Each candidate (more tp or pp or cp, selective/full recompute, the distributed optimizer or a
higher ZeRO stage, optimizer offload, a smaller micro batch, an uneven pipeline split, more
nodes) is applied to a copy of the spec, validated with the same rules as the spec itself
(candidates that break a divisibility or topology rule are dropped), re-estimated, and ranked by
predicted step time. If no single change fits, pairs of changes are tried. The re-estimates go
through the driver's own passes: :func:`trainc.compiler.fit.check.check_fit` hands the search an
``evaluate`` function (:func:`trainc.compiler.pipeline.plan_and_estimate`), so this module
imports no other pass.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from itertools import combinations
from typing import Any

from trainc.compiler import candidates
from trainc.compiler.ir import Plan
from trainc.compiler.support.treecopy import copy_tree
from trainc.schemas import Engine, Offload, Recompute, TrainSpec

MAX_SUGGESTIONS = 4

#: Uneven pipeline splits tried by the what-if search (nearest the current split first).
MAX_REBALANCE = 3

#: Normalize, validate, plan and estimate a spec; None when it breaks a rule.
Evaluate = Callable[[TrainSpec], Plan | None]


def _edited(spec: TrainSpec, edits: dict[str, Any]) -> TrainSpec:
    """A copy of ``spec`` with the dotted ``edits`` set; ``spec`` is unchanged. Copy on write:
    only the objects on an edited key's path are copied (shallow), untouched sections are
    shared with ``spec``. Safe because the what-if evaluation never mutates its input (the
    normalize pass works on its own full copy, :func:`~trainc.compiler.normalize.normalize`);
    a whole-tree copy per what-if was a tenth of ``trainc lint``'s time."""
    root: Any = copy.copy(spec)
    fresh = {id(root)}
    for dotted, value in edits.items():
        obj = root
        *path, last = dotted.split(".")
        for part in path:
            child = getattr(obj, part)
            if id(child) not in fresh:
                child = copy.copy(child)
                fresh.add(id(child))
                setattr(obj, part, child)
            obj = child
        setattr(obj, last, value)
    out: TrainSpec = root
    return out


def _candidate_edits(spec: TrainSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(shown edits, side edits) of every single change worth trying: more tp, pp or cp; each
    recompute granularity, ZeRO stage and optimizer offload after the spec's own in the order
    the planner searches them (:mod:`trainc.compiler.candidates`); a smaller micro batch."""
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
    for r in candidates.recompute_steps(spec):
        reset = {"training.recompute_method": None, "training.recompute_num_layers": None}
        out.append(({"training.recompute": r}, reset if r is Recompute.full else {}))
    out += [({"parallel.zero_stage": z}, {}) for z in candidates.zero_steps(spec)]
    if t.offload_optimizer is Offload.none and p.zero_stage >= 1:
        out += [({"training.offload_optimizer": o}, {}) for o in candidates.offloads(spec)]
    if t.micro_batch_size > 1:
        out.append(({"training.micro_batch_size": t.micro_batch_size // 2}, {}))
    return out


def _rebalance_edits(spec: TrainSpec, plan: Plan) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Uneven pipeline splits that take layers off the most loaded stage (Megatron-Core's
    ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``,
    TransformerConfig.num_layers_in_first/last_pipeline_stage, 0.16.1): the first and last stage
    counts ``f, l >= 1`` with the middle ``L - f - l`` split evenly over the ``pp - 2`` middle
    stages (``f + l = L`` for pp 2); the most loaded stage must get fewer layers. The
    :data:`MAX_REBALANCE` splits nearest the current one (by ``|df| + |dl|``) are tried."""
    e = plan.estimates
    lps = plan.derived.layers_per_stage
    p = len(lps)
    if e is None or p < 2 or spec.engine is not Engine.megatron:
        return []
    total, s = sum(lps), e.memory_stage
    f0, l0 = lps[0], lps[-1]
    mid0 = lps[1] if p > 2 else 0
    found: list[tuple[int, int, int]] = []
    for f in range(1, total):
        for last in range(1, total - f + 1):
            rest = total - f - last
            if p == 2:
                if rest:
                    continue
                mid = 0
            elif rest <= 0 or rest % (p - 2):
                continue
            else:
                mid = rest // (p - 2)
            lighter = f < f0 if s == 0 else last < l0 if s == p - 1 else mid < mid0
            if lighter and (f, last) != (f0, l0):
                found.append((abs(f - f0) + abs(last - l0), f, last))
    return [
        (
            {
                "parallel.pipeline_first_stage_layers": f,
                "parallel.pipeline_last_stage_layers": last,
            },
            {},
        )
        for _, f, last in sorted(found)[:MAX_REBALANCE]
    ]


def _more_nodes_edits(spec: TrainSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Changes that add nodes: 2x and 4x the nodes with tp, pp, cp kept (dp grows, so the
    distributed optimizer / ZeRO shards the states over more GPUs; global_batch_size raised to
    the next multiple of micro_batch_size x dp when needed), and 2x the nodes with 2x pp (dp
    kept: every GPU holds half the layers)."""
    p, c, t = spec.parallel, spec.cluster, spec.training
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    uneven = p.pipeline_first_stage_layers is not None or p.pipeline_last_stage_layers is not None
    for k, pp in ((2, p.pp), (4, p.pp), (2, 2 * p.pp)):
        if pp != p.pp and uneven:
            continue
        nodes = c.num_nodes * k
        dp = nodes * c.gpus_per_node // (p.tp * pp * p.cp)
        if dp < 1 or nodes * c.gpus_per_node % (p.tp * pp * p.cp):
            continue
        edits: dict[str, Any] = {"cluster.num_nodes": nodes}
        if pp != p.pp:
            edits["parallel.pp"] = pp
        step = t.micro_batch_size * dp
        if t.global_batch_size % step:
            edits["training.global_batch_size"] = math.ceil(t.global_batch_size / step) * step
        out.append((edits, {"parallel.dp": None}))
    return out


def _try(
    spec: TrainSpec, edits: dict[str, Any], side: dict[str, Any], evaluate: Evaluate
) -> dict[str, Any] | None:
    cand = _edited(spec, {**side, **edits})
    plan = evaluate(cand)
    if plan is None or plan.estimates is None:
        return None
    e = plan.estimates
    world = plan.spec.cluster.num_nodes * plan.spec.cluster.gpus_per_node
    added = world - spec.cluster.num_nodes * spec.cluster.gpus_per_node
    return {
        "edits": edits,
        "total": e.memory_bytes.total,
        "budget": e.memory_budget_bytes,
        "step": e.step_time_seconds,
        "gpus_added": added,
        "gpu_seconds": world * e.step_time_seconds,
    }


def _rank(r: dict[str, Any]) -> tuple[float, float, float]:
    """Cheapest first: no added GPUs before added ones (fewest first), then the step time."""
    return (r["gpus_added"], r["step"], r["total"])


#: Within this fraction of a change's step time, a change without context parallelism is
#: listed first (the planner's error band and simplicity order, docs/planner.md).
CP_BAND = 0.10


def _last_resort(r: dict[str, Any]) -> bool:
    """Whether a change turns on context parallelism or DeepSpeed offload (a last resort)."""
    e = r["edits"]
    offload = any(
        getattr(e.get(k), "value", e.get(k)) not in (None, "none")
        for k in ("training.offload_optimizer", "training.offload_param")
    )
    return int(e.get("parallel.cp", 1)) > 1 or offload


def _last_resorts_last(ranked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``ranked`` with a change that turns on context parallelism or CPU offload moved after
    the same-GPU changes without them that are within :data:`CP_BAND` of its step time: CP is
    for sequences that do not fit otherwise, and its ring overheads are only partly priced (a
    micro batch of 1 that fits 1 % slower than cp=2 at 8K tokens is the better fix); offload's
    CPU step is priced as a floor (``time.offload_seconds``: round host figures), so ZeRO-2
    within 10 % of it is the better fix."""
    out = list(ranked)
    for r in ranked:
        if not _last_resort(r) or r["gpus_added"]:
            continue
        near = [
            x
            for x in out
            if not _last_resort(x)
            and not x["gpus_added"]
            and x["step"] <= r["step"] * (1 + CP_BAND)
        ]
        if near:
            out.remove(r)
            out.insert(out.index(near[-1]) + 1, r)
    return out


def fitting_changes(spec: TrainSpec, evaluate: Evaluate) -> tuple[list[dict[str, Any]], bool]:
    """Candidates, cheapest first (:func:`_rank`: changes on the same GPUs by predicted step
    time, then those that add nodes by the GPUs they add); the flag says whether they fit.

    Searched: each single change of :func:`_candidate_edits` (tp, pp, cp, recompute, ZeRO /
    distributed optimizer, offload, micro batch), an uneven pipeline split that unloads the most
    loaded stage (:func:`_rebalance_edits`) and more nodes (:func:`_more_nodes_edits`); when no
    change on the same GPUs fits, pairs of same-GPU changes too.
    """
    now = evaluate(copy_tree(spec))
    same = _candidate_edits(spec)
    if now is not None:
        same += _rebalance_edits(now.spec, now)
    grow = _more_nodes_edits(spec)
    tried = [r for e, s in same + grow if (r := _try(spec, e, s, evaluate)) is not None]
    fits = [r for r in tried if r["total"] <= r["budget"]]
    if not any(r["gpus_added"] == 0 for r in fits):
        for (e1, s1), (e2, s2) in combinations(same, 2):
            keys = set(e1) | set(e2)
            if set(e1) & set(e2) or (
                "parallel.pp" in keys and "parallel.pipeline_first_stage_layers" in keys
            ):
                continue
            r = _try(spec, {**e1, **e2}, {**s1, **s2}, evaluate)
            if r is not None and r["total"] <= r["budget"]:
                fits.append(r)
    if fits:
        return _last_resorts_last(sorted(fits, key=_rank))[:MAX_SUGGESTIONS], True
    # only changes that reduce memory are "reductions" (selective recompute saves nothing with
    # fused attention, for example)
    current = now.estimates.memory_bytes.total if now and now.estimates else math.inf
    smaller = [r for r in tried if r["total"] < 0.99 * current]  # at least 1 %
    return sorted(smaller, key=lambda r: r["total"])[:MAX_SUGGESTIONS], False
