"""TRC1xx: the parallel grid against the cluster (Megatron-Core ``initialize_model_parallel``).

Dense grid: world = tp*pp*cp*dp. Expert grid: world = etp*ep*pp*expert_dp. EP is *not* a factor
of the world (seed 002 §"1024 GPU" counts it as one; Megatron-Core does not).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.validate.util import divisors, show
from trainc.schemas import TrainSpec


def topology(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """World-size factorization (TRC101-TRC104, TRC108) and NVLink-domain warnings (TRC105-TRC107)."""
    c, p = spec.cluster, spec.parallel
    world, mp = d.world_size, d.model_parallel
    if world % mp:
        ok_dp = [w // mp for w in range(mp, world + 1, mp)]
        fix = (f"use num_nodes x gpus_per_node that is a multiple of tp*pp*cp ({mp}), or change "
               f"tp/pp/cp so that their product divides {world} (divisors: {show(divisors(world))})")
        yield diag(R.WORLD_FACTORIZATION,
                   f"world size ({world} = {c.num_nodes} nodes x {c.gpus_per_node} GPUs) is not a "
                   f"multiple of tp*pp*cp ({p.tp}*{p.pp}*{p.cp} = {mp})", "parallel.tp",
                   related=("parallel.pp", "parallel.cp", "cluster.num_nodes"), fix=fix,
                   world_size=world, model_parallel=mp, valid_dp=ok_dp[:1])
    elif p.dp is not None and d.dp is not None and p.dp != d.dp:
        used = mp * p.dp
        if p.ep > 1 and used * p.ep == world:
            yield diag(
                R.EP_COUNTED_IN_WORLD,
                f"parallel.dp ({p.dp}) counts ep ({p.ep}) as a separate factor of the world "
                f"(tp*pp*cp*ep*dp = {p.tp}*{p.pp}*{p.cp}*{p.ep}*{p.dp} = {world}); in Megatron-Core "
                f"experts are sharded on a second grid over the same GPUs (etp*ep*pp*expert_dp = "
                f"{d.etp}*{p.ep}*{p.pp}*{d.expert_dp}), so dp = world/(tp*pp*cp) = {d.dp}",
                "parallel.dp", related=("parallel.ep",),
                fix=f"set parallel.dp to {d.dp} (or remove it; it is derived)",
                edits={"parallel.dp": d.dp}, dp=p.dp, ep=p.ep, megatron_dp=d.dp,
                expert_dp=d.expert_dp or 0)
        elif used > world:
            yield diag(R.WORLD_EXCEEDS_CLUSTER,
                       f"tp*pp*cp*dp ({p.tp}*{p.pp}*{p.cp}*{p.dp} = {used}) exceeds the cluster's "
                       f"{world} GPUs ({c.num_nodes} x {c.gpus_per_node})", "parallel.dp",
                       related=("cluster.num_nodes",),
                       fix=f"set parallel.dp to {d.dp} or cluster.num_nodes to "
                           f"{-(-used // c.gpus_per_node)}",
                       edits={"parallel.dp": d.dp}, used=used, world_size=world)
        else:
            yield diag(R.DP_MISMATCH,
                       f"parallel.dp ({p.dp}) disagrees with world/(tp*pp*cp) ({world}/{mp} = "
                       f"{d.dp}); the job would leave {world - used} of {world} GPUs idle",
                       "parallel.dp", related=("cluster.num_nodes",),
                       fix=f"set parallel.dp to {d.dp} (or remove it; it is derived)",
                       edits={"parallel.dp": d.dp}, dp=p.dp, derived_dp=d.dp)
    egrid = d.etp * p.ep * p.pp
    if world % egrid:
        ok_ep = [e for e in divisors(world // max(1, d.etp * p.pp)) if e >= 1] \
            if world % (d.etp * p.pp) == 0 else []
        yield diag(R.EXPERT_GRID,
                   f"world size ({world}) is not a multiple of etp*ep*pp ({d.etp}*{p.ep}*{p.pp} = "
                   f"{egrid}), so Megatron-Core cannot build the expert grid", "parallel.ep",
                   related=("parallel.etp", "parallel.pp", "cluster.num_nodes"),
                   fix=(f"set parallel.ep to one of {show(ok_ep)}" if ok_ep else
                        "reduce etp*pp or add nodes"),
                   world_size=world, expert_grid=egrid)
    dom = c.nvlink_domain_size or c.gpus_per_node
    if p.tp > dom or dom % p.tp:
        yield diag(R.TP_NVLINK,
                   f"tp ({p.tp}) does not fit the NVLink domain ({dom} GPUs): its per-layer "
                   f"all-reduces cross the {c.inter_node_bandwidth_gbps:g} GB/s fabric instead of "
                   f"{c.intra_node_bandwidth_gbps:g} GB/s NVLink "
                   f"(~{_slowdown(c.intra_node_bandwidth_gbps, c.inter_node_bandwidth_gbps)}x "
                   f"slower TP communication)", "parallel.tp",
                   related=("cluster.nvlink_domain_size",),
                   fix=f"use tp in {show([x for x in divisors(dom)])} and more pp or cp",
                   tp=p.tp, nvlink_domain_size=dom)
    elif p.cp > 1 and (p.tp * p.cp > dom or dom % (p.tp * p.cp)):
        yield diag(R.TP_CP_NVLINK,
                   f"tp*cp ({p.tp}*{p.cp} = {p.tp * p.cp}) does not fit the NVLink domain ({dom} "
                   f"GPUs): context-parallel attention traffic crosses the "
                   f"{c.inter_node_bandwidth_gbps:g} GB/s fabric", "parallel.cp",
                   related=("parallel.tp", "cluster.nvlink_domain_size"),
                   fix="reduce tp*cp to fit the NVLink domain, or accept inter-node CP traffic",
                   tp=p.tp, cp=p.cp, nvlink_domain_size=dom)
    if spec.model.num_experts and p.ep > 1 and (d.etp * p.ep > dom or dom % (d.etp * p.ep)):
        yield diag(R.EP_NVLINK,
                   f"etp*ep ({d.etp}*{p.ep} = {d.etp * p.ep}) does not fit the NVLink domain ({dom} "
                   f"GPUs): MoE token all-to-all crosses the {c.inter_node_bandwidth_gbps:g} GB/s "
                   f"fabric", "parallel.ep", related=("parallel.etp", "cluster.nvlink_domain_size"),
                   fix="keep etp*ep within the NVLink domain if the all-to-all dominates",
                   etp=d.etp, ep=p.ep, nvlink_domain_size=dom)


def _slowdown(intra: float | None, inter: float | None) -> str:
    if not intra or not inter:
        return "?"
    return f"{intra / inter:.0f}"
