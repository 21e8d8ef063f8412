"""Rank map: Megatron-Core's rank layout and process groups, computed without listing every rank.

Source: ``megatron/core/parallel_state.py`` (``RankGenerator``, ``generate_masked_orthogonal_rank_
groups``, megatron-core 0.16.1). The order string ``tp-cp-ep-dp-pp`` is read fastest
axis first, so a global rank is ``r = tp + TP*(cp + CP*(ep + EP*(dp + DP*pp)))``. Two generators
share the world: the dense one (``ep = 1``) and the expert one (``tp = etp``, ``cp = 1``,
``dp = expert_dp``). A group over axes S is the set of ranks that agree on every axis outside S;
groups are listed with the first outside axis varying fastest and, inside a group, the first S
axis fastest. The node of a rank is ``rank // gpus_per_node`` (torchrun numbers ranks node by node).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice, product
from typing import Any

DENSE_ORDER = ("tp", "cp", "ep", "dp", "pp")

#: Groups reported per rank: name -> (generator, axes). Megatron's names in comments.
GROUP_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tp": ("dense", ("tp",)),  # tensor model parallel
    "cp": ("dense", ("cp",)),  # context parallel
    "dp": ("dense", ("dp",)),  # data parallel (data loader)
    "dp_cp": ("dense", ("cp", "dp")),  # gradient reduce / dist-opt shard (intra_dp_cp)
    "pp": ("dense", ("pp",)),  # pipeline
    "etp": ("expert", ("tp",)),  # expert tensor parallel
    "ep": ("expert", ("ep",)),  # expert model parallel (token all-to-all)
    "expert_dp": ("expert", ("dp",)),  # expert data parallel (expert grad reduce)
}


@dataclass(frozen=True)
class RankGrid:
    """A mixed-radix grid over the world: axis names fastest first and their sizes."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def world(self) -> int:
        """Product of the sizes."""
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def strides(self) -> dict[str, int]:
        """Rank distance between neighbours along each axis.

        >>> RankGrid(DENSE_ORDER, (2, 2, 1, 2, 2)).strides()
        {'tp': 1, 'cp': 2, 'ep': 4, 'dp': 4, 'pp': 8}
        """
        out, acc = {}, 1
        for n, s in zip(self.names, self.sizes, strict=True):
            out[n] = acc
            acc *= s
        return out

    def coords(self, rank: int) -> dict[str, int]:
        """Coordinates of ``rank``.

        >>> RankGrid(DENSE_ORDER, (2, 2, 1, 2, 2)).coords(13)
        {'tp': 1, 'cp': 0, 'ep': 0, 'dp': 1, 'pp': 1}
        """
        out = {}
        for n, s in zip(self.names, self.sizes, strict=True):
            out[n] = rank % s
            rank //= s
        return out

    def rank(self, coords: dict[str, int]) -> int:
        """Inverse of :meth:`coords` (missing axes are 0)."""
        r, acc = 0, 1
        for n, s in zip(self.names, self.sizes, strict=True):
            r += coords.get(n, 0) * acc
            acc *= s
        return r

    def group_of(self, rank: int, axes: tuple[str, ...], limit: int | None = None) -> list[int]:
        """The group over ``axes`` that contains ``rank`` (first listed axis fastest); only its
        first ``limit`` members when given (groups of 16k-GPU jobs are long)."""
        base = self.coords(rank)
        inside = [n for n in self.names if n in axes]
        sizes = [self.sizes[self.names.index(n)] for n in inside]
        strides = self.strides()
        # members differ from the group's first rank by sum(coord * stride) over the inside axes
        first = rank - sum(base[n] * strides[n] for n in inside)
        steps = [strides[n] for n in reversed(inside)]
        combos = islice(product(*(range(s) for s in reversed(sizes))), limit)
        return [first + sum(c * st for c, st in zip(combo, steps, strict=True)) for combo in combos]

    def group_size(self, axes: tuple[str, ...]) -> int:
        """Members of every group over ``axes``."""
        return math.prod(s for n, s in zip(self.names, self.sizes, strict=True) if n in axes)

    def groups(self, axes: tuple[str, ...]) -> Iterator[list[int]]:
        """Every group over ``axes`` in Megatron's order (first outside axis fastest)."""
        outside = [n for n in self.names if n not in axes]
        sizes = [self.sizes[self.names.index(n)] for n in outside]
        for combo in product(*(range(s) for s in reversed(sizes))):
            c = dict(zip(reversed(outside), combo, strict=True))
            yield self.group_of(self.rank(c), axes)

    def spans(self, axes: tuple[str, ...], domain: int) -> bool:
        """True if some group over ``axes`` has ranks in two different ``domain``-sized blocks
        (nodes, or NVLink domains). Groups are translates of one another by the outside strides,
        so checking the group's extent from each start is exact; cost O(world)."""
        if domain <= 0:
            return True
        strides = self.strides()
        size = dict(zip(self.names, self.sizes, strict=True))
        # extent of a group: the last member's distance from the first
        hi = sum((size[n] - 1) * strides[n] for n in self.names if n in axes)
        if hi == 0:
            return False
        if hi >= domain:
            return True
        outside = tuple(n for n in self.names if n not in axes and size[n] > 1)
        if all(strides[n] % domain == 0 for n in outside):
            return False  # every group starts on a block boundary and is shorter than a block
        # A group starting at st crosses a block iff (st mod domain) + hi >= domain. The starts
        # are sums of c * stride over the outside axes; their residues mod domain form a set
        # of at most `domain` values (c * stride mod domain repeats after `domain` steps).
        residues = {0}
        for n in outside:
            offs = {c * strides[n] % domain for c in range(min(size[n], domain))}
            residues = {(r + o) % domain for r in residues for o in offs}
        return max(residues) + hi >= domain


