"""The layout search behind ``trainc plan``.

Enumeration only generates layouts the rules allow (the divisibility and grid rules of
:mod:`trainc.compiler.validate` are applied as generators: tp from divisors of the heads, pp from
divisors of the world with an even or uneven layer split, vpp from divisors of every stage's
layers, ...), so nothing a rule excludes is ever estimated. Each surviving layout is scored with
the closed-form model of :mod:`trainc.planner.fast`; the best ones are then compiled for real
(full rule set, full estimator, fit check) and re-ranked by the full estimator's step time.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainc.capabilities import capability
from trainc.compiler import candidates
from trainc.compiler.validate.util import divisors
from trainc.planner.fast import TERMS, model_consts, planned_tp_comm_overlap, score_grid
from trainc.schemas import CpCommType, Offload, Recompute, RecomputeMethod, TrainSpec

GIB = 2**30
MAX_TP = 64
MAX_CP = 32
MAX_EP = 64
#: Parallel / training keys the planner searches; the ones the user set are kept fixed.
SEARCHED = (
    "parallel.tp",
    "parallel.pp",
    "parallel.vpp",
    "parallel.cp",
    "parallel.cp_comm_type",
    "parallel.ep",
    "parallel.etp",
    "parallel.dp",
    "parallel.sequence_parallel",
    "parallel.zero_stage",
    "parallel.pipeline_first_stage_layers",
    "parallel.pipeline_last_stage_layers",
    "parallel.account_for_embedding_in_pipeline_split",
    "parallel.account_for_loss_in_pipeline_split",
    "training.micro_batch_size",
    "training.recompute",
    "training.recompute_method",
    "training.recompute_num_layers",
    "training.offload_optimizer",
    "training.offload_param",
    "training.tp_comm_overlap",
)


@dataclass(slots=True)
class Candidate:
    """One layout with its fast estimate (seconds, bytes) and the terms that explain it."""

    tp: int
    pp: int
    vpp: int
    cp: int
    cp_comm_type: str
    ep: int
    etp: int
    dp: int
    first: int | None
    last: int | None
    mbs: int
    recompute: tuple[str, str | None, int | None]
    """(granularity, full-recompute method, recompute_num_layers)."""
    zero: int
    offload: str
    memory_bytes: float
    step_seconds: float
    terms: dict[str, float] = field(default_factory=dict)
    sp: bool = False
    rank: tuple[float, float, tuple[int, ...]] | None = None
    acc: tuple[bool, bool] = (False, False)
    """(account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split)."""
    tp_overlap: bool = False
    """training.tp_comm_overlap (:func:`trainc.planner.fast.planned_tp_comm_overlap`)."""

    def simplicity(self) -> tuple[int, ...]:
        """The simplicity order of the parallel layout (smaller is simpler; docs/planner.md):
        no context parallelism first (CP is for sequences whose activations do not fit
        otherwise -- Megatron-Core's and NeMo's guidance -- and the model does not price its
        per-chunk attention kernels and load balancing, so a CP layout often estimates exactly
        as fast as the same layout with CP folded into the micro batch), then the smaller
        model-parallel group (tp x pp x cp: more data parallelism; Narayanan et al. 2021,
        arXiv 2104.04473, takeaway 2), then fewer model-parallel axes in use, then lower cp,
        lower pp, no interleaving, lower vpp, lower tp. Micro batch, recompute and ZeRO stage
        are not part of it: between two layouts of equal simplicity the faster wins."""
        # EP is not counted as a model-parallel axis: experts are split over the data-parallel
        # ranks (Megatron-Core's expert folding), as DP splits the batch
        return (
            int(self.cp > 1),
            self.tp * self.pp * self.cp,
            sum(x > 1 for x in (self.tp, self.pp, self.cp)),
            self.cp,
            self.pp,
            int(self.vpp > 1),
            self.vpp,
            self.tp,
        )

    def grid_key(self) -> tuple[Any, ...]:
        """The grid (degrees and layer split) this layout belongs to; its siblings differ only
        in vpp, cp_comm_type, micro batch, recompute, ZeRO stage and offload."""
        return (
            self.tp,
            self.pp,
            self.cp,
            self.ep,
            self.etp,
            self.dp,
            self.sp,
            self.first,
            self.last,
            self.acc,
        )

    def layout_key(self) -> tuple[Any, ...]:
        """Every searched choice (two candidates with equal keys are the same layout)."""
        return (
            self.tp,
            self.pp,
            self.vpp,
            self.cp,
            self.cp_comm_type,
            self.ep,
            self.etp,
            self.dp,
            self.first,
            self.last,
            self.mbs,
            self.recompute,
            self.zero,
            self.offload,
            self.sp,
            self.acc,
        )


@dataclass
class SearchResult:
    """Candidates by the fast model (best first), by lower bound, and how many were scored."""

    num_candidates_evaluated: int
    candidates: list[Candidate]
    """The :data:`KEEP` best fitting layouts by the fast model's step time (best first): the
    planner estimates these first to get a tight bound quickly."""
    num_fit: int
    num_candidates_considered: int = 0
    """Evaluated plus the layouts of grids pruned whole because their model states alone
    exceed the GPU memory (never enumerated one by one)."""
    pool: list[Candidate] = field(default_factory=list)
    """The :data:`KEEP_POOL` layouts within :data:`MEM_SLACK` of the memory budget with the
    smallest fast step time, ascending (the planner's branch and bound works on these)."""
    dropped_bound: float = math.inf
    """The smallest ``terms['lower_bound']`` (a proven lower bound of the full estimator's step
    time, seconds) among the layouts left out of ``pool``; inf when none was left out."""
    dropped_fast: float = math.inf
    """The smallest fast step time (seconds) among the layouts left out of ``pool``."""
    dropped: int = 0
    """How many layouts within the memory slack were left out of ``pool``."""
    limit_bytes: float = math.inf
    """The memory budget per GPU the fast model's memory is compared with (bytes)."""
    min_memory_bytes: float = math.inf
    """The smallest fast-model memory per GPU of any evaluated layout (bytes; inf when every
    grid was pruned on its model states)."""


def _fixed(spec: TrainSpec, explicit: frozenset[str], key: str) -> Any:
    """The spec's value for ``key`` if the user set it, else None (searched)."""
    if key not in explicit:
        return None
    obj: Any = spec
    for part in key.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "name", obj)


