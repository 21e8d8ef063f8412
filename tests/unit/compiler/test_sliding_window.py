"""Sliding-window attention (``model.window_size`` / ``model.window_attn_skip_freq``): TRC310's
exact diagnostics, TRC344 on engine=fsdp, the Megatron artifacts (TransformerConfig window_size
(w, 0) and window_attn_skip_freq; Megatron-LM --window-size w,0 / --window-attn-skip-freq N, as
tests/data/megatron_cli_flags.tsv lists them) and the attention-core FLOP scaling."""

from __future__ import annotations

import pytest
import yaml

from tests.support.emit import REPO, compile_case, compile_ir, parse_args_file
from tests.support.kit import find, lint_cfg
from tests.support.one_truth_table import check
from trainc.compiler.estimate.flops import (
    flops_per_step,
    spec_flop_terms,
    window_core_share,
    window_pair_share,
)

FSDP = {"engine": "fsdp", "parallel.pp": 1}


def _diag(changes: dict, rule: str = "TRC310") -> list[tuple[str, str, str, dict]]:
    return [(d.key, d.message, d.fix, dict(d.edits or {})) for d in find(lint_cfg(**changes), rule)]


def test_window_below_one_is_trc310():
    assert _diag({"model.window_size": 0}) == [
        (
            "model.window_size",
            "model.window_size (0) is below 1: each query must see at least one key to its left "
            "(Megatron-Core reads -1 as an unbounded window)",
            "set model.window_size to the keys left of each query (Hugging Face sliding_window "
            "- 1), or remove it for full causal attention",
            {"model.window_size": None, "model.window_attn_skip_freq": None},
        )
    ]


@pytest.mark.parametrize("w", [1023, 1024, 5000])
def test_window_covering_the_sequence_is_trc310(w):
    """seq_length 1024: the last query has 1023 keys to its left, so a window of 1023 or more
    is full causal attention."""
    ((key, message, fix, edits),) = _diag({"model.window_size": w})
    assert key == "model.window_size"
    assert edits == {"model.window_size": None, "model.window_attn_skip_freq": None}
    assert message == (
        f"model.window_size ({w}) covers the whole 1024-token sequence (the last query has "
        "1023 keys to its left): the window is full causal attention"
    )
    assert fix == (
        "remove model.window_size (and model.window_attn_skip_freq): full causal attention is "
        "the same model at this seq_length"
    )
    assert not _diag({"model.window_size": 1022})


def test_skip_freq_below_one_or_without_window_is_trc310():
    assert [x[:2] for x in _diag({"model.window_size": 128, "model.window_attn_skip_freq": 0})] == [
        (
            "model.window_attn_skip_freq",
            "model.window_attn_skip_freq (0) is below 1: it is the period N of the "
            "full-attention layers (layers N, 2N, ... attend fully)",
        )
    ]
    assert [x[:2] for x in _diag({"model.window_attn_skip_freq": 2})] == [
        (
            "model.window_attn_skip_freq",
            "model.window_attn_skip_freq (2) without model.window_size: there is no sliding "
            "window to skip (Megatron-Core ignores it)",
        )
    ]
    assert not _diag({"model.window_size": 128, "model.window_attn_skip_freq": 2})


def test_fsdp_refuses_the_window_under_trc344_and_deepspeed_takes_it():
    found = find(lint_cfg(**FSDP, **{"model.window_size": 128}), "TRC344")
    assert [(d.key, dict(d.edits or {})) for d in found] == [
        ("model.window_size", {"engine": "megatron"})
    ]
    assert found[0].message == (
        "model.window_size (128): the trainc FSDP2 worker's attention and torchtitan 0.3.0's "
        "Llama are full causal on every layer (no sliding window); training without it is a "
        "different model from the spec's"
    )
    assert not find(lint_cfg(**FSDP), "TRC344")
    # DeepSpeed's runner builds the same Megatron-Core GPTModel from the TransformerConfig
    ds = lint_cfg(**{"engine": "deepspeed", "parallel.pp": 1, "model.window_size": 128})
    assert not [d for d in ds if "window" in d.key]


