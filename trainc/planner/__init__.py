"""``trainc plan``: search every parallel dimension for a spec's model, cluster and batch.

:func:`plan_layouts` loads the spec, runs :func:`trainc.planner.search.search`, then compiles the
candidates for real (full rule set, full estimator, fit check) so that every returned candidate
compiles with no error, and ranks them by the full estimator's step time, the simpler layout
first when two are within the model's error band (docs/planner.md).
"""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.diagnostics import Diagnostic, locate, sort_diagnostics
from trainc.compiler.fit import TIGHT_MARGIN, is_tight
from trainc.compiler.load import Loaded, load_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.pipeline import State, run_passes
from trainc.compiler.plan import spec_to_dict
from trainc.compiler.validate import validate
from trainc.planner.search import (
    Candidate,
    SearchResult,
    candidate_spec,
    explain,
    recompute_text,
    round_sig,
    search,
    summary,
)
from trainc.schemas import TrainSpec

GIB = 2**30


@dataclass
class Planned:
    """One finalist: layout, full-estimator numbers, the spec that compiles, and why it ranks."""

    candidate: Candidate
    spec: TrainSpec
    estimates: dict[str, Any]
    reason: str = ""
    raw_spec: TrainSpec | None = None
    """The spec as the user wrote it with the layout applied, before normalization (what
    ``--apply`` writes when it cannot edit the file in place: derived values stay null)."""


@dataclass
class PlanResult:
    """Result of :func:`plan_layouts`: finalists best first, or the spec's diagnostics."""

    path: str
    diagnostics: list[Diagnostic]
    num_candidates_evaluated: int = 0
    num_fit: int = 0
    num_candidates_considered: int = 0
    planned: list[Planned] = field(default_factory=list)
    num_full_estimates: int = 0
    """Layouts that went through the full estimator (the rest were pruned by the bound)."""
    exact: bool = True
    """True when the bound proved the first max(top, RANKED) places (every unestimated layout
    is slower than them by more than the error band)."""
    error_band: float = 0.0
    """The relative step-time band of the simplicity tie-break (:func:`error_band`)."""
    versus_spec: str = ""
    """Why the top pick beats the spec's own layout (:func:`versus_spec`)."""
    memory_budget_bytes: float = 0.0
    """The memory budget per GPU layouts are searched against (bytes)."""
    min_memory_bytes: float = math.inf
    """The smallest memory per GPU the search's fast model gave any layout (bytes; inf when
    every layout was pruned because its model states alone exceed the budget)."""

    def no_fit_reason(self) -> str:
        """Why no layout fits, in words (for a result without finalists)."""
        budget = self.memory_budget_bytes / GIB
        n = self.num_candidates_considered
        if n == 0:
            return "no layout satisfies the keys the spec fixes"
        if not math.isfinite(self.min_memory_bytes):
            return (
                f"in each of the {n:,} layouts considered the weights, gradients and "
                f"optimizer states alone exceed the {budget:.1f} GiB budget per GPU"
            )
        return (
            f"none of the {n:,} layouts considered fits: the smallest needs "
            f"{self.min_memory_bytes / GIB:.1f} GiB per GPU against a budget of "
            f"{budget:.1f} GiB"
        )

    @property
    def ok(self) -> bool:
        """No error diagnostics in the input spec."""
        return not any(d.is_error for d in self.diagnostics)


#: The model's error band when the cluster has no calibrated one (relative step time): the
#: cluster defaults are stated to keep Narayanan et al. 2021 Table 1 within 10 %
#: (:attr:`trainc.schemas.ClusterSpec.gemm_half_efficiency_tokens`). Two layouts whose full
#: estimates are closer than this are a tie, broken by the simpler layout (docs/planner.md).
DEFAULT_ERROR_BAND = 0.10
#: Places the branch and bound ranks whatever ``--top`` is (so ``--top`` up to it never
#: changes the order); exact (the same as estimating every layout) when ``PlanResult.exact``.
RANKED = 20
#: At most this many layouts go through the full estimator per plan (a cap on the work; when it
#: is reached before the bound proves the ranking, ``PlanResult.exact`` is False).
MAX_FULL = 256
#: Grids scouted (one full estimate each) before the branch and bound's rounds.
SCOUTS = 48
#: Safety factor on the measured full / fast ratio of a grid (see :func:`plan_layouts`).
BOUND_SAFETY = 0.9


