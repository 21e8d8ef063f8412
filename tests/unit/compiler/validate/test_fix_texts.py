"""Fix texts found wrong by trying them (a red-team pass): every value a fix proposes must pass
the rule it fixes."""

from __future__ import annotations

import re

from tests.support.kit import find, lint_cfg


def test_hidden_heads_fix_offers_the_likely_typo_and_heads_that_respect_gqa():
    base = {"model.hidden_size": 4100, "model.num_attention_heads": 32, "model.num_query_groups": 8}
    [d] = find(lint_cfg(**base), "TRC208")
    assert "model.hidden_size=4096" in d.fix
    listed = re.search(r"num_attention_heads to one of ([\d, ]+)", d.fix)
    for heads in [int(x) for x in listed.group(1).split(",")] if listed else []:
        diags = lint_cfg(**base, **{"model.num_attention_heads": heads})
        assert not find(diags, "TRC208") and not find(diags, "TRC207"), heads
    assert not find(lint_cfg(**{**base, "model.hidden_size": 4096}), "TRC208")


def test_zero_stage_layers_say_they_must_be_positive():
    [d] = find(
        lint_cfg(
            **{
                "model.num_layers": 32,
                "parallel.pp": 4,
                "parallel.pipeline_first_stage_layers": 0,
                "parallel.pipeline_last_stage_layers": 0,
            }
        ),
        "TRC212",
    )
    assert "must be at least 1" in d.message and "divides evenly" not in d.message


def test_an_invalid_tp_is_not_fixed_by_changing_the_sequence():
    """tp=3 with 8 heads: TRC201 says which tp to use; TRC218 (seq / tp) must not propose a new
    seq_length for a tp that cannot work anyway."""
    diags = lint_cfg(
        **{
            "parallel.tp": 3,
            "parallel.pp": 1,
            "cluster.gpus_per_node": 3,
            "parallel.sequence_parallel": True,
        }
    )
    assert find(diags, "TRC201") and not find(diags, "TRC218")
    # with a tp that does split the heads, TRC218 still guards the sequence
    diags = lint_cfg(
        **{
            "parallel.tp": 4,
            "parallel.pp": 1,
            "cluster.gpus_per_node": 4,
            "model.seq_length": 1022,
            "parallel.sequence_parallel": True,
        }
    )
    assert find(diags, "TRC218")


def test_tp_that_does_not_divide_the_domain_is_described_as_straddling():
    [d] = find(
        lint_cfg(
            **{
                "model.num_attention_heads": 12,
                "model.num_query_groups": 12,
                "model.hidden_size": 768,
                "model.ffn_hidden_size": 3072,
                "parallel.tp": 3,
                "parallel.pp": 1,
                "cluster.num_nodes": 3,
                "training.global_batch_size": 8,
            }
        ),
        "TRC105",
    )
    assert "does not divide the NVLink domain (8 GPUs)" in d.message
