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
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trainc.compiler.validate.util import divisors
from trainc.planner.fast import ModelConsts, model_consts, state_bytes_per_param
from trainc.schemas import CpCommType, Engine, Offload, Recompute, RecomputeMethod, TrainSpec

GIB = 2**30
MAX_TP = 64
MAX_CP = 32
MAX_VPP = 8
MAX_MBS = 32
MAX_EP = 64
#: Parallel / training keys the planner searches; the ones the user set are kept fixed.
SEARCHED = (
    "parallel.tp", "parallel.pp", "parallel.vpp", "parallel.cp", "parallel.cp_comm_type",
    "parallel.ep", "parallel.etp", "parallel.dp", "parallel.sequence_parallel",
    "parallel.zero_stage", "parallel.pipeline_first_stage_layers",
    "parallel.pipeline_last_stage_layers", "training.micro_batch_size", "training.recompute",
    "training.recompute_method", "training.recompute_num_layers", "training.offload_optimizer",
    "training.offload_param",
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
    rank: tuple[float, float, int] | None = None

    def simplicity(self) -> int:
        """Number of parallel axes in use (fewer is simpler)."""
        return sum(x > 1 for x in (self.tp, self.pp, self.vpp, self.cp, self.ep))


@dataclass
class SearchResult:
    """Ranked candidates (best first) and how many layouts were estimated."""

    num_candidates_evaluated: int
    candidates: list[Candidate]
    num_fit: int
    num_candidates_considered: int = 0
    """Evaluated plus the layouts of grids pruned whole because their model states alone
    exceed the GPU memory (never enumerated one by one)."""


def _fixed(spec: TrainSpec, explicit: frozenset[str], key: str) -> Any:
    """The spec's value for ``key`` if the user set it, else None (searched)."""
    if key not in explicit:
        return None
    obj: Any = spec
    for part in key.split("."):
        obj = getattr(obj, part)
    return getattr(obj, "name", obj)


def _splits(L: int, pp: int, first: int | None, last: int | None,
            fixed: bool) -> Iterator[tuple[int | None, int | None, tuple[int, ...]]]:
    """Layer splits over pp stages: even when pp | L, else uneven first/last ends whose middle
    divides evenly (Megatron num_layers_in_first/last_pipeline_stage), at most 3 layers lighter."""
    from trainc.compiler.derive import layers_per_stage

    if fixed:
        st = layers_per_stage(L, pp, first, last)
        if st:
            yield first, last, st
        return
    if L % pp == 0:
        yield None, None, (L // pp,) * pp
        return
    if pp < 3:
        return
    per = L // pp
    for f in range(per, max(0, per - 4), -1):
        for la in range(f, max(0, per - 4), -1):  # the last stage also holds the logits
            st = layers_per_stage(L, pp, f, la)
            if st and max(st) - min(f, la) <= 3:
                yield f, la, st


def search(spec: TrainSpec, explicit: frozenset[str]) -> SearchResult:
    """Enumerate, prune and rank every layout of a *normalized* spec's model and cluster.

    Keys in ``explicit`` (set in the spec file or on the command line) are constraints.
    """
    m, c, t = spec.model, spec.cluster, spec.training
    W = c.num_nodes * c.gpus_per_node
    dom = c.nvlink_domain_size or c.gpus_per_node
    k = model_consts(spec)
    fx = {key: _fixed(spec, explicit, key) for key in SEARCHED}
    if fx["parallel.dp"] is None and "parallel.dp" in explicit:
        fx["parallel.dp"] = None
    a, g, L, s = m.num_attention_heads, m.num_query_groups or m.num_attention_heads, \
        m.num_layers, m.seq_length
    f = m.ffn_hidden_size or 4 * m.hidden_size
    E = m.num_experts or 0
    gbs = t.global_batch_size
    limit = (c.gpu_memory_gib or 80) * GIB - c.memory_reserve_gib * GIB
    deepspeed = spec.engine is Engine.deepspeed

    def pick(key: str, options: list[Any]) -> list[Any]:
        v = fx[key]
        return [v] if v is not None else options

    def sps(tp: int, cp: int) -> list[bool]:
        """Sequence parallel choices: off with tp=1; with tp>1 on (needs (s/cp) % tp == 0) or
        off, unless MoE (which wants it on) or the user fixed it."""
        if tp == 1:
            return [False]
        opts = [True] if (s // cp) % tp == 0 else []
        if not E:
            opts.append(False)
        fixed = fx["parallel.sequence_parallel"]
        return [o for o in opts if fixed is None or o == fixed]

    tps = pick("parallel.tp", [x for x in divisors(a) if x <= MAX_TP and f % x == 0
                               and (g % x == 0 or x % g == 0)])
    cps = pick("parallel.cp", [x for x in divisors(W) if x <= MAX_CP and (x == 1 or s % (2 * x) == 0)])
    if deepspeed:
        cps = [x for x in cps if x == 1]
    zeros = pick("parallel.zero_stage", [0, 1, 2, 3] if deepspeed else [0, 1])
    recomputes = pick("training.recompute", ["none", "selective", "full"])
    offloads = ["none"]
    if deepspeed and fx["training.offload_optimizer"] is None:
        offloads = ["none", "cpu"]
    elif deepspeed:
        offloads = [fx["training.offload_optimizer"]]

    def grids() -> Iterator[tuple[Any, ...]]:
        """(tp, cp, pp, dp, first, last, stages, ep, etp, sp) the grid rules allow."""
        for tp in tps:
            for cp in cps:
                if W % (tp * cp):
                    continue
                for pp in pick("parallel.pp", [x for x in divisors(W // (tp * cp)) if x <= L]):
                    if (W // (tp * cp)) % pp:
                        continue
                    dp = W // (tp * cp * pp)
                    if (fx["parallel.dp"] not in (None, dp)) or gbs % dp:
                        continue
                    for first, last, stages in _splits(
                            L, pp, fx["parallel.pipeline_first_stage_layers"],
                            fx["parallel.pipeline_last_stage_layers"], split_fixed):
                        for ep, etp in _expert_options(E, W, tp, pp, m.moe_ffn_hidden_size or f,
                                                       fx["parallel.ep"], fx["parallel.etp"]):
                            for sp in sps(tp, cp):
                                yield tp, cp, pp, dp, first, last, stages, ep, etp, sp

    split_fixed = fx["parallel.pipeline_first_stage_layers"] is not None or \
        fx["parallel.pipeline_last_stage_layers"] is not None
    evaluated = 0
    best: list[Candidate] = []
    worst: tuple[float, float, int] = (math.inf, math.inf, 0)
    fits = 0
    pruned = 0
    for tp, cp, pp, dp, first, last, stages, ep, etp, sp in grids():
        for mem, step, var, terms in _inner(spec, k, W, dom, tp, cp, pp, dp, stages, ep, etp,
                                            sp, zeros, recomputes, offloads, fx, deepspeed,
                                            limit):
            if mem is None:
                pruned += step
                continue
            evaluated += 1
            if mem > limit:
                continue
            fits += 1
            v, cpt, mbs, rc, zero, off = var
            if len(best) == KEEP and step > worst[0]:
                continue
            _keep(best, Candidate(tp, pp, v, cp, cpt, ep, etp, dp, first, last, mbs, rc, zero,
                                  off, mem, step, dict(zip(TERMS, terms, strict=True)), sp))
            if len(best) == KEEP:
                worst = _rank_key(best[-1])
    best.sort(key=_rank_key)
    return SearchResult(evaluated, best, fits, evaluated + pruned)


KEEP = 64


def _rank_key(c: Candidate) -> tuple[float, float, int]:
    if c.rank is None:
        c.rank = (round(c.step_seconds, 9), round(c.memory_bytes), c.simplicity())
    return c.rank


def _keep(best: list[Candidate], cand: Candidate) -> None:
    """Keep the KEEP best candidates (a bounded list: memory stays small on huge searches)."""
    if len(best) < KEEP:
        best.append(cand)
        if len(best) == KEEP:
            best.sort(key=_rank_key)
        return
    if _rank_key(cand) < _rank_key(best[-1]):
        best[-1] = cand
        i = len(best) - 1
        while i > 0 and _rank_key(best[i]) < _rank_key(best[i - 1]):
            best[i], best[i - 1] = best[i - 1], best[i]
            i -= 1


def _expert_options(E: int, W: int, tp: int, pp: int, f_e: int, ep_fixed: int | None,
                    etp_fixed: int | None) -> Iterator[tuple[int, int]]:
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


TERMS = ("compute", "tp", "cp", "ep", "pp", "dp", "bubble", "bubble_seconds", "tp_cross",
         "intra_over_inter")


def _inner(spec: TrainSpec, k: ModelConsts, W: int, dom: int, tp: int, cp: int, pp: int,
           dp: int, stages: tuple[int, ...], ep: int, etp: int, sp: bool, zeros: list[int],
           recomputes: list[str], offloads: list[str], fx: dict[str, Any], deepspeed: bool,
           limit: float) -> Iterator[tuple[Any, Any, Any, Any]]:
    """Score every (vpp, cp_comm_type, mbs, recompute, zero, offload) of one grid; yields
    (memory bytes, step seconds, the variable choices, the TERMS values), or once
    (None, number of layouts pruned, None, None) when no layout of the grid can fit."""
    m, c, t = spec.model, spec.cluster, spec.training
    h, s, a = m.hidden_size, m.seq_length, m.num_attention_heads
    g = m.num_query_groups or a
    d = m.kv_channels or h // a
    gbs = t.global_batch_size
    edp = W // (etp * ep * pp)
    eff_bw = c.comm_efficiency * 1e9
    intra, inter = (c.intra_node_bandwidth_gbps or 1) * eff_bw, \
        (c.inter_node_bandwidth_gbps or 1) * eff_bw
    gpn = c.gpus_per_node
    bw_tp = intra if tp <= dom and dom % tp == 0 else inter
    bw_cp = intra if tp * cp <= dom and dom % (tp * cp) == 0 else inter
    bw_ep = intra if etp * ep <= dom and dom % (etp * ep) == 0 else inter
    bw_dp = intra if tp * cp * dp <= gpn else inter
    bw_pp = intra if W // pp < gpn else inter
    peak = (c.peak_tflops or 1) * 1e12 * c.compute_efficiency
    overhead = c.layer_overhead_us * 1e-6
    hide = 1 - c.comm_overlap
    # model states on the most loaded stage (first or last stage carry the embedding/output)
    n_max = max(stages)
    untied = m.untie_embeddings_and_output_weights
    emb_first = k.p_embedding
    emb_last = k.p_embedding if (untied or pp > 1) else 0.0
    worst = 0.0
    for i, n in enumerate(stages):
        e = (emb_first if i == 0 else 0.0) + (emb_last if i == pp - 1 else 0.0)
        worst = max(worst, (n * k.p_layer_tp + e) / tp + n * k.p_layer_rep)
    p_dense = worst
    p_exp = n_max * k.moe_fraction * k.p_layer_experts / (ep * etp)
    precision = t.precision.name
    s_loc = s // cp
    vpps = [fx["parallel.vpp"]] if fx["parallel.vpp"] is not None else \
        [v for v in range(1, MAX_VPP + 1) if all(n % v == 0 for n in stages)
         and (v == 1 or pp > 1)]
    cps = [fx["parallel.cp_comm_type"]] if fx["parallel.cp_comm_type"] is not None else (
        ["p2p"] if cp == 1 else ["p2p", "all_gather"] +
        (["a2a"] if (a // tp) % cp == 0 and max(g // tp, 1) % cp == 0 else []))
    mbss = [fx["training.micro_batch_size"]] if fx["training.micro_batch_size"] is not None \
        else [b for b in divisors(gbs // dp) if b <= MAX_MBS]
    flops_gpu = k.flops_per_step / W
    shard = dp * cp
    red = (shard - 1) / shard if shard > 1 else 0.0
    grad_bytes = (p_dense + p_exp) * (4 if not deepspeed else 2)
    states = []  # (zero, offload, model-state bytes, exposed DP seconds): grid-only terms
    for zero in zeros:
        if deepspeed and zero > 1 and pp > 1:
            continue
        for off in offloads:
            if off != "none" and (not deepspeed or zero == 0):
                continue
            bpp = state_bytes_per_param(spec.engine.name, zero, precision, shard, off != "none",
                                        False)
            bpe = state_bytes_per_param(spec.engine.name, zero, precision, edp, off != "none",
                                        False)
            t_dp = hide * (red * grad_bytes * (1.5 if zero >= 1 else 2.0)) / bw_dp
            states.append((zero, off, p_dense * bpp + p_exp * bpe, t_dp))
    cross = float(bw_tp == inter and tp > 1)
    if not states or min(st[2] for st in states) > limit:
        # The model states alone exceed the GPU (fit rule TRC401): prune the whole grid.
        yield None, len(mbss) * len(vpps) * len(cps) * len(states) * 5, None, None
        return
    for mbs in mbss:
        if (gbs // dp) % mbs:
            continue
        M = gbs // (dp * mbs)
        sbh = s_loc * mbs * h * 2  # one activation tensor in bf16 (bytes)
        tokens = s_loc * mbs
        gemm_eff = tokens / (tokens + c.gemm_half_efficiency_tokens)
        full_l = _act_per_layer("full", sbh, tp, a, s_loc, mbs, h, sp)
        none_l = _act_per_layer("none", sbh, tp, a, s_loc, mbs, h, sp, c.flash_attention)
        sel_l = _act_per_layer("selective", sbh, tp, a, s_loc, mbs, h, sp)
        for v in vpps:
            if v > 1 and (M < pp or M % pp):
                continue
            inflight = min(pp, M) * (1 + (pp - 1) / (pp * v) if v > 1 else 1)
            bubble = (pp - 1) / (v * M + pp - 1)
            chunk = min(stages) // v
            for rc in _recompute_variants(recomputes, chunk, fx):
                # full/block n: n of each chunk's layers keep only their input, the rest keep
                # everything; full/uniform: every layer keeps only its input.
                frac = 1.0 if rc[1] != "block" else rc[2] / chunk
                group = rc[2] if rc[1] == "uniform" else 1
                per_layer = (frac * full_l / group + (1 - frac) * none_l if rc[0] == "full" else
                             sel_l if rc[0] == "selective" else none_l)
                act = per_layer * n_max * inflight
                if rc[0] == "full":
                    act += sel_l * group  # the recomputed group's working set
                act += 4 * sbh / tp  # embedding output / logits buffers (order of magnitude)
                extra = {"none": 0.0, "selective": k.attn_core_fraction / 3,
                         "full": frac / 3}[rc[0]]
                layers_steps = n_max * M  # layer-microbatches this stage runs per step
                t_comp = flops_gpu * (1 + extra) / (peak * gemm_eff) + \
                    layers_steps * (3 + (frac if rc[0] == "full" else 0)) * overhead
                n_tp = 8 + (4 * frac if rc[0] == "full" else 0)
                t_tp = n_tp * (tp - 1) / tp * (sbh / 1) * layers_steps / bw_tp if tp > 1 else 0.0
                for cpt in cps:
                    t_cp = _cp_time(cpt, cp, s_loc, mbs, g, d, layers_steps, bw_cp, tp)
                    t_ep = 0.0
                    if ep > 1:
                        tok = sbh / (tp if tp > 1 else 1) * (m.moe_router_topk)
                        t_ep = 4 * (ep - 1) / ep * tok * layers_steps * k.moe_fraction / bw_ep
                    work = t_comp + hide * (t_tp + t_cp + t_ep)
                    t_pp = 2 * (pp - 1) * (sbh / max(tp, 1)) / bw_pp * v if pp > 1 else 0.0
                    base = work / (1 - bubble) + t_pp
                    for zero, off, state_mem, t_dp in states:
                        yield state_mem + act, base + t_dp, (v, cpt, mbs, rc, zero, off), (
                            t_comp, hide * t_tp, hide * t_cp, hide * t_ep, t_pp, t_dp, bubble,
                            work * bubble / (1 - bubble), cross, intra / inter)


def _recompute_variants(recomputes: list[str], chunk: int, fx: dict[str, Any]
                        ) -> list[tuple[str, str | None, int | None]]:
    """(granularity, method, num_layers): full recompute as uniform/1 and as block over a
    quarter, half and three quarters of each chunk's layers (Megatron recompute_method)."""
    out: list[tuple[str, str | None, int | None]] = []
    for rc in recomputes:
        if rc != "full":
            out.append((rc, None, None))
            continue
        if fx["training.recompute_method"] is not None:
            out.append(("full", fx["training.recompute_method"],
                        fx["training.recompute_num_layers"] or 1))
            continue
        for n in (1, 2, 4):  # uniform: keep one input per group of n layers
            if n == 1 or n < chunk:
                out.append(("full", "uniform", n))
        for n in sorted({chunk // 4, chunk // 2, 3 * chunk // 4} - {0, chunk}):
            out.append(("full", "block", n))
    return out


def _act_per_layer(rc: str, sbh: float, tp: int, a: int, s_loc: int, mbs: int, h: int,
                   sp: bool = True, flash: bool = False) -> float:
    """Korthikanti et al. 2022 Table 2, bytes per layer per micro batch (``sbh`` = bytes of one
    bf16 s*b*h tensor): with SP 34sbh/t, without SP sbh*(10 + 24/t); no recompute adds
    5as^2b/t unless the attention is fused (``flash``: no score matrix is kept); full
    recompute keeps the layer input (2sbh, /t with SP)."""
    if rc == "full":
        return sbh / tp if sp else sbh
    base = 17 * sbh / tp if sp else sbh * (5 + 12 / tp)
    if rc == "selective" or flash:
        return base
    return base + 5 * a * s_loc * s_loc * mbs / tp


def _cp_time(kind: str, cp: int, s_loc: int, mbs: int, g: int, d: int, layers_steps: int,
             bw: float, tp: int) -> float:
    if cp == 1:
        return 0.0
    kv = 2 * s_loc * mbs * max(g // tp, 1) * d * 2  # K and V of one CP chunk, bf16
    if kind == "p2p":  # ring: each step's KV transfer overlaps a block of attention compute
        vol = 0.5 * 3 * (cp - 1) * kv
    elif kind == "all_gather":  # gathered before attention: exposed
        vol = 3 * (cp - 1) * kv
    else:  # a2a: q, k, v, o re-partitioned twice per layer pass
        vol = 6 * (cp - 1) / cp * kv * 2
    return vol * layers_steps / bw


def candidate_spec(spec: TrainSpec, cand: Candidate) -> TrainSpec:
    """A copy of ``spec`` with the candidate's layout applied (ready to normalize/validate)."""
    s = copy.deepcopy(spec)
    p, t = s.parallel, s.training
    p.tp, p.pp, p.vpp, p.cp, p.ep, p.etp = cand.tp, cand.pp, cand.vpp, cand.cp, cand.ep, cand.etp
    p.cp_comm_type = CpCommType[cand.cp_comm_type]
    p.dp = None
    p.sequence_parallel = cand.sp
    p.zero_stage = cand.zero
    p.pipeline_first_stage_layers, p.pipeline_last_stage_layers = cand.first, cand.last
    t.micro_batch_size = cand.mbs
    rc, method, n = cand.recompute
    t.recompute = Recompute[rc]
    t.recompute_method = RecomputeMethod[method] if method else None
    t.recompute_num_layers = n
    t.offload_optimizer = Offload[cand.offload]
    return s


def explain(cand: Candidate, rank: int, step: float, best_step: float) -> str:
    """One line on what limits a candidate and why it ranks where it does (``step`` and
    ``best_step`` in seconds, from the full estimator when available)."""
    tm = cand.terms
    parts = {k: tm[k] for k in ("tp", "cp", "ep", "pp", "dp", "bubble_seconds")}
    worst = max(parts, key=lambda x: parts[x])
    share = parts[worst] / cand.step_seconds if cand.step_seconds else 0.0
    label = {"bubble_seconds": "pipeline bubble", "tp": "TP communication",
             "cp": "CP communication", "ep": "EP all-to-all", "pp": "PP p2p",
             "dp": "DP gradient sync"}[worst]
    text = f"{label} is {share:.0%} of the step"
    if worst == "bubble_seconds":
        text += f" (bubble {tm['bubble']:.1%})"
    if tm.get("tp_cross") and cand.tp > 1:
        text = (f"TP={cand.tp} crosses the NVLink domain: +{tm['intra_over_inter'] - 1:.0%} TP "
                f"time; " + text)
    if rank > 0 and best_step:
        text += f"; {step / best_step - 1:+.1%} vs best"
    if cand.recompute[0] == "full":
        text += "; full recompute needed to fit"
    return text


def summary(c: Candidate) -> dict[str, Any]:
    """The candidate's layout as contract keys."""
    par: dict[str, Any] = {"tp": c.tp, "pp": c.pp, "vpp": c.vpp, "cp": c.cp,
                           "cp_comm_type": c.cp_comm_type, "ep": c.ep, "etp": c.etp, "dp": c.dp,
                           "sequence_parallel": c.sp, "zero_stage": c.zero,
                           "pipeline_first_stage_layers": c.first,
                           "pipeline_last_stage_layers": c.last}
    tr: dict[str, Any] = {"micro_batch_size": c.mbs, "recompute": c.recompute[0]}
    if c.recompute[1]:
        tr["recompute_method"], tr["recompute_num_layers"] = c.recompute[1], c.recompute[2]
    if c.offload != "none":
        tr["offload_optimizer"] = c.offload
    return {"parallel": par, "training": tr}


def round_sig(x: float, digits: int = 6) -> float:
    """Round to significant digits (byte-stable JSON)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))