CASE = "llama3-8b-pp2-vpp2"  # 32 layers, seq_length 8192, tp2 pp2 vpp2
WINDOW = ("model.window_size=4095", "model.window_attn_skip_freq=4")


def test_megatron_artifacts_carry_the_window():
    plan, files = compile_case(CASE, WINDOW)
    args = [tuple(x) for x in parse_args_file(files["megatron_args.txt"])]
    assert ("--window-size", "4095,0") in args and ("--window-attn-skip-freq", "4") in args
    tc = yaml.safe_load(files["megatron_core.yaml"])["TransformerConfig"]
    assert (tc["window_size"], tc["window_attn_skip_freq"]) == ([4095, 0], 4)
    assert plan["engines"]["megatron_core"]["TransformerConfig"]["window_size"] == [4095, 0]
    assert (
        plan["spec"]["model"]["window_size"],
        plan["spec"]["model"]["window_attn_skip_freq"],
    ) == (
        4095,
        4,
    )
    check(files)  # the one-truth table agrees across plan.json, flags and Core kwargs
    _, plain = compile_case(CASE)
    assert (
        "window" not in plain["megatron_args.txt"] and "window" not in plain["megatron_core.yaml"]
    )
    # the flag names are Megatron-LM's (tests/data/megatron_cli_flags.tsv)
    known = {line.split("\t")[0] for line in (REPO / "tests/data/megatron_cli_flags.tsv").open()}
    assert {"--window-size", "--window-attn-skip-freq"} <= known


def test_pair_share_exact():
    # (2 s w - w^2) / s^2
    assert window_pair_share(1024, 256) == (2 * 1024 * 256 - 256 * 256) / 1024**2 == 0.4375
    assert window_pair_share(1024, None) == 1.0
    assert window_pair_share(1024, 1023) == 1.0


def test_core_flops_scale_by_the_windowed_layers_share():
    """32 layers, s 8192, w 4095: the windowed layers score (2 s w - w^2) / s^2 of the causal
    pairs; skip_freq 4 keeps the 1-based layers 4, 8, ..., 32 (8 of them) full, so the core term
    is (24 r + 8) / 32 of the causal one; the per-token terms are unchanged. The fused attention
    kernel's time scales the same way."""
    from trainc.compiler.estimate.kernels import hardware, layer_time_of

    r = (2 * 8192 * 4095 - 4095**2) / 8192**2
    assert window_pair_share(8192, 4095) == r == 0.7498779147863388
    full, win = compile_ir(CASE), compile_ir(CASE, WINDOW)
    share = (24 * r + 8) / 32
    assert window_core_share(win.spec) == share == 0.8124084360897541
    assert window_core_share(full.spec) == 1.0
    tf, tw = spec_flop_terms(full.spec, full), spec_flop_terms(win.spec, win)
    assert tw.core_per_s2 == tf.core_per_s2 * share
    assert (tw.per_token_layers, tw.per_token_logits) == (tf.per_token_layers, tf.per_token_logits)
    b, s = full.spec.training.global_batch_size, full.spec.model.seq_length
    assert flops_per_step(full.spec, full) - flops_per_step(win.spec, win) == pytest.approx(
        b * s * s * tf.core_per_s2 * (1 - share), rel=1e-12
    )
    # the fused kernel's seconds (tp 2, cp 1, mbs 1): the score FLOPs times the share
    args = (False, "bf16", 2, 1, 1, 1, False, 1)
    lf = layer_time_of(full.spec, hardware(full.spec), *args)
    lw = layer_time_of(win.spec, hardware(win.spec), *args)
    assert lw.attn_f == pytest.approx(lf.attn_f * share, rel=1e-12)
    assert lw.attn_b == pytest.approx(lf.attn_b * share, rel=1e-12)
    assert (lw.gemm_f, lw.gemm_b) == (lf.gemm_f, lf.gemm_b)
