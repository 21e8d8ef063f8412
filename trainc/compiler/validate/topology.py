"""TRC1xx: the parallel grid against the cluster (Megatron-Core ``initialize_model_parallel``).

Dense grid: world = tp*pp*cp*dp. Expert grid: world = etp*ep*pp*expert_dp. EP is *not* a factor
of the world: worked example B (docs/references.md: "total GPUs = 4 x 4 x 2 x 8 x 4 = 1024")
counts it as one; Megatron-Core folds experts onto the same GPUs (megatron-core 0.16.1
``parallel_state.py::initialize_model_parallel``, its dense and expert ``RankGenerator``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived, domain_group_nodes, slurm_segment
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.util import capacity, divisors, fitting, nearest, show
from trainc.schemas import TrainSpec


def topology(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """World-size factorization (TRC101-TRC104, TRC108) and NVLink-domain warnings (TRC105-TRC107).

    Sources: WS-1 ``world % (tp*pp*cp) == 0`` (validate_args, initialize_model_parallel); EXP-1
    ``world % (etp*ep*pp) == 0`` (initialize_model_parallel's expert generator); the NVLink
    warnings follow from the rank order (``RankGenerator``, tp fastest): t | G keeps a TP group in
    one node, as Narayanan et al. 2021 (arXiv:2104.04473 §3.3) advise; likewise t*c and t_e*e.
    """
    yield from _clock_cap(spec)
    yield from _dense_grid(spec, d)
    yield from _expert_grid(spec, d)
    yield from _nvlink(spec, d)


def _clock_cap(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC109: ``cluster.clock_cap`` outside (0, 1] (a cap above the profile's clock would raise
    the vendor's peak; 0 or less leaves no compute)."""
    cap = spec.cluster.clock_cap
    if not 0 < cap <= 1:
        yield diag(
            R.CLOCK_CAP,
            f"cluster.clock_cap ({cap}) must be in (0, 1]: the sustained clock as a "
            f"fraction of the GPU profile's (e.g. 0.85 for a power cap that holds the "
            f"SM clock at 85 % of boost)",
            "cluster.clock_cap",
            fix="set cluster.clock_cap to a fraction in (0, 1], or remove it (1.0)",
            clock_cap=cap,
        )


def _dense_grid(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    c, p, m = spec.cluster, spec.parallel, spec.model
    world, mp = d.world_size, d.model_parallel
    if world % mp:
        step = mp // math.gcd(mp, c.gpus_per_node)
        nodes = -(-c.num_nodes // step) * step
        alts = [f"cluster.num_nodes={nodes} ({nodes * c.gpus_per_node} GPUs)"]
        for axis, val, ok in (
            ("tp", p.tp, lambda v: m.num_attention_heads % v == 0),
            ("pp", p.pp, lambda v: m.num_layers % v == 0),
            ("cp", p.cp, lambda v: True),
        ):
            others = [x for a, x in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp)) if a != axis]
            room = capacity(world, *others)
            if val > 1 and room is not None:
                vals = [v for v in divisors(room) if ok(v)]
                alts.append(f"parallel.{axis} in {{{show(vals)}}}")
        short = f" (the model-parallel group alone needs {mp} GPUs)" if mp > world else ""
        culprit = next(
            (a for a, v in (("tp", p.tp), ("pp", p.pp), ("cp", p.cp)) if world % v), "tp"
        )
        rest = tuple(f"parallel.{a}" for a in ("tp", "pp", "cp") if a != culprit)
        yield diag(
            R.WORLD_FACTORIZATION,
            f"world size ({world} = {c.num_nodes} nodes x {c.gpus_per_node} GPUs) is not a "
            f"multiple of tp*pp*cp ({p.tp}*{p.pp}*{p.cp} = {mp}){short}",
            f"parallel.{culprit}",
            related=(*rest, "cluster.num_nodes", "cluster.gpus_per_node"),
            fix="set " + ", or ".join(alts),
            world_size=world,
            model_parallel=mp,
        )
        return
    if p.dp is None or d.dp is None or p.dp == d.dp:
        return
    used = mp * p.dp
    if p.ep > 1 and used * p.ep == world:
        yield diag(
            R.EP_COUNTED_IN_WORLD,
            f"parallel.dp ({p.dp}) counts ep ({p.ep}) as a separate factor of the world "
            f"(tp*pp*cp*ep*dp = {p.tp}*{p.pp}*{p.cp}*{p.ep}*{p.dp} = {world}); Megatron-Core has "
            f"two grids over the same {world} GPUs: dense world = tp*pp*cp*dp = "
            f"{p.tp}*{p.pp}*{p.cp}*{d.dp}, expert world = etp*ep*pp*expert_dp = "
            f"{d.etp}*{p.ep}*{p.pp}*{d.expert_dp or '?'}, so the same layout has dp = {d.dp}",
            "parallel.dp",
            related=("parallel.ep", "parallel.tp", "parallel.pp", "parallel.cp"),
            fix=f"set parallel.dp={d.dp} (or remove parallel.dp; it is derived)",
            edits={"parallel.dp": d.dp},
            dp=p.dp,
            ep=p.ep,
            megatron_dp=d.dp,
            expert_dp=d.expert_dp or 0,
            world_size=world,
        )
    elif used > world:
        nodes = -(-used // c.gpus_per_node)
        yield diag(
            R.WORLD_EXCEEDS_CLUSTER,
            f"tp*pp*cp*dp ({p.tp}*{p.pp}*{p.cp}*{p.dp} = {used}) exceeds the cluster's "
            f"{world} GPUs ({c.num_nodes} nodes x {c.gpus_per_node})",
            "parallel.dp",
            related=("cluster.num_nodes", "cluster.gpus_per_node"),
            fix=f"set parallel.dp={d.dp}, or cluster.num_nodes={nodes}"
            + ("" if used % c.gpus_per_node == 0 else f" with gpus_per_node dividing {used}"),
            edits={"parallel.dp": d.dp},
            used=used,
            world_size=world,
        )
    else:
        yield diag(
            R.DP_MISMATCH,
            f"parallel.dp ({p.dp}) disagrees with world/(tp*pp*cp) ({world}/{mp} = "
            f"{d.dp}); the job would leave {world - used} of {world} GPUs idle",
            "parallel.dp",
            related=("cluster.num_nodes", "parallel.tp", "parallel.pp", "parallel.cp"),
            fix=f"set parallel.dp={d.dp} (or remove parallel.dp; it is derived)",
            edits={"parallel.dp": d.dp},
            dp=p.dp,
            derived_dp=d.dp,
        )


def _expert_grid(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    c, p, m = spec.cluster, spec.parallel, spec.model
    if not m.num_experts and p.ep == 1:
        return  # dense model: no expert grid is built (ep/etp without experts is TRC312)
    world, egrid = d.world_size, d.etp * p.ep * p.pp
    if world % egrid == 0:
        return
    room = capacity(world, d.etp, p.pp)
    ok_ep = (
        [e for e in divisors(room) if not m.num_experts or m.num_experts % e == 0] if room else []
    )
    step = egrid // math.gcd(egrid, c.gpus_per_node)
    nodes = -(-c.num_nodes // step) * step
    # keep ep (the expert count per rank) and split the experts less: etp is searched too
    room_e = capacity(world, p.ep, p.pp)
    fe = m.moe_ffn_hidden_size or 0
    ok_etp = [x for x in divisors(room_e) if fe % x == 0] if room_e and fe else []
    # keeping ep (etp or more nodes) only helps when ep splits the experts at all (TRC205)
    ep_ok = not m.num_experts or m.num_experts % p.ep == 0
    alts = (
        ([f"parallel.ep to one of {show(ok_ep)}"] if ok_ep else [])
        + (
            [
                f"parallel.etp to one of {show(ok_etp)} (ep={p.ep} kept; etp {d.etp} "
                f"{'defaults to tp' if d.etp == p.tp else 'is given'}, the experts may split "
                f"differently from the dense layers)"
            ]
            if ok_etp and ep_ok
            else []
        )
        + ([f"cluster.num_nodes={nodes}"] if ep_ok else [])
    )
    over = f"; ep ({p.ep}) alone exceeds the {world} GPUs" if p.ep > world else ""
    yield diag(
        R.EXPERT_GRID,
        f"world size ({world}) is not a multiple of etp*ep*pp ({d.etp}*{p.ep}*{p.pp} = "
        f"{egrid}), so Megatron-Core cannot build the expert grid{over}",
        "parallel.ep",
        related=("parallel.etp", "parallel.pp", "cluster.num_nodes"),
        fix="set " + ", or ".join(alts),
        edits={"parallel.ep": nearest(ok_ep, p.ep)} if ok_ep else {},
        world_size=world,
        expert_grid=egrid,
    )


def _nvlink(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    c, p, m = spec.cluster, spec.parallel, spec.model
    dom = c.nvlink_domain_size or c.gpus_per_node
    intra, inter = c.intra_node_bandwidth_gbps, c.inter_node_bandwidth_gbps
    cost = (
        f"the {_gbps(inter)} fabric instead of {_gbps(intra)} NVLink "
        f"(~{_slowdown(intra, inter)}x less bandwidth)"
    )
    place = _Placement(spec, d)
    if place.cut(p.tp):
        ok = [t for t in fitting(divisors(m.num_attention_heads), dom) if t <= dom]
        yield diag(
            R.TP_NVLINK,
            place.why("tp", str(p.tp), p.tp, "TP") + f": their per-layer all-reduces cross {cost}",
            "parallel.tp",
            related=("cluster.nvlink_domain_size", *place.related(p.tp)),
            fix=f"use tp in {{{show(ok)}}} and more pp or dp" + place.fix(p.tp),
            tp=p.tp,
            nvlink_domain_size=dom,
            **place.facts(p.tp),
        )
    elif p.cp > 1 and place.cut(p.tp * p.cp):
        tc = p.tp * p.cp
        ok = [x for x in divisors(dom // p.tp) if x > 1] if dom % p.tp == 0 else []
        tps = [t for t in divisors(dom) if dom % (t * p.cp) == 0 and m.num_attention_heads % t == 0]
        yield diag(
            R.TP_CP_NVLINK,
            place.why("tp*cp", f"{p.tp}*{p.cp} = {tc}", tc, "TP x CP")
            + f": context-parallel attention traffic crosses {cost}",
            "parallel.cp",
            related=("parallel.tp", "cluster.nvlink_domain_size", *place.related(tc)),
            fix=(
                f"use cp in {{{show(ok)}}} with tp={p.tp}"
                if ok
                else f"use tp in {{{show(tps)}}} with cp={p.cp}"
                if tps
                else "reduce tp*cp to fit the NVLink domain"
            )
            + place.fix(tc)
            + ", or accept inter-node CP traffic (ring p2p overlaps it with attention)",
            tp=p.tp,
            cp=p.cp,
            nvlink_domain_size=dom,
            **place.facts(tc),
        )
    eg = d.etp * p.ep
    if m.num_experts and p.ep > 1 and place.cut(eg):
        # an ep that also builds the expert grid (TRC104: world a multiple of etp*ep*pp)
        ok = (
            [
                e
                for e in divisors(dom // d.etp)
                if m.num_experts % e == 0 and d.world_size % (d.etp * e * p.pp) == 0
            ]
            if dom % d.etp == 0
            else []
        )
        yield diag(
            R.EP_NVLINK,
            place.why("etp*ep", f"{d.etp}*{p.ep} = {eg}", eg, "EP")
            + f": MoE token all-to-all crosses {cost}",
            "parallel.ep",
            related=("parallel.etp", "cluster.nvlink_domain_size", *place.related(eg)),
            fix=(
                f"use ep in {{{show(ok)}}} (with etp={d.etp})"
                if ok
                else "use etp=1 and an ep dividing the NVLink domain"
            )
            + " if the all-to-all dominates the step"
            + place.fix(eg)
            + (
                _flex_across_domains(m.moe_flex_dispatcher_backend.value, dom)
                if m.moe_token_dispatcher_type.value == "flex"
                else ""
            ),
            etp=d.etp,
            ep=p.ep,
            nvlink_domain_size=dom,
            **place.facts(eg),
        )


def _flex_across_domains(backend: str, dom: int) -> str:
    """The flex dispatcher's own reports for an EP group wider than its NVLink domain (the fix's
    tail for TRC107): the group is not kept wide on their word.

    * hybridep on 8-GPU NVLink domains: Megatron-Bridge limits its recipes to EP 8 there, HybridEP
      with EP > 8 on NVL8 not yet being performant (NVIDIA-NeMo/Megatron-Bridge#2883, 2026-03;
      its H100 EP64 recipe fell to ~247 TFLOP/s against 330 at the baseline, #1731).
    * deepep across nodes: its internode kernels (NVSHMEM / IBGDA) time out or hang on some
      clusters and releases (deepseek-ai/DeepEP#411, #294, #158; Megatron-LM#5039 moved its
      8-node DeepSeek-V3 H100 test from DeepEP to HybridEP after internode_dispatch timeouts
      with the PyTorch 26.04 image).
    """
    if backend == "hybridep":
        return (
            "; HybridEP across 8-GPU NVLink domains is not tuned beyond EP 8 (Megatron-Bridge "
            "limits its NVL8 recipes to EP 8: NVIDIA-NeMo/Megatron-Bridge#2883)"
            if dom <= 8
            else "; HybridEP is tuned for EP inside one NVLink domain (GB200 NVL72): keep the "
            "etp x ep group inside it"
        )
    return (
        "; DeepEP's internode kernels need NVSHMEM with IBGDA and have timed out or hung "
        "across nodes (deepseek-ai/DeepEP#411, #294; Megatron-LM#5039 moved its 8-node "
        "DeepSeek-V3 test to model.moe_flex_dispatcher_backend=hybridep): run "
        "DeepEP's tests/test_internode.py on the cluster before a wide EP, or keep the "
        "group inside the NVLink domain"
    )


class _Placement:
    """Where consecutive ranks share an NVLink domain, for TRC105-TRC107.

    A TP, TP x CP or ETP x EP group is a run of ``size`` consecutive ranks aligned to its size
    (Megatron-Core 0.16.1 ``parallel_state.RankGenerator``, order tp-cp-ep-dp-pp), and torchrun
    numbers ranks node by node. A group stays on NVLink when it is no wider than the domain and
    no domain boundary cuts it: when ``size`` divides the domain (domains hold whole groups), or,
    where the domain spans several nodes (GB200 NVL72: 72 GPUs = 18 trays of 4), when the
    ``#SBATCH --segment`` that sbatch.sh asks for (:func:`slurm_segment`, each segment inside one
    domain, Slurm topology/block) holds whole groups (``segment * gpus_per_node`` a multiple of
    ``size``, TRC520 checks the segment itself). EP 8 x ETP 2 = 16 GPUs does not divide 72, but
    segments of 12 trays = 48 GPUs hold three groups each.
    """

    def __init__(self, spec: TrainSpec, d: Derived) -> None:
        c, p, lc = spec.cluster, spec.parallel, spec.launch
        self.gpus = c.gpus_per_node
        self.dom = c.nvlink_domain_size or c.gpus_per_node
        self.per_domain = max(self.dom // self.gpus, 1)
        self.nodes = c.num_nodes
        self.requested = lc.slurm_segment
        span = domain_group_nodes(
            p.tp, p.cp, d.etp, p.ep if spec.model.num_experts else 1, self.gpus
        )
        self.segment = slurm_segment(c.num_nodes, self.gpus, self.dom, lc.slurm_segment, span)

    @property
    def multi_node(self) -> bool:
        """The NVLink domain spans more than one node."""
        return self.per_domain > 1

    def _holds(self, seg: int, size: int) -> bool:
        return 0 < seg <= self.per_domain and (seg * self.gpus) % size == 0

    def cut(self, size: int) -> bool:
        """Some group of ``size`` GPUs leaves NVLink: wider than the domain, or cut by a domain
        boundary that neither the domain size nor the Slurm segment keeps clear of it."""
        if size <= 1:
            return False
        if size > self.dom:
            return True
        return self.dom % size != 0 and not (self.multi_node and self._holds(self.segment, size))

    def why(self, what: str, values: str, size: int, kind: str) -> str:
        """The message's first clause: "does not fit" (wider than the domain) or "does not
        divide" (groups straddle two domains)."""
        if size > self.dom:
            return f"{what} ({values}) does not fit the NVLink domain ({self.dom} GPUs)"
        if not self.multi_node:
            text = f"{what} ({values}) does not divide the NVLink domain ({self.dom} GPUs)"
        else:
            text = (
                f"{what} ({values}) does not divide the NVLink domain ({self.dom} GPUs = "
                f"{self.per_domain} nodes)"
            )
            text += (
                f" and sbatch.sh's --segment={self.segment} ({self.segment} nodes = "
                f"{self.segment * self.gpus} GPUs) does not hold whole groups"
                if self.segment
                else " and sbatch.sh asks for no --segment (launch.slurm_segment 0)"
            )
        return text + f", so some {kind} groups straddle two domains"

    def segments(self, size: int) -> list[int]:
        """Segment sizes (nodes, largest first) that divide num_nodes, fit one domain and hold
        whole groups of ``size`` GPUs; none where the domain is one node."""
        if not self.multi_node or size > self.dom:
            return []
        return [
            s
            for s in range(min(self.per_domain, self.nodes), 1, -1)
            if self.nodes % s == 0 and self._holds(s, size)
        ]

    def fix(self, size: int) -> str:
        """``", or launch.slurm_segment=N"`` where a segment would keep the groups whole."""
        segs = self.segments(size)
        if not segs:
            return ""
        return (
            f", or launch.slurm_segment in {{{show(segs)}}} (segments of whole groups "
            "inside one domain)"
        )

    def related(self, size: int) -> tuple[str, ...]:
        """``launch.slurm_segment`` among the related keys where it is part of the finding."""
        return ("launch.slurm_segment",) if self.multi_node and size <= self.dom else ()

    def facts(self, size: int) -> dict[str, Any]:
        """The placement facts of a TRC105-TRC107 finding about a group of ``size`` GPUs: the
        Slurm segment and the nodes per domain where the message names them (a domain of
        several nodes that the group fits), none otherwise."""
        if not (self.multi_node and size <= self.dom):
            return {}
        return {"slurm_segment": self.segment, "nodes_per_domain": self.per_domain}


def _gbps(v: float | None) -> str:
    return f"{v:g} GB/s" if v else "(unknown bandwidth)"


def _slowdown(intra: float | None, inter: float | None) -> str:
    if not intra or not inter:
        return "?"
    return f"{intra / inter:.0f}"