def _class(c: Candidate) -> tuple[Any, ...]:
    """The class whose layouts share one full / fast ratio in the bound: grid, cp_comm_type
    and recompute granularity (the fast model's error varies mostly across these)."""
    return (*c.grid_key(), c.cp_comm_type, c.recompute[0])


def _bound(c: Candidate, ratios: dict[tuple[Any, ...], float]) -> float:
    """The branch and bound's bound of ``c``'s full step time (see :func:`plan_layouts`): the
    larger of the proven compute bound and the fast step time x the smallest full / fast ratio
    seen in its class x BOUND_SAFETY, else in its grid x BOUND_SAFETY**2, else over every
    estimated layout x BOUND_SAFETY**3."""
    proven = c.terms.get("lower_bound", 0.0)
    for level, key in enumerate((_class(c), c.grid_key(), ())):
        r = ratios.get(key)
        if r is not None:
            return max(proven, c.step_seconds * r * BOUND_SAFETY ** (level + 1))
    return proven


def error_band(spec: TrainSpec) -> float:
    """The relative step-time band within which two layouts tie: half the width of the
    calibrated p10..p90 band of measured / estimated step time (``cluster.step_time_p10_ratio``,
    ``cluster.step_time_p90_ratio``, written by ``trainc calibrate``), else
    :data:`DEFAULT_ERROR_BAND`."""
    c = spec.cluster
    lo, hi = getattr(c, "step_time_p10_ratio", None), getattr(c, "step_time_p90_ratio", None)
    if lo is not None and hi is not None and hi >= lo > 0:
        return float((hi - lo) / 2)
    return DEFAULT_ERROR_BAND


def rank_within_band(planned: list[Planned], band: float) -> list[Planned]:
    """Order finalists by the full estimator with the simplicity tie-break: repeatedly take,
    among the remaining layouts whose step time is within ``band`` (relative) of the fastest
    remaining one, one with memory headroom before a memory-tight one (estimated above
    ``1 - TIGHT_MARGIN`` of the budget, where the fit rule warns TRC403: it may run out of
    memory), one without optimizer offload before one with it (its CPU Adam step and PCIe
    traffic are priced only as a floor: ``time.offload_seconds``), then the simplest
    (:meth:`Candidate.simplicity`), then the faster, then the smaller. Deterministic and
    independent of how many are shown."""
    rest = sorted(planned, key=lambda p: (_step(p), _mem(p), p.candidate.simplicity()))
    out: list[Planned] = []
    while rest:
        limit = _step(rest[0]) * (1 + band)
        near = [p for p in rest if _step(p) <= limit]
        # optimizer offload only where it is needed: its CPU Adam step and PCIe traffic are
        # priced as a floor, so an offloaded layout never ties as "no slower"
        pick = min(
            near,
            key=lambda p: (
                memory_tight(p),
                p.candidate.offload != "none",
                p.candidate.simplicity(),
                _step(p),
                _mem(p),
            ),
        )
        out.append(pick)
        rest.remove(pick)
    return out


def distinct_layouts(ranked: list[Planned]) -> list[Planned]:
    """``ranked`` with the best of each parallel layout, i.e. of each (tp, pp, cp, ep, etp),
    first (in rank order), then the other variants (rank order): vpp, layer split, micro
    batch, recompute and ZeRO stage are choices inside a layout, so the first rows show
    different layouts rather than one layout's variants; with the degrees fixed by the spec
    the variants follow the one layout."""
    seen: set[tuple[int, ...]] = set()
    heads: list[Planned] = []
    rest: list[Planned] = []
    for p in ranked:
        c = p.candidate
        key = (c.tp, c.pp, c.cp, c.ep, c.etp)
        (rest if key in seen else heads).append(p)
        seen.add(key)
    return heads + rest


def drop_equal_time_larger(planned: list[Planned]) -> list[Planned]:
    """Among finalists with the same step time (to 6 significant digits), keep only those with
    the least memory: a layout that estimates exactly as fast as another but needs more memory
    is no choice (EP=1 with ETP=8 next to EP=8 with ETP=1, for instance). Other dominated
    layouts stay ranked (the table hides them; ``--format json`` lists them)."""

    def key(p: Planned) -> tuple[float, bool]:  # offload's cost is a floor in the step time
        return _step(p), p.candidate.offload != "none"

    low: dict[tuple[float, bool], int] = {}
    for p in planned:
        low[key(p)] = min(low.get(key(p), _mem(p)), _mem(p))
    return [p for p in planned if _mem(p) == low[key(p)]]


def _step(p: Planned) -> float:
    return float(round_sig(p.estimates.get("step_time_seconds", 0.0)))


