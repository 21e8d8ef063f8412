"""Validators are total and bounded for any spec that passes ranges.py (counts up to 1e12)."""

from __future__ import annotations

import time

import pytest

from tests.support.kit import lint_cfg

BIG = 10**12 - 1

EXTREMES = [
    {"model.num_layers": BIG, "parallel.pp": 7},
    {"model.num_layers": BIG, "parallel.pp": 7, "parallel.pipeline_first_stage_layers": BIG // 3},
    {"cluster.num_nodes": BIG, "cluster.gpus_per_node": BIG, "parallel.tp": 3},
    {"model.seq_length": BIG, "parallel.cp": 7, "parallel.tp": 4, "parallel.pp": 1},
    {"training.global_batch_size": BIG, "training.micro_batch_size": BIG - 2},
    {"model.num_experts": BIG, "parallel.ep": 7, "model.moe_router_topk": BIG},
    {"model.num_attention_heads": BIG, "model.num_query_groups": 999983, "parallel.tp": 8},
    {
        "model.vocab_size": BIG,
        "model.make_vocab_size_divisible_by": BIG,
        "parallel.tp": 8,
        "parallel.pp": 1,
    },
    {"model.hidden_size": 1, "model.num_attention_heads": BIG, "model.ffn_hidden_size": 1},
    {"cluster.nvlink_domain_size": BIG, "parallel.tp": 8, "parallel.pp": 1},
    {"parallel.vpp": BIG, "parallel.pp": 2},
    {"training.recompute": "full", "training.recompute_num_layers": BIG},
]


@pytest.mark.parametrize("changes", EXTREMES, ids=lambda c: ",".join(c))
def test_extreme_values_terminate_quickly(changes):
    start = time.process_time()
    diags = lint_cfg(**changes)
    assert time.process_time() - start < 5.0
    for d in diags:
        assert d.rule.id and d.key and d.message