def dense_grid(d: dict[str, Any]) -> RankGrid:
    """The dense/decoder generator: tp, cp, ep=1, dp, pp."""
    return RankGrid(DENSE_ORDER, (d["tp"], d["cp"], 1, d["dp"], d["pp"]))


def expert_grid(d: dict[str, Any]) -> RankGrid:
    """The expert generator: tp=etp, cp=1, ep, dp=expert_dp, pp."""
    return RankGrid(DENSE_ORDER, (d["etp"], 1, d["ep"], d["expert_dp"], d["pp"]))


def grids(d: dict[str, Any]) -> dict[str, RankGrid]:
    """Both generators of a plan's ``derived`` dict."""
    return {"dense": dense_grid(d), "expert": expert_grid(d)}


def rank_row(
    d: dict[str, Any], rank: int, gpus_per_node: int, max_members: int = 16
) -> dict[str, Any]:
    """One rank's coordinates, node and groups (each group: size and up to ``max_members`` ranks)."""
    g = grids(d)
    dc, ec = g["dense"].coords(rank), g["expert"].coords(rank)
    row: dict[str, Any] = {
        "rank": rank,
        "node": rank // max(gpus_per_node, 1),
        "local_rank": rank % max(gpus_per_node, 1),
        "tp": dc["tp"],
        "cp": dc["cp"],
        "dp": dc["dp"],
        "pp": dc["pp"],
        "etp": ec["tp"],
        "ep": ec["ep"],
        "expert_dp": ec["dp"],
        "groups": {},
    }
    for kind, (gen, axes) in GROUP_KINDS.items():
        members = g[gen].group_of(rank, axes, limit=max_members)
        row["groups"][kind] = {"size": g[gen].group_size(axes), "ranks": members}
    return row


def rank_map_summary(
    d: dict[str, Any], gpus_per_node: int, nvlink_domain: int, max_rows: int | None = None
) -> dict[str, Any]:
    """What plan.json stores: generator sizes, strides, which groups leave a node / NVLink
    domain, and the first node's ranks (never the whole world). Memoized on the generator
    sizes (the layout planner estimates many layouts of one grid): calls with the same sizes
    return the same object, which callers only read."""
    g = grids(d)
    rows = min(max_rows or gpus_per_node, d["world_size"])
    key = (g["dense"].sizes, g["expert"].sizes, gpus_per_node, nvlink_domain, rows)
    hit = _SUMMARIES.get(key)
    if hit is None:
        if len(_SUMMARIES) > 4096:
            _SUMMARIES.clear()
        hit = _SUMMARIES[key] = _summary(d, g, gpus_per_node, nvlink_domain, rows)
    return hit


_SUMMARIES: dict[tuple[Any, ...], dict[str, Any]] = {}


def _summary(
    d: dict[str, Any], g: dict[str, RankGrid], gpus_per_node: int, nvlink_domain: int, rows: int
) -> dict[str, Any]:
    return {
        "order": "-".join(DENSE_ORDER),
        "dense": dict(zip(DENSE_ORDER, g["dense"].sizes, strict=True)),
        "expert": dict(zip(DENSE_ORDER, g["expert"].sizes, strict=True)),
        "strides": {"dense": g["dense"].strides(), "expert": g["expert"].strides()},
        "gpus_per_node": gpus_per_node,
        "nvlink_domain_size": nvlink_domain,
        "groups_cross_nodes": {
            k: g[gen].spans(axes, gpus_per_node) for k, (gen, axes) in GROUP_KINDS.items()
        },
        "groups_cross_nvlink_domain": {
            k: g[gen].spans(axes, nvlink_domain) for k, (gen, axes) in GROUP_KINDS.items()
        },
        "first_node": [rank_row(d, r, gpus_per_node) for r in range(rows)],
    }


def members_per_domain(d: dict[str, Any], nvlink_domain: int, limit: int = 8192) -> dict[str, int]:
    """Per group kind: how many members of the first group share one NVLink domain (the fewest
    over the domains it touches; the first ``limit`` members only).

    A group that leaves its domain crosses the scale-out fabric; on a rail-optimised fabric
    (one NIC per GPU, NCCL one channel per NIC) the ``g`` members inside a domain drive ``g``
    NICs in parallel, so the group's bus bandwidth is ``min(NVLink, g x NIC)`` (NCCL's ring
    crosses each domain boundary once per channel).

    >>> members_per_domain({"tp": 1, "cp": 1, "dp": 16, "pp": 1, "etp": 1, "ep": 1,
    ...                     "expert_dp": 16}, 8)["dp_cp"]
    8

    Memoized on the generator sizes, the domain and ``limit`` (as :func:`rank_map_summary`);
    each call returns its own dict (callers add to it).
    """
    g = grids(d)
    key = (g["dense"].sizes, g["expert"].sizes, nvlink_domain, limit)
    hit = _MEMBERS.get(key)
    if hit is None:
        if len(_MEMBERS) > 4096:
            _MEMBERS.clear()
        hit = _MEMBERS[key] = _members(g, nvlink_domain, limit)
    return dict(hit)


_MEMBERS: dict[tuple[Any, ...], dict[str, int]] = {}


def _members(g: dict[str, RankGrid], nvlink_domain: int, limit: int) -> dict[str, int]:
    out = {}
    for k, (gen, axes) in GROUP_KINDS.items():
        members = g[gen].group_of(0, axes, limit)
        counts: dict[int, int] = {}
        for r in members:
            counts[r // max(nvlink_domain, 1)] = counts.get(r // max(nvlink_domain, 1), 0) + 1
        out[k] = min(counts.values()) if counts else 1
    return out
