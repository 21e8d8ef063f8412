"""Sliding-window attention trains on the Megatron worker (CPU, gloo): ``model.window_size`` and
``model.window_attn_skip_freq`` reach the real Megatron-Core TransformerConfig (the worker's
cross-check of every ``engines.megatron_core`` key against the built objects), the tp2 layout
reproduces the one-process reference, the loss falls, and the window changes the losses (the
mask is applied: megatron-core 0.16.1 ``FusedScaleMaskSoftmax`` builds
``get_sliding_window_causal_mask`` on the windowed layers, ``is_layer_window_attention``)."""

from __future__ import annotations

import json
import re

from tests.support.e2e import (
    base_spec,
    check_case,
    close,
    compile_case,
    launch,
    merge,
    references,
    steps,
)

WINDOW = {"model": {"window_size": 8, "window_attn_skip_freq": 2}, "parallel": {"tp": 2}}


def test_tp2_sliding_window_trains_with_the_window(tmp_path):
    out = compile_case(tmp_path, "tp2_swa", merge(base_spec("tp2_swa", 2), WINDOW))
    plan = json.loads((out / "plan.json").read_text())
    tc = plan["engines"]["megatron_core"]["TransformerConfig"]
    assert (tc["window_size"], tc["window_attn_skip_freq"]) == ([8, 0], 2)
    args = (out / "megatron_args.txt").read_text().splitlines()
    assert "--window-size 8,0" in args and "--window-attn-skip-freq 2" in args
    ref = references([out])["tp2_swa"]
    log = launch(out, ["--resume-check", "16"])
    # equals the one-process reference, loss falls, resume replays, groups are the rank map
    check_case("tp2_swa", out, log, ref)
    # the same layout without the window: the worker cross-checks exactly two settings fewer
    # (window_size and window_attn_skip_freq reached the built TransformerConfig) and trains
    # other losses (the mask is applied)
    plain = compile_case(
        tmp_path, "tp2_full", merge(base_spec("tp2_full", 2), {"parallel": {"tp": 2}})
    )
    full_log = launch(plain)
    pattern = r"cross-checked (\d+) Megatron-Core settings with plan.json: all agree"
    (n_win,), (n_full,) = re.findall(pattern, log), re.findall(pattern, full_log)
    assert int(n_win) == int(n_full) + 2, (n_win, n_full)
    got, full = steps(log), steps(full_log)
    assert any(not close(full[n]["loss"], got[n]["loss"], 1e-4) for n in range(1, 25))


def test_cp2_sliding_window_on_the_cpu_attention_stand_in_equals_the_reference(tmp_path):
    """Context parallelism on CPU runs trainc's core-attention stand-in
    (``trainc/launch/worker/cp_attention.py``), which applies the window itself; the one-process
    reference runs Megatron-Core's own DotProductAttention with its sliding-window mask: the
    losses and grad norms agree step by step."""
    over = {"model": WINDOW["model"], "parallel": {"cp": 2}}
    out = compile_case(tmp_path, "cp2_swa", merge(base_spec("cp2_swa", 2), over))
    ref = references([out])["cp2_swa"]
    log = launch(out, ["--resume-check", "16"])
    check_case("cp2_swa", out, log, ref)


def test_deepspeed_builds_the_window(tmp_path):
    """engine=deepspeed builds the same Megatron-Core GPTModel from plan.json's TransformerConfig
    (``trainc/launch/worker/engines/deepspeed.py`` ``build_model``): with the window it equals
    its windowed one-process reference and trains other losses than without it."""
    ds = {"engine": "deepspeed", "parallel": {"zero_stage": 1}}
    out = compile_case(
        tmp_path, "ds_swa", merge(base_spec("ds_swa", 2), merge(ds, {"model": WINDOW["model"]}))
    )
    plain = compile_case(tmp_path, "ds_full", merge(base_spec("ds_full", 2), ds))
    refs = references([out])
    log = launch(out, ["--resume-check", "16"])
    check_case("ds_swa", out, log, refs["ds_swa"])
    got, full = steps(log), steps(launch(plain))
    assert any(not close(full[n]["loss"], got[n]["loss"], 1e-4) for n in range(1, 25))
