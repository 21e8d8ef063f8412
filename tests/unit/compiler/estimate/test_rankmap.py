"""Rank map against Megatron-Core's RankGenerator (megatron/core/parallel_state.py, core_v0.16.1)
(W=16, TP2 CP2 DP2 PP2, order tp-cp-ep-dp-pp)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainc.compiler.estimate.rankmap import (
    DENSE_ORDER,
    RankGrid,
    dense_grid,
    expert_grid,
    rank_map_summary,
    rank_row,
)

DENSE = RankGrid(DENSE_ORDER, (2, 2, 1, 2, 2))


def derived(ep=1, etp=2, edp=None):
    edp = edp if edp is not None else 16 // (etp * ep * 2)
    return {
        "tp": 2,
        "cp": 2,
        "dp": 2,
        "pp": 2,
        "ep": ep,
        "etp": etp,
        "expert_dp": edp,
        "world_size": 16,
    }


def test_dense_groups_match_reference_table():
    assert list(DENSE.groups(("tp",))) == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
        [8, 9],
        [10, 11],
        [12, 13],
        [14, 15],
    ]
    assert list(DENSE.groups(("cp",))) == [
        [0, 2],
        [1, 3],
        [4, 6],
        [5, 7],
        [8, 10],
        [9, 11],
        [12, 14],
        [13, 15],
    ]
    assert list(DENSE.groups(("dp",))) == [
        [0, 4],
        [1, 5],
        [2, 6],
        [3, 7],
        [8, 12],
        [9, 13],
        [10, 14],
        [11, 15],
    ]
    assert list(DENSE.groups(("cp", "dp"))) == [
        [0, 2, 4, 6],
        [1, 3, 5, 7],
        [8, 10, 12, 14],
        [9, 11, 13, 15],
    ]
    assert list(DENSE.groups(("pp",))) == [
        [0, 8],
        [1, 9],
        [2, 10],
        [3, 11],
        [4, 12],
        [5, 13],
        [6, 14],
        [7, 15],
    ]
    assert list(DENSE.groups(("tp", "pp"))) == [
        [0, 1, 8, 9],
        [2, 3, 10, 11],
        [4, 5, 12, 13],
        [6, 7, 14, 15],
    ]
    assert list(DENSE.groups(("tp", "cp"))) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]
    assert list(DENSE.groups(("tp", "dp"))) == [
        [0, 1, 4, 5],
        [2, 3, 6, 7],
        [8, 9, 12, 13],
        [10, 11, 14, 15],
    ]
    assert list(DENSE.groups(("tp", "cp", "dp"))) == [list(range(8)), list(range(8, 16))]


def test_coordinates_formula():
    # r = tp + 2*cp + 4*dp + 8*pp
    for r in range(16):
        c = DENSE.coords(r)
        assert r == c["tp"] + 2 * c["cp"] + 4 * c["dp"] + 8 * c["pp"]
    assert dense_grid(derived()) == DENSE


def test_expert_grid_rows():
    g = expert_grid(derived(ep=4, etp=1))  # D_e = 2
    assert list(g.groups(("ep",))) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert list(g.groups(("dp",))) == [
        [0, 4],
        [1, 5],
        [2, 6],
        [3, 7],
        [8, 12],
        [9, 13],
        [10, 14],
        [11, 15],
    ]
    assert all(len(x) == 1 for x in g.groups(("tp",)))
    g = expert_grid(derived(ep=2, etp=2))
    assert list(g.groups(("tp",)))[:2] == [[0, 1], [2, 3]]
    assert list(g.groups(("ep",))) == [
        [0, 2],
        [1, 3],
        [4, 6],
        [5, 7],
        [8, 10],
        [9, 11],
        [12, 14],
        [13, 15],
    ]
    assert list(g.groups(("dp",)))[:2] == [[0, 4], [1, 5]]
    g = expert_grid(derived(ep=8, etp=1))  # D_e = 1
    assert list(g.groups(("ep",))) == [list(range(8)), list(range(8, 16))]
    assert all(len(x) == 1 for x in g.groups(("dp",)))


def test_rank_row_and_spans():
    row = rank_row(derived(ep=4, etp=1), 13, gpus_per_node=8)
    assert (row["node"], row["tp"], row["cp"], row["dp"], row["pp"]) == (1, 1, 0, 1, 1)
    assert row["groups"]["dp_cp"]["ranks"] == [9, 11, 13, 15]
    assert row["groups"]["ep"]["ranks"] == [12, 13, 14, 15]
    assert not DENSE.spans(("tp", "cp", "dp"), 8)  # one stage = one node of 8
    assert DENSE.spans(("pp",), 8)
    assert DENSE.spans(("tp",), 1) and not DENSE.spans(("tp",), 2)


def test_summary_is_bounded_for_big_worlds():
    d = {
        "tp": 8,
        "cp": 1,
        "dp": 256,
        "pp": 8,
        "ep": 1,
        "etp": 8,
        "expert_dp": 256,
        "world_size": 16384,
    }
    s = rank_map_summary(d, 8, 8)
    assert len(s["first_node"]) == 8
    assert s["groups_cross_nodes"] == {
        "tp": False,
        "cp": False,
        "dp": True,
        "dp_cp": True,
        "pp": True,
        "etp": False,
        "ep": False,
        "expert_dp": True,
    }
    assert s["first_node"][0]["groups"]["dp"]["size"] == 256
    assert len(s["first_node"][0]["groups"]["dp"]["ranks"]) == 16


@given(
    st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=5, max_size=5),
    st.sets(st.sampled_from(DENSE_ORDER), min_size=1, max_size=3),
    st.sampled_from([1, 2, 3, 4, 8, 12, 72]),
)
@settings(max_examples=300, deadline=None)
def test_spans_equals_checking_every_group(sizes, axes, domain):
    """spans() decides from the residues of the group starts; brute force walks every group
    and limited group_of() lists are prefixes of the full ones."""
    grid = RankGrid(DENSE_ORDER, tuple(sizes))
    ax = tuple(n for n in DENSE_ORDER if n in axes)
    groups = list(grid.groups(ax))
    brute = any(len({r // domain for r in g}) > 1 for g in groups)
    assert grid.spans(ax, domain) == brute
    assert all(len(g) == grid.group_size(ax) for g in groups)
    assert grid.group_of(groups[-1][0], ax, limit=3) == groups[-1][:3]