def _mem(p: Planned) -> int:
    return int(p.estimates.get("memory_bytes", {}).get("total", 0))


def memory_tight(p: Planned) -> bool:
    """Estimated in TRC403's range of the memory budget (:func:`trainc.compiler.fit.is_tight`)."""
    return is_tight(_mem(p), float(p.estimates.get("memory_budget_bytes", 0)))


@dataclass
class _Ranking:
    """The state of one :func:`plan_layouts` run: the result being filled, the layouts already
    estimated with the full model (``done``, by layout key; ``seen``, by what they show), the
    ascending full step times (seconds) of the fitting ones, and per class (:func:`_class`, a
    grid, or ``()``) the smallest full / fast step-time ratio seen."""

    out: PlanResult
    raw_spec: TrainSpec
    done: set[tuple[Any, ...]] = field(default_factory=set)
    seen: set[tuple[Any, ...]] = field(default_factory=set)
    steps: list[float] = field(default_factory=list)
    ratios: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def full(self, cand: Candidate) -> None:
        """Estimate ``cand`` with the compiler's own passes (the fit verdict without its
        what-if search) and rank it when it passes: one full estimate of the MAX_FULL."""
        out = self.out
        self.done.add(cand.layout_key())
        out.num_full_estimates += 1
        raw = candidate_spec(self.raw_spec, cand)
        state = run_passes(State(spec=raw, suggest=False), stop_after="check_fit")
        if state.plan is None or state.plan.estimates is None:
            return
        est = state.plan.estimates.to_json()
        step = float(est.get("step_time_seconds", 0.0))
        if cand.step_seconds > 0 and step > 0:
            for g in (_class(cand), cand.grid_key(), ()):
                self.ratios[g] = min(self.ratios.get(g, math.inf), step / cand.step_seconds)
        if state.failed:
            return
        # A layout that differs from a finalist only in cp_comm_type and estimates the same is
        # not another choice: keep the first (the search yields p2p, Megatron's default, first).
        par = {k: v for k, v in summary(cand)["parallel"].items() if k != "cp_comm_type"}
        key = (
            repr(sorted(par.items())),
            repr(summary(cand)["training"]),
            round_sig(step),
            est.get("memory_bytes", {}).get("total", 0),
        )
        if key in self.seen:
            return
        self.seen.add(key)
        out.planned.append(Planned(cand, state.spec, est, raw_spec=raw))
        bisect.insort(self.steps, round_sig(step))

    def threshold(self, need: int, band: float) -> float:
        """The ``need``-th best full step time (seconds) widened by the error band; infinite
        while fewer than ``need`` layouts fit."""
        return self.steps[need - 1] * (1 + band) if len(self.steps) >= need else math.inf


def _scout(rk: _Ranking, result: SearchResult) -> list[Candidate]:
    """Estimate the fastest layout (by the fast model) of each of the SCOUTS fastest grids, so
    that every competitive grid (and the simpler ones the tie-break may prefer) has a measured
    full / fast ratio, then the fast model's best layouts: a tight threshold quickly. Returns
    the pool in the order branch and bound reads it: layouts the fast model already puts over
    the memory budget (within MEM_SLACK) last, since the full fit check usually confirms it and
    they would spend the budget."""
    order = sorted(result.pool, key=lambda c: c.memory_bytes > result.limit_bytes)
    firsts: dict[tuple[Any, ...], Candidate] = {}
    for cand in order:
        firsts.setdefault(cand.grid_key(), cand)
    for cand in [*list(firsts.values())[:SCOUTS], *result.candidates]:
        if rk.out.num_full_estimates < MAX_FULL and cand.layout_key() not in rk.done:
            rk.full(cand)
    return order


