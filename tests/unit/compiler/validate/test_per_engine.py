"""Issue 13 (engine-specific behaviour): one spec, two engines, explicit verdicts.

For each rule below the same spec is linted with engine=megatron and engine=deepspeed and the
rule's finding is asserted per engine: ``error``, ``warning``, ``info`` or ``None`` (not
reported: the rule is n/a there, or that engine has no such failure). The catalog's
``engines`` column (docs/rules.md) must say the same.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.kit import find, lint_cfg
from trainc.compiler import rules as R

MOE = {"model.num_experts": 8, "model.moe_router_topk": 2}
H100_FP8 = {"training.fp8_format": "hybrid", "cluster.gpu": "h100-80g"}
#: trainc's DeepSpeed runner splits tp and dp only (TRC313): specs for it keep pp = 1
FLAT = {"parallel.pp": 1}

# rule id -> (spec changes, {engine: severity or None})
CASES: dict[str, tuple[dict[str, Any], dict[str, str | None]]] = {
    # trainc's DeepSpeed runner builds the Megatron-Core model too: the layer split rules are
    # errors on both engines (a differential test against Megatron-Core holds them to it)
    "TRC210": ({"model.num_layers": 9}, {"megatron": "error", "deepspeed": "error"}),
    "TRC211": ({"parallel.vpp": 3}, {"megatron": "error", "deepspeed": "error"}),
    # ZeRO-2/3 with a pipeline: DeepSpeed's PipelineEngine asserts; Megatron has TRC307
    "TRC304": ({"parallel.zero_stage": 2}, {"megatron": None, "deepspeed": "error"}),
    "TRC307": ({"parallel.zero_stage": 2, **FLAT}, {"megatron": "error", "deepspeed": None}),
    # offload: DeepSpeed's feature; on Megatron it is TRC306 instead
    "TRC305": (
        {"training.offload_param": "cpu", "parallel.zero_stage": 1, **FLAT},
        {"megatron": None, "deepspeed": "error"},
    ),
    "TRC306": (
        {"training.offload_optimizer": "cpu", "parallel.zero_stage": 1, **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    # Transformer Engine recipes: the GPU check is Megatron's; DeepSpeed gets TRC330
    "TRC370": (
        {**H100_FP8, "training.fp8_recipe": "mxfp8", **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC330": ({**H100_FP8, **FLAT}, {"megatron": None, "deepspeed": "error"}),
    "TRC371": (
        {**H100_FP8, "model.ffn_hidden_size": 2056, **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC372": (
        {**H100_FP8, "training.first_last_layers_bf16": True, **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    # Megatron-Core MoE asserts
    # MoELayer.forward raises in training with tp > 1 and no sequence parallelism (both runners
    # build it); tp 2 with ep 1 so the DeepSpeed runner's axes (TRC313) stay clean
    "TRC302": (
        {**MOE, "parallel.tp": 2, "parallel.sequence_parallel": False, **FLAT},
        {"megatron": "error", "deepspeed": "error"},
    ),
    "TRC373": (
        {
            **MOE,
            "model.add_bias_linear": True,
            "parallel.etp": 2,
            "parallel.sequence_parallel": True,
            **FLAT,
        },
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC376": (
        {**MOE, "model.moe_pad_expert_input_to_capacity": True, **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC374": (
        {
            "training.fp8_format": "hybrid",
            "training.fp8_recipe": "mxfp8",
            "cluster.gpu": "b200",
            **FLAT,
        },
        {"megatron": "warning", "deepspeed": None},
    ),
    "TRC379": (
        {
            "training.fp8_format": "e4m3",
            "training.fp8_recipe": "mxfp8",
            "cluster.gpu": "b200",
            **FLAT,
        },
        {"megatron": "warning", "deepspeed": None},
    ),
    "TRC375": (
        {**MOE, "model.moe_token_dispatcher_type": "flex", "parallel.tp": 1, **FLAT},
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC377": (
        {
            **MOE,
            "model.moe_router_padding_for_quantization": True,
            "parallel.sequence_parallel": True,
            **FLAT,
        },
        {"megatron": "error", "deepspeed": None},
    ),
    "TRC378": (
        {
            **MOE,
            "model.moe_token_dispatcher_type": "flex",
            "parallel.tp": 1,
            "parallel.ep": 8,
            **FLAT,
        },
        {"megatron": "warning", "deepspeed": None},
    ),
    # the same on both: a batch DeepSpeed and Megatron both refuse
    "TRC214": (
        {"training.global_batch_size": 15, **FLAT},
        {"megatron": "error", "deepspeed": "error"},
    ),
}


@pytest.mark.parametrize("engine", ["megatron", "deepspeed"])
@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_verdict_per_engine(rule_id: str, engine: str) -> None:
    changes, want = CASES[rule_id]
    found = find(lint_cfg(**changes, engine=engine), rule_id)
    expected = want[engine]
    if expected is None:
        assert not found, [(d.severity.value, d.message) for d in found]
        return
    assert found, f"{rule_id} not reported for engine={engine}"
    assert {d.severity.value for d in found} == {expected}
    assert all(d.fix for d in found if d.is_error)


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_catalog_states_the_engine_verdict(rule_id: str) -> None:
    """A rule that is n/a on an engine says so in the catalog (and docs/rules.md)."""
    _, want = CASES[rule_id]
    rule = R.RULES_BY_ID[rule_id]
    for engine, sev in want.items():
        if sev is not None:
            assert rule.severity_for(engine) in (sev, rule.severity), (engine, sev)
        elif rule.severity_for(engine) != "n/a":
            # not reported although applicable: only where the check itself is engine-aware
            assert rule_id == "TRC330", (rule_id, engine)


def test_fp8_on_deepspeed_is_one_runner_error_not_recipe_findings() -> None:
    """A DeepSpeed spec with FP8 gets TRC330 (no Transformer Engine there) and none of the
    Transformer Engine recipe rules, which would only repeat it."""
    changes = {**H100_FP8, "training.fp8_recipe": "mxfp8", "model.ffn_hidden_size": 2056, **FLAT}
    ds = {d.rule.id for d in lint_cfg(**changes, engine="deepspeed")}
    mg = {d.rule.id for d in lint_cfg(**changes, engine="megatron")}
    assert "TRC330" in ds and not ds & {"TRC370", "TRC371", "TRC379"}
    assert {"TRC370", "TRC371", "TRC379"} <= mg and "TRC330" not in mg


def test_fp8_on_fsdp_is_torchaos_not_transformer_engines() -> None:
    """engine=fsdp FP8 is torchao's float8 through torchtitan: with the torchtitan entrypoint a
    torchao recipe lints clean; the runner finding never names Transformer Engine's engine."""
    tt = lint_cfg(
        **H100_FP8,
        **FLAT,
        engine="fsdp",
        **{"launch.entrypoint": "torchtitan", "training.fp8_recipe": "rowwise"},
    )
    assert find(tt, "TRC330") == []
    plain = find(lint_cfg(**H100_FP8, **FLAT, engine="fsdp"), "TRC330")
    assert len(plain) == 1 and not plain[0].is_error and "torchtitan" in plain[0].message


#: rules that only Megatron-Core (Transformer Engine, its MoE layer) enforces, or only DeepSpeed
MEGATRON_ONLY = (
    "TRC306",
    "TRC307",
    "TRC370",
    "TRC371",
    "TRC372",
    "TRC373",
    "TRC374",
    "TRC375",
    "TRC376",
    "TRC377",
    "TRC378",
    "TRC379",
)
DEEPSPEED_ONLY = ("TRC304", "TRC305", "TRC320", "TRC321")


@pytest.mark.parametrize("rule_id", MEGATRON_ONLY + DEEPSPEED_ONLY)
def test_engine_only_rules_are_na_on_fsdp(rule_id: str) -> None:
    """engine=fsdp (torch FSDP2 / torchtitan) has neither runner: the catalog says n/a."""
    rule = R.RULES_BY_ID[rule_id]
    assert rule.severity_for("fsdp") == "n/a"
    other = "deepspeed" if rule_id in MEGATRON_ONLY else "megatron"
    assert rule.severity_for(other) == "n/a"
