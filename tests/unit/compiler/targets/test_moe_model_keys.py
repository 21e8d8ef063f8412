"""Dense first layers, multi-token prediction, group-limited routing and the expert bias reach
every artifact as written (megatron_args.txt, megatron_core.yaml, plan.json) or are an error
naming the key and the engine (TRC386); the estimates count the dense layers and MTP modules."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from tests.support.emit import CASES_DIR, REPO, compile_case, compile_ir, parse_args_file
from tests.support.one_truth_table import check
from trainc.compiler.derive import moe_layer_pattern
from trainc.compiler.estimate.flops import spec_flop_terms
from trainc.compiler.estimate.params import layer_params, stage_params, total_params
from trainc.compiler.pipeline import compile_spec

CASE = "mixtral-8x7b-ep8"  # 32 layers, 8 experts (top-2), pp 4, ep 8
KEYS = (
    "model.moe_first_k_dense_layers=3",
    "model.moe_router_num_groups=4",
    "model.moe_router_group_topk=2",
    "model.moe_router_score_function=sigmoid",
    "model.moe_router_enable_expert_bias=true",
    "model.mtp_num_layers=1",
    "launch.entrypoint=megatron-lm",
    "launch.megatron_lm_path=/opt/Megatron-LM",
)


def _args(files: dict[str, str]) -> dict[str, str | None]:
    return {
        i[0]: (i[1] if len(i) > 1 else None) for i in parse_args_file(files["megatron_args.txt"])
    }


def test_every_new_key_reaches_megatron_lm_and_core() -> None:
    plan, files = compile_case(CASE, KEYS)
    args = _args(files)
    assert args["--moe-layer-freq"] == "([0]*3+[1]*29)"
    assert args["--moe-router-num-groups"] == "4"
    assert args["--moe-router-group-topk"] == "2"
    assert "--moe-router-enable-expert-bias" in args
    assert args["--moe-router-enable-expert-bias"] is None  # store_true
    assert args["--moe-router-score-function"] == "sigmoid"
    assert args["--mtp-num-layers"] == "1"
    tc = yaml.safe_load(files["megatron_core.yaml"])["TransformerConfig"]
    assert tc["moe_layer_freq"] == [0, 0, 0] + [1] * 29
    assert (tc["moe_router_num_groups"], tc["moe_router_group_topk"]) == (4, 2)
    assert tc["moe_router_enable_expert_bias"] is True
    assert tc["mtp_num_layers"] == 1
    assert (
        plan["engines"]["megatron_core"]["TransformerConfig"]["moe_layer_freq"]
        == tc["moe_layer_freq"]
    )
    check(files)  # the one-truth table agrees across plan.json, flags and Core kwargs


def test_freq_and_first_k_combine_as_deepseek_v3_does() -> None:
    _, files = compile_case(CASE, ("model.moe_first_k_dense_layers=3", "model.moe_layer_freq=2"))
    # layer i is MoE iff i >= 3 and i % 2 == 0 (HF DeepseekV3DecoderLayer)
    assert _args(files)["--moe-layer-freq"] == "([0]*4+" + "+".join(["[1]*1+[0]*1"] * 14) + ")"
    tc = yaml.safe_load(files["megatron_core.yaml"])["TransformerConfig"]
    assert tc["moe_layer_freq"] == [0, 0, 0, 0] + [1, 0] * 14
    check(files)


def test_defaults_write_nothing_new() -> None:
    _, files = compile_case(CASE)
    args = _args(files)
    assert args["--moe-layer-freq"] == "1"
    for flag in (
        "--mtp-num-layers",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-router-enable-expert-bias",
    ):
        assert flag not in args
    tc = yaml.safe_load(files["megatron_core.yaml"])["TransformerConfig"]
    assert tc["moe_layer_freq"] == 1
    assert not {
        "mtp_num_layers",
        "moe_router_num_groups",
        "moe_router_group_topk",
        "moe_router_enable_expert_bias",
    } & set(tc)


def _diags(*overrides: str) -> list[dict]:
    spec = (CASES_DIR / CASE / "spec.yaml").relative_to(REPO)
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = compile_spec(spec, list(overrides))
    finally:
        os.chdir(cwd)
    return [json.loads(json.dumps(d.to_json())) for d in result.diagnostics]


@pytest.mark.parametrize(
    "key,value",
    [
        ("moe_first_k_dense_layers", "3"),
        ("mtp_num_layers", "1"),
        ("moe_router_num_groups", "4"),
        ("moe_router_enable_expert_bias", "true"),
    ],
)
def test_deepspeed_refuses_each_key_by_name(key: str, value: str) -> None:
    extra = ("model.moe_router_group_topk=2",) if key == "moe_router_num_groups" else ()
    extra += (
        ("model.moe_router_score_function=sigmoid",)
        if key == "moe_router_enable_expert_bias"
        else ()
    )
    diags = _diags(
        "engine=deepspeed", "parallel.pp=1", "parallel.zero_stage=1", f"model.{key}={value}", *extra
    )
    mine = [d for d in diags if d["rule"] == "TRC386"]
    assert sorted(d["key"] for d in mine) == sorted(
        [f"model.{key}"]
        + (["model.moe_router_group_topk"] if key == "moe_router_num_groups" else [])
    )
    assert all(d["severity"] == "error" and "engine=deepspeed" in d["message"] for d in mine)


def test_fsdp_refuses_mtp_by_name() -> None:
    diags = _diags(
        "engine=fsdp", "model.num_experts=null", "parallel.ep=1", "model.mtp_num_layers=2"
    )
    mine = [d for d in diags if d["rule"] == "TRC386"]
    assert [d["key"] for d in mine] == ["model.mtp_num_layers"]
    assert "engine=fsdp" in mine[0]["message"]


def test_the_trainc_worker_refuses_mtp() -> None:
    mine = [d for d in _diags("model.mtp_num_layers=1") if d["rule"] == "TRC386"]
    assert len(mine) == 1 and mine[0]["key"] == "model.mtp_num_layers"
    assert "entrypoint" in mine[0]["message"]
    assert mine[0]["severity"] == "error"
    assert not [d for d in _diags(*KEYS) if d["rule"] == "TRC386"]


def test_estimates_count_dense_first_layers_and_mtp() -> None:
    base = compile_ir(CASE)
    dense3 = compile_ir(CASE, ("model.moe_first_k_dense_layers=3",))
    assert moe_layer_pattern(dense3.spec) == (0, 0, 0) + (1,) * 29
    assert dense3.derived.num_moe_layers == 29
    d, e = layer_params(base.spec, False), layer_params(base.spec, True)
    per = lambda lp: lp.tp_sharded + lp.replicated + lp.expert  # noqa: E731
    assert total_params(dense3.spec, dense3) == total_params(base.spec, base) - 3 * (
        per(e) - per(d)
    )
    mtp = compile_ir(CASE, ("model.mtp_num_layers=1", *KEYS[-2:]))
    h = base.spec.model.hidden_size
    extra = per(e) + 2 * h * h + 3 * h  # the MoE layer, eh_proj, enorm/hnorm/final norm
    assert total_params(mtp.spec, mtp) == total_params(base.spec, base) + extra
    # the MTP block lives on the last pipeline stage
    s0, s1 = stage_params(base.spec, base), stage_params(mtp.spec, mtp)
    assert [a.total for a in s0[:-1]] == [b.total for b in s1[:-1]]
    assert s1[-1].total == pytest.approx(
        s0[-1].total + (per(e) - e.expert) + 2 * h * h + 3 * h + e.expert / 8
    )
    t0, t1 = spec_flop_terms(base.spec, base), spec_flop_terms(mtp.spec, mtp)
    assert t1.per_token_logits == 2 * t0.per_token_logits
    assert t1.core_per_s2 == pytest.approx(t0.core_per_s2 * 33 / 32)
    t3 = spec_flop_terms(dense3.spec, dense3)
    assert t3.per_token_layers < t0.per_token_layers


def test_mtp_activations_are_on_the_last_stage_only() -> None:
    from trainc.compiler.estimate.activations import stage_activation_bytes

    base = compile_ir(CASE)
    mtp = compile_ir(CASE, ("model.mtp_num_layers=1", *KEYS[-2:]))
    a0, a1 = stage_activation_bytes(base.spec, base), stage_activation_bytes(mtp.spec, mtp)
    assert a0[:-1] == a1[:-1]
    m, d = base.spec.model, base.derived
    s, b = m.seq_length, base.spec.training.micro_batch_size
    # at least the MTP module's own logits (bf16 + fp32 copy) and its two normed inputs
    assert a1[-1] - a0[-1] > 6 * s * b * d.padded_vocab_size / d.tp + 4 * s * b * m.hidden_size


@pytest.mark.parametrize(
    "groups,gtop,message",
    [
        (
            "4",
            "4",
            "moe_router_topk (2) is below moe_router_group_topk (4): Megatron-Core scores "
            "each group by its best moe_router_topk // moe_router_group_topk = 0 experts",
        ),
        (
            "8",
            "1",
            "moe_router_topk (2) exceeds the 1 experts of the 1 picked groups (1 each, 8 "
            "experts in 8 groups)",
        ),
    ],
)
def test_group_limited_routing_that_cannot_pick_its_experts(
    groups: str, gtop: str, message: str
) -> None:
    mine = [
        d
        for d in _diags(
            f"model.moe_router_num_groups={groups}", f"model.moe_router_group_topk={gtop}"
        )
        if d["rule"] == "TRC384"
    ]
    assert len(mine) == 1 and mine[0]["message"].startswith(message), mine
    assert mine[0]["key"] == "model.moe_router_group_topk"
    assert not [
        d
        for d in _diags("model.moe_router_num_groups=4", "model.moe_router_group_topk=2")
        if d["rule"] == "TRC384"
    ]