def _branch_and_bound(
    rk: _Ranking, order: list[Candidate], need: int, band: float
) -> list[Candidate]:
    """Branch and bound over the pool (docs/planner.md); returns the pool left unestimated.

    A layout's bound is the larger of its proven compute bound (fast.step_lower_bound) and,
    once a layout of its class (grid, cp_comm_type, recompute granularity) has been estimated,
    its fast step time x the smallest full / fast ratio seen in the class x BOUND_SAFETY. Each
    round estimates every layout whose bound is within the band of the need-th best full step
    time (a grid not estimated yet sends one scout, its fastest layout by the fast model),
    until none is left or MAX_FULL estimates are spent."""
    pool = [c for c in order if c.layout_key() not in rk.done]
    while pool:
        threshold = rk.threshold(need, band)
        todo, keep = [], []
        scout: dict[tuple[Any, ...], Candidate] = {}
        for c in pool:  # ascending fast step: the first of a grid is its scout
            if _bound(c, rk.ratios) > threshold:
                keep.append(c)
            elif _class(c) in rk.ratios:
                todo.append(c)
            elif _class(c) in scout:
                keep.append(c)
            else:
                scout[_class(c)] = c
        todo += scout.values()
        if not todo:
            break
        # breadth first: the fastest layout of every grid before the siblings (under the time
        # cap, every competitive grid is seen before a grid's micro batch and recompute variants)
        heads: dict[tuple[Any, ...], Candidate] = {}
        for c in todo:
            heads.setdefault(c.grid_key(), c)
        first = {id(c) for c in heads.values()}
        todo = list(heads.values()) + [c for c in todo if id(c) not in first]
        room = MAX_FULL - rk.out.num_full_estimates
        for c in todo[:room]:
            rk.full(c)
        pool = [c for c in pool if c.layout_key() not in rk.done]
        if len(todo) > room:
            break
    return pool


def _is_exact(
    rk: _Ranking,
    result: SearchResult,
    pool: list[Candidate],
    banded: list[Planned],
    kept: list[Planned],
    need: int,
    band: float,
) -> bool:
    """Whether the bound proved the order (the same as estimating every layout): nothing in
    the pool is left within the threshold, and the layouts the search left out of the pool
    have a proven bound above it. The threshold is taken over the layouts that stay ranked
    (drop_equal_time_larger removes equal-time ones, which moves the need-th step up). And
    distinct_layouts promotes the best layout of every (tp, pp, cp, ep, etp) from any place:
    with fewer such groups than places in the first need, a group the bound left unestimated
    could be promoted, so nothing may be left unestimated then."""
    kept_steps = sorted(_step(p) for p in kept)
    threshold = max(
        rk.threshold(need, band),
        kept_steps[need - 1] * (1 + band) if len(kept_steps) >= need else math.inf,
    )
    left = [c for c in pool if c.layout_key() not in rk.done]
    groups = {
        (p.candidate.tp, p.candidate.pp, p.candidate.cp, p.candidate.ep, p.candidate.etp)
        for p in banded[:need]
    }
    return (
        all(_bound(c, rk.ratios) > threshold for c in left)
        and (
            not result.dropped
            or max(
                result.dropped_bound,
                result.dropped_fast * rk.ratios.get((), 0.0) * BOUND_SAFETY**3,
            )
            > threshold
        )
        and (len(groups) >= need or (not left and not result.dropped))
    )


def _fixed_key_errors(spec: TrainSpec, loaded: Loaded) -> list[Diagnostic]:
    """With nothing to offer: the rule errors of the keys the user fixed (the reason, not
    memory), located as ``trainc lint`` reports them."""
    explicit = loaded.explicit
    return sort_diagnostics(
        locate(
            [
                d
                for d in validate(spec)
                if d.is_error and (d.key in explicit or any(k in explicit for k in d.related))
            ],
            loaded.where,
        )
    )


def _explain_ranked(out: PlanResult, recompute_fixed: bool) -> None:
    """Set each ranked layout's ``reason`` (why it ranks where it does, and why a layout faster
    than the top pick ranks below it)."""
    best = _step(out.planned[0])
    for i, p in enumerate(out.planned):
        step = p.estimates.get("step_time_seconds") or p.candidate.step_seconds
        p.reason = explain(p.candidate, i, step, best, recompute_fixed=recompute_fixed)
        if i and _step(p) < best:  # faster than the top pick: say why it ranks below
            p.reason += (
                f"; memory-tight (above {1 - TIGHT_MARGIN:.0%} of the budget, "
                "TRC403), ranked after layouts with headroom"
                if memory_tight(p)
                else "; within the error band the simpler layout ranks first"
            )