def _splits(
    L: int,
    pp: int,
    first: int | None,
    last: int | None,
    fixed: bool,
    acc_fixed: tuple[bool | None, bool | None] = (None, None),
) -> Iterator[tuple[int | None, int | None, tuple[int, ...], tuple[bool, bool]]]:
    """Layer splits over pp stages: even when pp | L; else uneven first/last ends whose middle
    divides evenly (Megatron num_layers_in_first/last_pipeline_stage), at most 3 layers lighter;
    and, with pp > 1, Megatron's account_for_embedding/loss_in_pipeline_split where
    ``L + [embedding] + [loss]`` divides by pp (Llama 3 405B: 126 + 2 over pp=16). Yields
    (first, last, transformer layers per stage, (account_for_embedding, account_for_loss))."""
    from trainc.compiler.derive import layers_per_stage

    def accounts() -> Iterator[tuple[bool, bool]]:
        # embedding-only is searched only when asked for: the last stage also carries the
        # output layer, so the loss's slot is the one that balances the pipeline
        for acc in ((False, False), (True, True), (False, True), (True, False)):
            if all(f is None or f == a for f, a in zip(acc_fixed, acc, strict=True)) and (
                acc != (True, False) or acc_fixed[0]
            ):
                yield acc

    if fixed:
        st = layers_per_stage(L, pp, first, last)
        if st and not any(acc_fixed):
            yield first, last, st, (False, False)
        return
    for acc in accounts():
        if not any(acc):
            if L % pp == 0:
                yield None, None, (L // pp,) * pp, acc
            continue
        if pp > 1:
            st = layers_per_stage(L, pp, None, None, *acc)
            if st:
                yield None, None, st, acc
    if L % pp == 0 or pp < 3 or any(acc_fixed):
        return
    per = L // pp
    for f in range(per, max(0, per - 4), -1):
        for la in range(f, max(0, per - 4), -1):  # the last stage also holds the logits
            st = layers_per_stage(L, pp, f, la)
            if st and max(st) - min(f, la) <= 3:
                yield f, la, st, (False, False)


@dataclass(frozen=True)
class _Axes:
    """The per-axis choices of one search (the spec's fixed value where it sets one)."""

    tps: list[int]
    cps: list[int]
    zeros: list[int]
    recomputes: list[str]
    offloads: list[str]
    can: frozenset[str]
    """Axes the runner can split (trainc.capabilities)."""


def _pick(fx: dict[str, Any], key: str, options: list[Any]) -> list[Any]:
    """``[fixed value]`` when the spec fixes ``key``, else ``options``."""
    v = fx[key]
    return [v] if v is not None else options


def _sps(fx: dict[str, Any], s: int, E: int, tp: int, cp: int) -> list[bool]:
    """Sequence parallel choices: off with tp=1; with tp>1 on (needs (s/cp) % tp == 0), off
    only where on is impossible (not for MoE, which needs it), or what the user fixed (off
    fixed is searched at every tp: a spec with sequence_parallel false and tp 2 found no
    layout at all). ``s``: sequence length, ``E``: experts (0 for a dense model)."""
    if tp == 1:
        return [False]
    # SP off is searched only where SP is impossible: the full estimator gives SP the same
    # step time (its reduce-scatter + all-gather move what the all-reduce moves) and less
    # activation memory (Korthikanti et al. 2022, arXiv 2205.05198, Table 2), so SP off is
    # always dominated when SP is possible.
    fixed = fx["parallel.sequence_parallel"]
    if fixed is False:  # the user's choice is searched as written (the rules judge it)
        return [False]
    opts = [True] if (s // cp) % tp == 0 else []
    if not E and not opts:
        opts.append(False)
    return [o for o in opts if fixed is None or o == fixed]


def _axes(spec: TrainSpec, fx: dict[str, Any], W: int) -> _Axes:
    """The tp, cp, ZeRO, recompute and offload choices of a spec on ``W`` GPUs: tp divides the
    heads and the FFN and matches the KV groups; cp divides W and s / 2; the runner's axes."""
    m = spec.model
    a, g, s = m.num_attention_heads, m.num_query_groups or m.num_attention_heads, m.seq_length
    f = m.ffn_hidden_size or 4 * m.hidden_size
    tps = _pick(
        fx,
        "parallel.tp",
        [x for x in divisors(a) if x <= MAX_TP and f % x == 0 and (g % x == 0 or x % g == 0)],
    )
    cps = _pick(
        fx,
        "parallel.cp",
        [x for x in divisors(W) if x <= MAX_CP and (x == 1 or s % (2 * x) == 0)],
    )
    # axes the runner cannot split (trainc.capabilities: DeepSpeed's worker has no pp/cp/ep)
    cap = capability(spec.engine, spec.launch.entrypoint)
    can = cap.axes if cap is not None else frozenset({"tp", "dp"})
    cps = [x for x in cps if x == 1 or "cp" in can]
    # the engine's ZeRO stages and offloads (trainc.compiler.candidates, shared with the
    # fit check's what-if)
    zeros = _pick(fx, "parallel.zero_stage", list(candidates.zero_stages(spec)))
    recomputes = _pick(fx, "training.recompute", [r.value for r in candidates.RECOMPUTES])
    devices = candidates.offloads(spec)
    offs = _pick(fx, "training.offload_optimizer", ["none", *(o.value for o in devices)])
    return _Axes(tps, cps, zeros, recomputes, offs if devices else ["none"], can)


def _grids(spec: TrainSpec, fx: dict[str, Any], ax: _Axes, W: int) -> Iterator[tuple[Any, ...]]:
    """(tp, cp, pp, dp, first, last, stages, acc, ep, etp, sp) the grid rules allow, in the
    search's order: pp divides W / (tp x cp) and is at most the layers, dp divides the global
    batch, the pipeline splits (:func:`_splits`), the expert options, the SP choices."""
    m = spec.model
    L, E = m.num_layers, m.num_experts or 0
    f = m.ffn_hidden_size or 4 * m.hidden_size
    gbs = spec.training.global_batch_size
    can = ax.can
    split_fixed = (
        fx["parallel.pipeline_first_stage_layers"] is not None
        or fx["parallel.pipeline_last_stage_layers"] is not None
    )
    acc_fixed = (
        fx["parallel.account_for_embedding_in_pipeline_split"],
        fx["parallel.account_for_loss_in_pipeline_split"],
    )
    for tp in ax.tps:
        for cp in ax.cps:
            if W % (tp * cp):
                continue
            for pp in _pick(
                fx,
                "parallel.pp",
                [x for x in divisors(W // (tp * cp)) if x <= L and (x == 1 or "pp" in can)],
            ):
                if (W // (tp * cp)) % pp:
                    continue
                dp = W // (tp * cp * pp)
                if (fx["parallel.dp"] not in (None, dp)) or gbs % dp:
                    continue
                for first, last, stages, acc in _splits(
                    L,
                    pp,
                    fx["parallel.pipeline_first_stage_layers"],
                    fx["parallel.pipeline_last_stage_layers"],
                    split_fixed,
                    acc_fixed,
                ):
                    for ep, etp in _expert_options(
                        E,
                        W,
                        tp,
                        pp,
                        m.moe_ffn_hidden_size or f,
                        fx["parallel.ep"],
                        fx["parallel.etp"],
                    ):
                        if ep > 1 and "ep" not in can:
                            continue
                        for sp in _sps(fx, m.seq_length, E, tp, cp):
                            yield tp, cp, pp, dp, first, last, stages, acc, ep, etp, sp


def search(spec: TrainSpec, explicit: frozenset[str]) -> SearchResult:
    """Enumerate, prune and rank every layout of a *normalized* spec's model and cluster.

    Keys in ``explicit`` (set in the spec file or on the command line) are constraints.
    Steps: the axis choices (:func:`_axes`), the grids (:func:`_grids`), each grid's layouts
    scored by :func:`trainc.planner.fast.score_grid` (a grid whose model states alone exceed
    the GPU pruned whole), the best ``KEEP_POOL`` by fast step time kept, then ranked.
    """
    c = spec.cluster
    W = c.num_nodes * c.gpus_per_node
    dom = c.nvlink_domain_size or c.gpus_per_node
    k = model_consts(spec)
    fx = {key: _fixed(spec, explicit, key) for key in SEARCHED}
    if fx["parallel.dp"] is None and "parallel.dp" in explicit:
        fx["parallel.dp"] = None
    tp_fixed = fx["training.tp_comm_overlap"]
    limit = (c.gpu_memory_gib or 80) * GIB - c.memory_reserve_gib * GIB
    ax = _axes(spec, fx, W)
    zeros, recomputes, offloads = ax.zeros, ax.recomputes, ax.offloads
    evaluated = 0
    pool: list[tuple[float, int, Candidate]] = []  # max-heap on the fast step time
    dropped = dropped_fast = math.inf
    n_dropped = 0
    order = 0
    fits = 0
    pruned = 0
    min_mem = math.inf
    # the smallest fast step time left out of the full pool, at least the pool's slowest: a
    # layout with a lower bound at or above it is left out and leaves it unchanged, untimed
    cutoff = [math.inf]
    for tp, cp, pp, dp, first, last, stages, acc, ep, etp, sp in _grids(spec, fx, ax, W):
        slots = tuple(
            n + (acc[0] and r == 0) + (acc[1] and r == pp - 1) for r, n in enumerate(stages)
        )
        for mem, step, var, terms in score_grid(
            spec,
            k,
            W,
            dom,
            tp,
            cp,
            pp,
            dp,
            stages,
            ep,
            etp,
            sp,
            zeros,
            recomputes,
            offloads,
            fx,
            limit * (1 + MEM_SLACK),
            slots,
            cutoff,
        ):
            if mem is None:
                pruned += step
                continue
            evaluated += 1
            min_mem = min(min_mem, mem)
            if mem > limit * (1 + MEM_SLACK):
                continue
            if step is None:  # bounded at or above the cutoff (terms: the lower bound)
                fits += mem <= limit
                dropped = min(dropped, terms)
                n_dropped += 1
                continue
            v, cpt, mbs, rc, zero, off = var
            fits += mem <= limit
            if len(pool) == KEEP_POOL and step >= -pool[0][0]:
                dropped = min(dropped, terms[TERMS.index("lower_bound")])
                dropped_fast = cutoff[0] = min(dropped_fast, step)
                n_dropped += 1
                continue
            order += 1
            cand = Candidate(
                tp,
                pp,
                v,
                cp,
                cpt,
                ep,
                etp,
                dp,
                first,
                last,
                mbs,
                rc,
                zero,
                off,
                mem,
                step,
                dict(zip(TERMS, terms, strict=True)),
                sp,
                acc=acc,
                tp_overlap=planned_tp_comm_overlap(spec, tp_fixed, tp, sp),
            )
            if len(pool) < KEEP_POOL:
                heapq.heappush(pool, (-step, -order, cand))
            else:
                out = heapq.heapreplace(pool, (-step, -order, cand))[2]
                dropped = min(dropped, out.terms["lower_bound"])
                dropped_fast = cutoff[0] = min(dropped_fast, out.step_seconds)
                n_dropped += 1
    ranked = [c for _, _, c in sorted(pool, key=lambda x: (-x[0], -x[1]))]
    best = sorted((c for c in ranked if c.memory_bytes <= limit), key=_rank_key)[:KEEP]
    return SearchResult(
        evaluated,
        best,
        fits,
        evaluated + pruned,
        ranked,
        dropped,
        dropped_fast,
        n_dropped,
        limit,
        min_mem,
    )


KEEP = 64
#: Layouts kept (by fast step time) for the planner's branch and bound.
KEEP_POOL = 1000
#: The fast model's memory may exceed the budget by this fraction and the layout is still
#: handed to the full estimator (whose fit check decides): the fast model never removes a layout
#: the full estimator would call fitting unless it overestimates memory by more than this.
MEM_SLACK = 0.15


def _rank_key(c: Candidate) -> tuple[float, float, tuple[int, ...]]:
    if c.rank is None:
        c.rank = (round(c.step_seconds, 9), round(c.memory_bytes), c.simplicity())
    return c.rank


def _expert_options(
    E: int, W: int, tp: int, pp: int, f_e: int, ep_fixed: int | None, etp_fixed: int | None
) -> Iterator[tuple[int, int]]:
    if not E:
        if (ep_fixed or 1) == 1:
            yield 1, tp
        return
    etps = [etp_fixed] if etp_fixed is not None else sorted({1, tp})
    for etp in etps:
        if f_e % etp:
            continue
        eps = [ep_fixed] if ep_fixed is not None else [e for e in divisors(E) if e <= MAX_EP]
        for ep in eps:
            if E % ep == 0 and W % (etp * ep * pp) == 0:
                yield ep, etp


def candidate_spec(spec: TrainSpec, cand: Candidate) -> TrainSpec:
    """A copy of ``spec`` with the candidate's layout applied (ready to normalize/validate)."""
    # normalization deep-copies the spec: a shallow copy of the two edited sections suffices
    s = dataclasses.replace(
        spec, parallel=copy.copy(spec.parallel), training=copy.copy(spec.training)
    )
    p, t = s.parallel, s.training
    p.tp, p.pp, p.vpp, p.cp, p.ep, p.etp = cand.tp, cand.pp, cand.vpp, cand.cp, cand.ep, cand.etp
    p.cp_comm_type = CpCommType[cand.cp_comm_type]
    p.dp = None
    p.sequence_parallel = cand.sp
    p.zero_stage = cand.zero
    p.pipeline_first_stage_layers, p.pipeline_last_stage_layers = cand.first, cand.last
    p.account_for_embedding_in_pipeline_split, p.account_for_loss_in_pipeline_split = cand.acc
    t.micro_batch_size = cand.mbs
    rc, method, n = cand.recompute
    t.recompute = Recompute[rc]
    t.recompute_method = RecomputeMethod[method] if method else None
    t.recompute_num_layers = n
    t.offload_optimizer = Offload[cand.offload]
    t.tp_comm_overlap = cand.tp_overlap
    return s


def explain(
    cand: Candidate, rank: int, step: float, best_step: float, recompute_fixed: bool = False
) -> str:
    """One line on what limits a candidate and why it ranks where it does (``step`` and
    ``best_step`` in seconds, from the full estimator when available; ``recompute_fixed``:
    the spec sets the recompute granularity, so full recompute is not the planner's
    choice)."""
    tm = cand.terms
    parts = {k: tm.get(k, 0.0) for k in ("tp", "cp", "ep", "pp", "dp", "bubble_seconds", "offload")}
    worst = max(parts, key=lambda x: parts[x])
    share = parts[worst] / cand.step_seconds if cand.step_seconds else 0.0
    label = {
        "bubble_seconds": "pipeline bubble",
        "tp": "TP communication",
        "cp": "CP communication",
        "ep": "EP all-to-all",
        "pp": "PP p2p",
        "dp": "DP gradient sync",
        "offload": "CPU offload (CPU Adam, PCIe)",
    }[worst]
    text = f"{label} is {share:.0%} of the step"
    if share < 0.005:  # "TP communication is 0% of the step" is no reason
        text = "compute-bound (communication, pipeline bubble and offload under 1% of the step)"
    elif worst == "bubble_seconds":
        text += f" (bubble {tm['bubble']:.1%})"
    if tm.get("tp_cross") and cand.tp > 1:
        text = (
            f"TP={cand.tp} crosses the NVLink domain: +{tm['intra_over_inter'] - 1:.0%} TP "
            f"time; " + text
        )
    if rank > 0 and best_step:
        slower = step / best_step - 1
        if abs(slower) >= 5e-4:
            text += f"; {slower:+.1%} vs best"
        elif slower > 0:  # would read "+0.0%": two significant digits instead
            text += f"; +{100 * slower:.2g}% vs best"
        else:
            text += "; as fast as the best"
    if cand.recompute[0] == "full" and not recompute_fixed:
        text += "; full recompute needed to fit"
    return text


def recompute_text(granularity: str, method: str | None, layers: int | None) -> str:
    """``full`` (every layer: Megatron's default uniform method, one layer per chunk),
    ``full block 10`` / ``full uniform 2`` (another method or chunk), ``selective`` or
    ``none``.

    >>> recompute_text("full", "uniform", 1), recompute_text("full", "block", 10)
    ('full', 'full block 10')
    """
    if granularity == "full" and method and (method, layers) != ("uniform", 1):
        return f"full {method} {layers}"
    return granularity


def summary(c: Candidate) -> dict[str, Any]:
    """The candidate's layout as contract keys."""
    par: dict[str, Any] = {
        "tp": c.tp,
        "pp": c.pp,
        "vpp": c.vpp,
        "cp": c.cp,
        "cp_comm_type": c.cp_comm_type,
        "ep": c.ep,
        "etp": c.etp,
        "dp": c.dp,
        "sequence_parallel": c.sp,
        "zero_stage": c.zero,
        "pipeline_first_stage_layers": c.first,
        "pipeline_last_stage_layers": c.last,
        "account_for_embedding_in_pipeline_split": c.acc[0],
        "account_for_loss_in_pipeline_split": c.acc[1],
    }
    tr: dict[str, Any] = {"micro_batch_size": c.mbs, "recompute": c.recompute[0]}
    if c.recompute[1]:
        tr["recompute_method"], tr["recompute_num_layers"] = c.recompute[1], c.recompute[2]
    if c.offload != "none":
        tr["offload_optimizer"] = c.offload
    if c.tp_overlap or c.tp > 1:  # off is a choice too once there is TP to overlap
        tr["tp_comm_overlap"] = c.tp_overlap
    return {"parallel": par, "training": tr}


def round_sig(x: float, digits: int = 6) -> float:
    """Round to significant digits (byte-stable JSON)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))
