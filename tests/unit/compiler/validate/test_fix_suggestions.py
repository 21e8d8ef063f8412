"""Fix suggestions that would themselves fail another rule are not offered (a fresh-user trial:
TRC104 suggested more nodes for an ep that cannot split the experts; TRC217 / TRC218 suggested a
sequence length beyond max_position_embeddings)."""

from __future__ import annotations

from tests.support.kit import find, lint_cfg


def test_expert_grid_fix_keeps_ep_only_when_ep_splits_the_experts():
    moe = {
        "model.num_experts": 128,
        "model.moe_router_topk": 8,
        "parallel.tp": 1,
        "parallel.pp": 2,
        "cluster.num_nodes": 2,
    }
    bad = find(lint_cfg(**moe, **{"parallel.ep": 3}), "TRC104")[0]
    assert "cluster.num_nodes" not in bad.fix and "parallel.etp" not in bad.fix
    assert "parallel.ep to one of" in bad.fix
    assert find(lint_cfg(**moe, **{"parallel.ep": 3}), "TRC205")
    # an ep that splits 128 experts but not the grid: more nodes remain a fix
    keep = find(
        lint_cfg(**{**moe, "parallel.pp": 8, "cluster.num_nodes": 1}, **{"parallel.ep": 16}),
        "TRC104",
    )[0]
    assert "cluster.num_nodes=" in keep.fix


def test_sequence_fix_stays_within_max_position_embeddings():
    cp3 = {
        "parallel.cp": 3,
        "parallel.tp": 2,
        "parallel.pp": 1,
        "cluster.num_nodes": 3,
        "model.seq_length": 32768,
        "model.max_position_embeddings": 32770,
    }
    for rule in ("TRC217", "TRC218"):
        d = find(lint_cfg(**cp3), rule)[0]
        assert d.edits == {"model.seq_length": 32766}
        assert "32772" not in d.fix and "32766" in d.fix
    # max_position_embeddings equal to seq_length (set, or filled from it): both neighbours,
    # the larger with max_position_embeddings raised (a suggestion TRC219 accepts)
    same = {**cp3, "model.max_position_embeddings": 32768}
    d = find(lint_cfg(**same), "TRC217")[0]
    assert "32766 or 32772" in d.fix and "max_position_embeddings to at least 32772" in d.fix
    assert d.edits == {"model.seq_length": 32772, "model.max_position_embeddings": 32772}
    assert not find(lint_cfg(**{**same, **d.edits}), "TRC219")
    free = {k: v for k, v in same.items() if k != "model.max_position_embeddings"}
    assert find(lint_cfg(**free), "TRC217")[0].edits == d.edits
    tight = {**cp3, "model.seq_length": 4, "model.max_position_embeddings": 5}
    d = find(lint_cfg(**tight), "TRC217")[0]
    assert d.edits == {"model.seq_length": 6, "model.max_position_embeddings": 6}


def test_ep_nvlink_fix_offers_only_an_ep_that_builds_the_expert_grid():
    """TRC107 offered ep 8 on 24 GPUs with pp 2 (8 x 2 does not divide 24; a second user trial):
    its choices now divide the expert grid as TRC205's do."""
    moe = {
        "model.num_experts": 8,
        "model.moe_router_topk": 2,
        "parallel.tp": 1,
        "parallel.pp": 2,
        "cluster.num_nodes": 3,
        "training.global_batch_size": 48,
    }
    d = find(lint_cfg(**moe, **{"parallel.ep": 3}), "TRC107")[0]
    assert "use ep in {1, 2, 4}" in d.fix