def plan_layouts(
    path: str | os.PathLike[str], overrides: list[str] | tuple[str, ...] = (), top: int = 5
) -> PlanResult:
    """Search layouts for the spec at ``path``; never raises for user mistakes.

    The spec may leave the parallel section out entirely; keys it (or an override) sets are
    constraints. Model-level errors (e.g. heads not divisible by a fixed tp) come back as
    diagnostics, as from ``trainc lint``; so do rule errors of the fixed keys when no layout
    survives.

    Ranking (docs/planner.md): every ranked layout has the full estimator's step time and
    memory (compiled with the full rule set and fit check). The fast model only orders the
    work and prunes by a bound of the full step time (branch and bound): a layout is left
    unestimated when its bound exceeds the ``max(top, RANKED)``-th best full step time by more
    than the error band, or when MAX_FULL layouts have been estimated. The procedure is the same
    for every ``top`` up to RANKED, so ``--top 1, 5, 20`` print prefixes of one list;
    ``PlanResult.exact`` says whether the bound proved the order (the same as estimating every
    layout) or the cap on full estimates came first.

    The steps: load and normalize, search (the fast model over every candidate), scout,
    branch and bound, rank within the error band, check exactness, explain.
    """
    loaded = load_spec(path, overrides)
    if loaded.spec is None:
        return PlanResult(str(path), sort_diagnostics(loaded.diagnostics))
    raw_spec = loaded.spec
    spec = normalize(raw_spec)
    result = search(spec, loaded.explicit)
    out = PlanResult(
        str(path),
        [],
        result.num_candidates_evaluated,
        result.num_fit,
        result.num_candidates_considered,
        memory_budget_bytes=result.limit_bytes,
        min_memory_bytes=result.min_memory_bytes,
    )
    band = error_band(spec)
    out.error_band = band
    need = max(top, RANKED)
    rk = _Ranking(out, raw_spec)
    pool = _branch_and_bound(rk, _scout(rk, result), need, band)
    kept = drop_equal_time_larger(out.planned)
    banded = rank_within_band(kept, band)
    out.exact = _is_exact(rk, result, pool, banded, kept, need, band)
    if not out.planned:
        out.diagnostics = _fixed_key_errors(spec, loaded)
    out.planned = distinct_layouts(banded)[:top]
    if out.planned:
        _explain_ranked(out, recompute_fixed="training.recompute" in loaded.explicit)
        out.versus_spec = versus_spec(raw_spec, out.planned[0])
    return out


_TERM_LABELS = {
    "tp": "TP communication",
    "cp": "CP communication",
    "ep": "EP all-to-all",
    "pp": "PP p2p",
    "dp": "DP gradient sync",
}


