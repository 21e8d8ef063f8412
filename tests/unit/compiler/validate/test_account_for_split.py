"""Megatron's account_for_embedding/loss_in_pipeline_split (megatron/training/arguments.py,
core_v0.16.1):
the rules, the layer split, and what the estimates and artifacts make of it."""

from __future__ import annotations

import functools
import operator

from tests.support.kit import find, lint_cfg
from trainc.compiler.derive import layers_per_stage, stage_chunk_sizes, stage_layer_indices

EMB = "parallel.account_for_embedding_in_pipeline_split"
LOSS = "parallel.account_for_loss_in_pipeline_split"


def test_llama3_405b_split_counts_the_embedding_and_the_loss():
    # 126 layers + embedding + loss = 128 slots: 8 per stage on pp=16, 1 per chunk with vpp=8
    stages = layers_per_stage(126, 16, None, None, True, True)
    assert stages == (7,) + (8,) * 14 + (7,)
    chunks = stage_chunk_sizes(list(stages), 8, True, True)
    assert chunks[0] == [0] + [1] * 7 and chunks[-1] == [1] * 7 + [0]
    assert all(c == [1] * 8 for c in chunks[1:-1])
    # virtual stage q = j*16 + r: rank 0's first chunk is the embedding alone, so rank 1 starts
    # at layer 0; rank 0's second chunk holds layer 15
    idx = stage_layer_indices(list(stages), 8, True, True)
    assert idx[1][0] == 0 and idx[0][0] == 15
    assert sorted(functools.reduce(operator.iadd, idx, [])) == list(range(126))


def test_without_the_flags_126_layers_do_not_split_over_16_stages_and_the_fix_says_how():
    diags = lint_cfg(
        **{
            "model.num_layers": 126,
            "model.hidden_size": 1024,
            "cluster.num_nodes": 4,
            "parallel.tp": 2,
            "parallel.pp": 16,
            "training.global_batch_size": 64,
        }
    )
    [d] = find(diags, "TRC210")
    assert "num_layers (126) is not divisible by pp (16)" in d.message
    assert f"{EMB}=true and {LOSS}=true (each stage then counts 8 layers)" in d.fix


def test_with_the_flags_the_padded_count_must_divide_pp_and_pp_times_vpp():
    base = {"model.num_layers": 6, "parallel.pp": 2, EMB: True}
    [d] = find(lint_cfg(**base), "TRC210")  # 6 + 1 = 7 over pp=2
    assert "num_layers (6) + embedding = 7 is not divisible by pp (2)" in d.message
    assert not find(lint_cfg(**base, **{LOSS: True}), "TRC210")  # 8 over 2
    [d] = find(lint_cfg(**base, **{LOSS: True, "parallel.vpp": 3}), "TRC211")
    assert "+ embedding + loss = 8" in d.message
    assert not find(lint_cfg(**base, **{LOSS: True, "parallel.vpp": 2}), "TRC211")


def test_the_flags_cannot_be_combined_with_first_last_stage_counts():
    diags = lint_cfg(
        **{
            "model.num_layers": 6,
            "parallel.pp": 2,
            LOSS: True,
            "parallel.pipeline_first_stage_layers": 3,
            "parallel.pipeline_last_stage_layers": 3,
        }
    )
    [d] = find(diags, "TRC212")
    assert d.key == LOSS and "cannot be combined" in d.message
    assert d.edits == {LOSS: False}


def test_a_fix_never_suggests_a_pp_that_breaks_vpp():
    """32 layers + E + L = 34 on pp=4 x vpp=2: pp=1 or 2 (divisors of 34) would fail TRC213 or
    TRC211; the flags themselves are the thing to drop."""
    base = {
        "model.num_layers": 32,
        "cluster.num_nodes": 2,
        "parallel.pp": 4,
        "parallel.vpp": 2,
        "training.global_batch_size": 64,
        EMB: True,
        LOSS: True,
    }
    [d] = find(lint_cfg(**base), "TRC210")
    assert "parallel.pp to one of" not in d.fix
    assert "remove the account_for_* flags (32 layers split over pp=4 x vpp=2)" in d.fix
    assert not find(lint_cfg(**{**base, EMB: False, LOSS: False}), "TRC210")


def test_trc210_machine_edit_keeps_pp_when_no_divisor_is_near():
    """61 layers (DeepSeek-V3) over pp=16: the only dividing pp that fits is 1, which the JSON
    ``edits`` proposed for a 671B model; the edit is now the uneven first/last split that keeps
    pp (the text fix lists both). A near divisor stays the edit (30 layers over pp=4 -> pp=2)."""
    cfg = {
        "model.num_layers": 61,
        "model.hidden_size": 1024,
        "cluster.num_nodes": 4,
        "parallel.tp": 2,
        "parallel.pp": 16,
        "training.global_batch_size": 64,
    }
    [d] = find(lint_cfg(**cfg), "TRC210")
    assert d.edits == {
        "parallel.pipeline_first_stage_layers": 2,
        "parallel.pipeline_last_stage_layers": 3,
    }
    assert (
        "set parallel.pipeline_first_stage_layers=2 and "
        "parallel.pipeline_last_stage_layers=3" in d.fix
    )
    assert not [x for x in find(lint_cfg(**cfg, **{k: v for k, v in d.edits.items()}), "TRC210")]
    [d] = find(lint_cfg(**{**cfg, "model.num_layers": 30, "parallel.pp": 4}), "TRC210")
    assert d.edits == {"parallel.pp": 2}  # the nearest pp dividing 30 and the 16 slots
