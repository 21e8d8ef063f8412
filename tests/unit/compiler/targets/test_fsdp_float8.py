"""engine=fsdp FP8: torchao's float8 / MX recipes per torchtitan version (TRC330), the converters
in plan.json and torchtitan_args.txt, and the trainc FSDP2 worker's refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.kit import errors, find, lint_cfg
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.targets.torchao import converters, recipes_in
from trainc.schemas import Fp8Recipe

TT = {
    "engine": "fsdp",
    "parallel.pp": 1,
    "launch.entrypoint": "torchtitan",
    "cluster.gpu": "h100-80g",
    "training.fp8_format": "e4m3",
}
GOLDEN = Path(__file__).resolve().parents[4] / "tests/golden/cases/llama3-8b-fsdp-hsdp/spec.yaml"


def test_recipes_per_torchtitan_version() -> None:
    """0.3.0 (the wheel's Float8LinearConverter.Config.recipe_name Literal) has no tensorwise;
    0.2.x (docs/float8.md: recipe_name unset = tensorwise) has it."""
    assert Fp8Recipe.tensorwise not in recipes_in("0.3.0")
    assert set(recipes_in("0.3.0")) == {
        Fp8Recipe.rowwise,
        Fp8Recipe.rowwise_with_gw_hp,
        Fp8Recipe.mxfp8,
    }
    assert Fp8Recipe.tensorwise in recipes_in("0.2.1")


@pytest.mark.parametrize("recipe", ["rowwise", "rowwise_with_gw_hp"])
def test_rowwise_on_hopper_with_torchtitan_is_clean(recipe: str) -> None:
    assert not find(lint_cfg(**TT, **{"training.fp8_recipe": recipe}), "TRC330")


def test_tensorwise_in_0_3_0_is_an_error_when_stated_a_warning_when_unset() -> None:
    stated = find(
        lint_cfg(
            **TT,
            **{"training.fp8_recipe": "tensorwise", "launch.versions": {"torchtitan": "0.3.0"}},
        ),
        "TRC330",
    )
    assert len(stated) == 1 and stated[0].is_error
    d = stated[0]
    assert d.key == "training.fp8_recipe" and d.edits == {"training.fp8_recipe": "rowwise"}
    assert d.facts == {"recipe": "tensorwise", "torchtitan": "0.3.0"}
    assert "does not exist in torchtitan 0.3.0" in d.message
    unset = find(lint_cfg(**TT, **{"training.fp8_recipe": "tensorwise"}), "TRC330")
    assert len(unset) == 1 and not unset[0].is_error
    old = find(
        lint_cfg(
            **TT,
            **{"training.fp8_recipe": "tensorwise", "launch.versions": {"torchtitan": "0.2.0"}},
        ),
        "TRC330",
    )
    assert old == []


def test_mxfp8_before_blackwell_and_float8_on_a100() -> None:
    [mx] = find(lint_cfg(**TT, **{"training.fp8_recipe": "mxfp8"}), "TRC330")
    assert mx.is_error and mx.key == "training.fp8_recipe"
    assert mx.facts == {"recipe": "mxfp8", "gpu": "h100-80g"}
    assert mx.edits == {"training.fp8_recipe": "rowwise"}
    assert not find(
        lint_cfg(**{**TT, "cluster.gpu": "b200"}, **{"training.fp8_recipe": "mxfp8"}), "TRC330"
    )
    [a100] = find(
        lint_cfg(**{**TT, "cluster.gpu": "a100-80g"}, **{"training.fp8_recipe": "rowwise"}),
        "TRC330",
    )
    assert a100.is_error and a100.key == "training.fp8_format"
    assert "8.9+" in a100.message and a100.edits == {"training.fp8_format": "none"}


def test_transformer_engine_recipe_on_torchtitan_is_an_error() -> None:
    [d] = find(lint_cfg(**TT), "TRC330")  # fp8_recipe default delayed
    assert d.is_error and d.key == "training.fp8_recipe" and d.facts == {"recipe": "delayed"}


def test_fsdp_fp8_runner_cpu_error_trainc_entrypoint_warning() -> None:
    cpu = find(lint_cfg(**{**TT, "launch.entrypoint": "trainc", "launch.device": "cpu"}), "TRC330")
    assert [d.is_error for d in cpu] == [True] and cpu[0].key == "training.fp8_format"
    cuda = find(lint_cfg(**{**TT, "launch.entrypoint": "trainc"}), "TRC330")
    assert [d.is_error for d in cuda] == [False] and cuda[0].key == "launch.entrypoint"


def test_rowwise_on_megatron_is_refused() -> None:
    [d] = find(
        lint_cfg(
            **{
                "training.fp8_format": "e4m3",
                "training.fp8_recipe": "rowwise",
                "cluster.gpu": "h100-80g",
                "parallel.pp": 1,
            }
        ),
        "TRC330",
    )
    assert d.is_error and d.key == "training.fp8_recipe"
    assert d.edits == {"training.fp8_recipe": "tensorwise"}


def test_converters_per_recipe() -> None:
    from tests.support.kit import make

    assert converters(make(**TT, **{"training.fp8_recipe": "rowwise"})) == [
        {"converter": "float8", "recipe_name": "rowwise"}
    ]
    assert converters(make(**TT, **{"training.fp8_recipe": "tensorwise"})) == [
        {"converter": "float8"}
    ]
    assert converters(make(**TT, **{"training.fp8_recipe": "mxfp8"})) == [
        {"converter": "mx", "recipe_name": "mxfp8"}
    ]
    assert converters(make(engine="fsdp", **{"parallel.pp": 1})) == []


def test_torchtitan_args_carry_the_float8_converter_and_the_worker_refuses_it() -> None:
    r = compile_spec(
        str(GOLDEN),
        [
            "launch.entrypoint=torchtitan",
            "training.fp8_format=e4m3",
            "training.fp8_recipe=rowwise_with_gw_hp",
        ],
    )
    assert r.ok, [d.to_json() for d in errors(list(r.diagnostics))]
    [line] = [
        x
        for x in r.files["torchtitan_args.txt"].splitlines()
        if x.startswith("#registry model.converters ")
    ]
    assert json.loads(line.split(" ", 2)[2]) == [
        {"converter": "float8", "recipe_name": "rowwise_with_gw_hp"}
    ]
    plan = json.loads(r.files["plan.json"])
    cfg = plan["engines"]["fsdp"]
    assert cfg["float8"] == {
        "converters": [{"converter": "float8", "recipe_name": "rowwise_with_gw_hp"}]
    }
    pytest.importorskip("torch", reason="the FSDP2 worker needs the [worker] extra")
    from trainc.launch.worker.engines.fsdp import refuse_float8

    with pytest.raises(SystemExit, match=r"engines\.fsdp\.float8\.converters"):
        refuse_float8(cfg)
    refuse_float8({"float8": {"converters": []}})  # BF16: nothing to refuse