def _spec_dp(spec: TrainSpec) -> str:
    """The spec's data-parallel degree as text: ``parallel.dp`` when the spec sets it, else the
    derived world / (tp x pp x cp), written as that fraction when it does not divide (TRC101's
    case); never ``None``."""
    p, c = spec.parallel, spec.cluster
    if p.dp is not None:
        return str(p.dp)
    world, mp = c.num_nodes * c.gpus_per_node, p.tp * p.pp * p.cp
    if mp > 0 and world % mp == 0:
        return str(world // mp)
    return f"{world}/{mp}"


def _recompute_text(t: Any) -> str:
    """The spec's recompute (``training`` section) as :func:`recompute_text` words it."""
    method = t.recompute_method.name if t.recompute_method is not None else None
    return recompute_text(t.recompute.name, method, t.recompute_num_layers)


def layout_keys(spec: TrainSpec) -> tuple[Any, ...]:
    """Every choice the planner makes, read from a validated spec: the degrees, the layer split,
    the micro batch, recompute (granularity, method, layers), ZeRO stage, optimizer offload and
    TP overlap. Two specs with equal keys are the same layout."""
    p, t = spec.parallel, spec.training
    return (
        p.tp,
        p.pp,
        p.vpp,
        p.cp,
        p.cp_comm_type,
        p.ep,
        p.etp,
        p.dp,
        p.sequence_parallel,
        p.zero_stage,
        p.pipeline_first_stage_layers,
        p.pipeline_last_stage_layers,
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
        t.micro_batch_size,
        _recompute_text(t),
        t.offload_optimizer,
        bool(t.tp_comm_overlap),
    )


def versus_spec(raw: TrainSpec, pick: Planned) -> str:
    """One line on why the top pick beats the layout the spec itself asks for (its parallel
    and training keys as written, defaults for the rest): step time, memory per GPU and the
    term of the full estimator that differs most (compute incl. recompute, pipeline bubble, or
    the exposed communication of one axis)."""
    state = run_passes(State(spec=raw, suggest=False), stop_after="check_fit")
    p = state.spec.parallel if state.plan is not None else raw.parallel
    t = state.spec.training if state.plan is not None else raw.training
    lay = (
        f"tp={p.tp} pp={p.pp} vpp={p.vpp} cp={p.cp} ep={p.ep} dp={_spec_dp(state.spec)} "
        f"mbs={t.micro_batch_size} recompute={_recompute_text(t)}"
    )
    if state.spec.engine.value != "fsdp":  # FSDP2 shards by its own keys (TRC344)
        lay += f" zero={p.zero_stage}"
    if t.offload_optimizer.name != "none":
        lay += f" offload={t.offload_optimizer.name}"
    if (
        state.plan is not None
        and not state.failed
        and layout_keys(state.spec) == layout_keys(pick.spec)
    ):
        return f"the spec's own layout ({lay}) is the top pick"
    if state.plan is None or state.plan.estimates is None:
        errs = sorted({d.rule.id for d in state.diagnostics if d.is_error})
        return f"the spec's own layout ({lay}) does not compile ({', '.join(errs)})"
    est = state.plan.estimates.to_json()
    mine = float(est["memory_bytes"]["total"]) / GIB
    theirs = float(pick.estimates["memory_bytes"]["total"]) / GIB
    if state.failed:
        errs = sorted({d.rule.id for d in state.diagnostics if d.is_error})
        budget = float(est.get("memory_budget_bytes", 0)) / GIB
        return (
            f"the spec's own layout ({lay}) does not fit or breaks a rule "
            f"({', '.join(errs)}; {mine:.1f} GiB/GPU against {budget:.1f} GiB); the top "
            f"pick needs {theirs:.1f} GiB/GPU"
        )
    s_spec, s_pick = float(est["step_time_seconds"]), float(pick.estimates["step_time_seconds"])
    diffs = {
        "compute": float(est["compute_seconds"]) - float(pick.estimates["compute_seconds"]),
        "pipeline bubble": float(est["bubble_seconds"]) - float(pick.estimates["bubble_seconds"]),
        "exposed communication": float(est["exposed_comm_seconds"])
        - float(pick.estimates["exposed_comm_seconds"]),
    }
    main = max(diffs, key=lambda k: diffs[k])
    why = f"{main} {-diffs[main]:+.3g} s"
    if main == "exposed communication":
        a, b = est.get("comm_seconds_per_step", {}), pick.estimates.get("comm_seconds_per_step", {})
        axis = max(a, key=lambda x: float(a[x]) - float(b.get(x, 0.0)), default=None)
        if axis is not None:
            why += f" (mostly {_TERM_LABELS.get(axis, axis)})"
    elif main == "compute" and _recompute_text(t) != _recompute_text(pick.spec.training):
        why += f" (recompute {_recompute_text(t)} -> {_recompute_text(pick.spec.training)})"
    elif main == "compute":
        why += " (GEMM efficiency of the micro batch, kernel overheads)"
    rel = s_pick / s_spec - 1 if s_spec else 0.0
    why = f"main difference: {why}"
    if s_pick > s_spec:  # chosen for headroom or simplicity, not speed: say which
        budget = float(est.get("memory_budget_bytes", 0))
        if is_tight(float(est["memory_bytes"]["total"]), budget) and not memory_tight(pick):
            why = (
                f"the spec's layout is memory-tight ({mine:.1f} of {budget / GIB:.1f} GiB, "
                "TRC403: it may run out of memory); the pick leaves headroom"
            )
        else:
            why = (
                "within the error band the simpler layout ranks first (docs/planner.md); "
                "the spec's layout is no more than the band faster by the model"
            )
    return (
        f"vs the spec's own layout ({lay}): {rel:+.1%} step time ({s_pick:.3g} s vs "
        f"{s_spec:.3g} s), {theirs:.1f} vs {mine:.1f} GiB/GPU; {why}"
    )


def to_json(res: PlanResult) -> dict[str, Any]:
    """The contract's ``--format json`` object."""
    return {
        "num_candidates_evaluated": res.num_candidates_evaluated,
        "num_candidates_fitting": res.num_fit,
        "num_candidates_considered": res.num_candidates_considered,
        "candidates": [
            {**summary(p.candidate), "estimates": p.estimates, "reason": p.reason}
            for p in res.planned
        ],
        "num_full_estimates": res.num_full_estimates,
        "ranking_exact": res.exact,
        "error_band": res.error_band,
        "versus_spec": res.versus_spec,
        # why nothing is listed (empty when a layout fits or the spec itself is in error)
        "no_fit_reason": res.no_fit_reason() if res.ok and not res.planned else "",
    }


def applied_spec(p: Planned) -> dict[str, Any]:
    """The finalist as a complete, explicit spec that ``trainc compile`` accepts unchanged."""
    return spec_to_dict(p.spec)
