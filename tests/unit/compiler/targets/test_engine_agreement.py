"""Regression tests of issue 11 ("One truth"), one per finding of its "What was found": the
artifacts, the rules and the worker agree on what the spec says. Each test names the bug it
guards against; all of them failed on the release before the engine-config builder (008a34e).

They read the emitted files (flags parsed from ``megatron_args.txt``, YAML, JSON) and the
diagnostics, not trainc's internals, so that they test what a user gets.
"""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.emit import compile_case, compile_dict

#: A small dense Llama-style model on one 8-GPU H100 node: TP2 x PP1 x DP4 (explicit, no preset).
BASE: dict[str, Any] = {
    "name": "issue11",
    "engine": "megatron",
    "model": {
        "num_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_query_groups": 8,
        "ffn_hidden_size": 2048,
        "vocab_size": 32000,
        "seq_length": 1024,
    },
    "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "h100-80g"},
    "parallel": {"tp": 2, "pp": 1},
    "training": {"micro_batch_size": 1, "global_batch_size": 16},
    "launch": {},
}
MOE = {"num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 1024}


def spec(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-key changes (``None`` removes the key)."""
    out = copy.deepcopy(BASE)
    for key, val in changes.items():
        *parents, leaf = key.split(".")
        cur = out
        for p in parents:
            cur = cur.setdefault(p, {})
        if val is None:
            cur.pop(leaf, None)
        else:
            cur[leaf] = val
    return out


def ds_spec(**changes: Any) -> dict[str, Any]:
    """engine=deepspeed on the same node: TP2 x DP4, ZeRO-1."""
    return spec(**{"engine": "deepspeed", "parallel.zero_stage": 1, **changes})


def flags(files: dict[str, str]) -> dict[str, Any]:
    """megatron_args.txt as {flag: value, or True for a flag without value}."""
    out: dict[str, Any] = {}
    for line in files["megatron_args.txt"].splitlines():
        if line and not line.startswith("#"):
            flag, _, value = line.partition(" ")
            out[flag] = value or True
    return out


def core(files: dict[str, str]) -> dict[str, Any]:
    return yaml.safe_load(files["megatron_core.yaml"])


def ds(files: dict[str, str]) -> dict[str, Any]:
    return json.loads(files["ds_config.json"])


def ok(tmp: Path, cfg: dict[str, Any], overrides: tuple[str, ...] = ()) -> dict[str, str]:
    """The artifacts of a spec that must compile."""
    result = compile_dict(tmp, cfg, overrides)
    assert result.ok, [d.to_json() for d in result.diagnostics if d.is_error]
    return dict(result.files)


def errors(tmp: Path, cfg: dict[str, Any], overrides: tuple[str, ...] = ()) -> list[Any]:
    """The error diagnostics of a spec that must not compile (and wrote nothing)."""
    result = compile_dict(tmp, cfg, overrides)
    assert not result.ok and not result.files
    return [d for d in result.diagnostics if d.is_error]


MEGATRON_CASES = [
    "cpu-shrink-tiny",
    "env-container",
    "gpt3-175b",
    "llama2-70b-tp8pp4",
    "llama3-8b-pp2-vpp2",
    "llama3.1-405b-pp16-vpp8",
    "megatron-lm-uneven-cp",
    "mixtral-8x7b-ep8",
]


# --- overlap ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", MEGATRON_CASES)
def test_overlap_flags_agree_in_args_and_core_yaml(case: str) -> None:
    """Bug: megatron_args.txt had --overlap-grad-reduce --overlap-param-gather while
    megatron_core.yaml (what the worker reads) had overlap_grad_reduce/param_gather false, on
    every Megatron spec."""
    _, files = compile_case(case)
    a, ddp = flags(files), core(files)["DistributedDataParallelConfig"]
    assert ("--overlap-grad-reduce" in a) is ddp["overlap_grad_reduce"]
    assert ("--overlap-param-gather" in a) is ddp["overlap_param_gather"]


def test_overlap_is_on_where_it_pays_and_can_be_switched_off(tmp_path: Path) -> None:
    """Bug (same finding): the two artifacts disagreed; now both follow training.overlap_*,
    default on with data parallelism (and param gather with the distributed optimizer)."""
    _, files = compile_case("llama2-70b-tp8pp4")  # dp 2, distributed optimizer
    a, ddp = flags(files), core(files)["DistributedDataParallelConfig"]
    assert ddp["overlap_grad_reduce"] is True and ddp["overlap_param_gather"] is True
    assert a["--overlap-grad-reduce"] is True and a["--overlap-param-gather"] is True
    off = ok(tmp_path, spec(**{"training.overlap_grad_reduce": False}))
    assert "--overlap-grad-reduce" not in flags(off)
    assert core(off)["DistributedDataParallelConfig"]["overlap_grad_reduce"] is False


def test_worker_wires_megatron_lms_overlap_hooks() -> None:
    """Bug (same finding): the worker trained with overlap off whatever the plan said. With
    overlap_grad_reduce it now sets the schedules' no_sync / grad_sync hooks and with
    overlap_param_gather the param_sync hook, as Megatron-LM's setup_model_and_optimizer."""
    pytest.importorskip("megatron.core")
    from trainc.launch.worker.engines import megatron as train

    chunk = types.SimpleNamespace(no_sync="ns", start_grad_sync="gs", start_param_sync="ps")
    cfg = types.SimpleNamespace(no_sync_func=None, grad_sync_func=None, param_sync_func=None)
    train._wire_overlap(
        cfg, [chunk], types.SimpleNamespace(overlap_grad_reduce=True, overlap_param_gather=True)
    )
    assert (cfg.no_sync_func, cfg.grad_sync_func, cfg.param_sync_func) == ("ns", "gs", "ps")
    two = types.SimpleNamespace(no_sync_func=None, grad_sync_func=None, param_sync_func=None)
    train._wire_overlap(
        two,
        [chunk, chunk],
        types.SimpleNamespace(overlap_grad_reduce=True, overlap_param_gather=False),
    )
    assert two.no_sync_func == ["ns", "ns"] and two.param_sync_func is None


# --- optimizer -------------------------------------------------------------------------------


def test_optimizer_adamw_is_one_unknown_choice_at_load(tmp_path: Path) -> None:
    """Bug: training.optimizer: adamw linted clean, emitted --optimizer adamw (Megatron-LM
    refuses it) and "type": "SGD" in ds_config.json. Now: one TRC004 at load, with the
    choices and did-you-mean."""
    errs = errors(tmp_path, spec(**{"training.optimizer": "adamw"}))
    assert [d.rule.id for d in errs] == ["TRC004"]
    assert errs[0].key == "training.optimizer"
    assert "did you mean `adam`" in errs[0].message and "sgd" in errs[0].message


@pytest.mark.parametrize(
    "key,value,suggestion",
    [
        ("launch.device", "cuda0", "cuda"),
        ("launch.entrypoint", "megatronlm", "megatron-lm"),
        ("cluster.gpu", "h100-80gb", "h100-80g"),
    ],
)
def test_closed_vocabularies_are_one_unknown_choice(
    tmp_path: Path, key: str, value: str, suggestion: str
) -> None:
    """Bug (same finding): device, entrypoint and gpu were plain strings checked by hand (or
    not at all). Each is an enum: an unknown value is one TRC004 with did-you-mean."""
    errs = errors(tmp_path, spec(**{key: value}))
    assert [d.rule.id for d in errs] == ["TRC004"] and errs[0].key == key
    assert f"did you mean `{suggestion}`" in errs[0].message


def test_sgd_reaches_all_three_engines(tmp_path: Path) -> None:
    """Bug: the optimizer did not reach the engines (the worker trained with Adam whatever the
    spec said). optimizer=sgd is --optimizer sgd --sgd-momentum for Megatron-LM (no Adam
    flags), OptimizerConfig(optimizer='sgd', sgd_momentum) for Megatron-Core, and SGD with
    momentum for DeepSpeed."""
    m = ok(tmp_path, spec(**{"training.optimizer": "sgd", "training.sgd_momentum": 0.8}))
    a = flags(m)
    assert a["--optimizer"] == "sgd" and float(a["--sgd-momentum"]) == 0.8
    assert not {"--adam-beta1", "--adam-beta2", "--adam-eps"} & set(a)
    opt = core(m)["OptimizerConfig"]
    assert opt["optimizer"] == "sgd" and opt["sgd_momentum"] == 0.8
    d = ok(tmp_path, ds_spec(**{"training.optimizer": "sgd", "training.sgd_momentum": 0.8}))
    assert ds(d)["optimizer"] == {
        "type": "SGD",
        "params": {"lr": 3e-4, "momentum": 0.8, "weight_decay": 0.1},
    }
    assert core(d)["OptimizerConfig"]["optimizer"] == "sgd"


def test_adam_beta2_095_is_accepted_and_reaches_all_three_engines(tmp_path: Path) -> None:
    """Bug: adam_beta2=0.95 (what most pre-training uses) was refused as an unknown key and
    0.999 was emitted. Now it is --adam-beta2 0.95, OptimizerConfig.adam_beta2 and DeepSpeed's
    betas."""
    t = {"training.adam_beta1": 0.9, "training.adam_beta2": 0.95, "training.adam_eps": 1e-5}
    m = ok(tmp_path, spec(**t))
    a, opt = flags(m), core(m)["OptimizerConfig"]
    assert (float(a["--adam-beta1"]), float(a["--adam-beta2"]), float(a["--adam-eps"])) == (
        0.9,
        0.95,
        1e-5,
    )
    assert (opt["adam_beta1"], opt["adam_beta2"], opt["adam_eps"]) == (0.9, 0.95, 1e-5)
    d = ok(tmp_path, ds_spec(**t))
    assert ds(d)["optimizer"]["type"] == "AdamW"
    assert ds(d)["optimizer"]["params"]["betas"] == [0.9, 0.95]
    assert ds(d)["optimizer"]["params"]["eps"] == 1e-5


# --- GPU presets -----------------------------------------------------------------------------

GIB = 2**30


def test_choosing_cluster_gpu_rederives_memory_and_peak() -> None:
    """Bug: cluster.gpu=a100-40g over the dgx-h100 preset changed the label only: budget 76 GiB
    and peak 989 TFLOP/s stayed, so a 54 GiB layout "fit" a 40 GB card. Now the GPU's own
    memory (40 GiB) and peak (312 TFLOP/s) apply."""
    plan, _ = compile_case("cpu-shrink-tiny", ("cluster.gpu=a100-40g",))
    c = plan["spec"]["cluster"]
    assert (c["gpu"], c["gpu_memory_gib"], c["peak_tflops"]) == ("a100-40g", 40.0, 312.0)
    assert plan["estimates"]["memory_budget_bytes"] == (40 - c["memory_reserve_gib"]) * GIB
    h100, _ = compile_case("cpu-shrink-tiny")
    assert (h100["spec"]["cluster"]["gpu_memory_gib"], h100["spec"]["cluster"]["peak_tflops"]) == (
        80.0,
        989.0,
    )


def test_a_gpu_field_the_spec_sets_itself_wins_over_cluster_gpu() -> None:
    """... unless the spec sets the field itself."""
    plan, _ = compile_case("cpu-shrink-tiny", ("cluster.gpu=a100-40g", "cluster.gpu_memory_gib=64"))
    c = plan["spec"]["cluster"]
    assert (c["gpu_memory_gib"], c["peak_tflops"]) == (64.0, 312.0)
    assert plan["estimates"]["memory_budget_bytes"] == (64 - c["memory_reserve_gib"]) * GIB


def test_a_layout_over_a_40g_card_does_not_fit() -> None:
    """The consequence: llama3-8b-pp2-vpp2 needs about 45 GiB per GPU; it fits the preset's
    H100 (76 GiB budget) and is refused on a100-40g (36 GiB), with the budget in the facts."""
    import os

    from tests.support.emit import CASES_DIR, REPO
    from trainc.compiler.pipeline import compile_spec

    plan, _ = compile_case("llama3-8b-pp2-vpp2")
    need = plan["estimates"]["memory_bytes"]["total"]
    assert 36 * GIB < need < 76 * GIB
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        result = compile_spec(
            (CASES_DIR / "llama3-8b-pp2-vpp2" / "spec.yaml").relative_to(REPO),
            ["cluster.gpu=a100-40g"],
        )
    finally:
        os.chdir(cwd)
    errs = [d for d in result.diagnostics if d.is_error]
    assert errs and all(d.rule.id.startswith("TRC4") for d in errs), [d.to_json() for d in errs]


# --- what compile accepts, the worker runs ---------------------------------------------------


def test_deepspeed_with_pipeline_parallel_is_a_compile_error(tmp_path: Path) -> None:
    """Bug: engine: deepspeed with pp: 2 compiled (one warning), then the worker refused to
    start it. Now TRC313 at compile time, naming the axis and the fix."""
    errs = errors(tmp_path, ds_spec(**{"parallel.pp": 2, "parallel.tp": 2}))
    assert [d.rule.id for d in errs] == ["TRC313"]
    assert errs[0].key == "parallel.pp" and "parallel.pp=1" in (errs[0].fix or "")


@pytest.mark.parametrize(
    "axis,changes",
    [
        ("cp", {"parallel.cp": 2}),
        ("ep", {"parallel.ep": 2, **{f"model.{k}": v for k, v in MOE.items()}}),
        ("vpp", {"parallel.pp": 2, "parallel.vpp": 2}),
    ],
)
def test_deepspeed_axes_it_cannot_split_are_compile_errors(
    tmp_path: Path, axis: str, changes: dict[str, Any]
) -> None:
    errs = errors(tmp_path, ds_spec(**changes))
    assert f"parallel.{axis}" in {d.key for d in errs if d.rule.id == "TRC313"}


def test_rule_and_worker_read_one_capabilities_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bug (same finding): the compiler and the worker each had their own idea of what the
    DeepSpeed runner can split. Both read trainc.capabilities: the worker's check_runner
    refuses a hand-edited plan with pp 2, and teaching the table pp lifts both refusals."""
    import dataclasses

    from trainc import capabilities
    from trainc.launch.worker.runtime import check_runner
    from trainc.schemas import Engine, Entrypoint

    plan = json.loads(ok(tmp_path, ds_spec())["plan.json"])
    plan["derived"]["pp"] = 2
    with pytest.raises(SystemExit, match=r"the trainc worker on DeepSpeed cannot split pp=2"):
        check_runner(plan)
    key = (Engine.deepspeed, Entrypoint.trainc)
    wider = dataclasses.replace(
        capabilities.CAPABILITIES[key], axes=capabilities.CAPABILITIES[key].axes | {"pp"}
    )
    monkeypatch.setitem(capabilities.CAPABILITIES, key, wider)
    check_runner(plan)  # no SystemExit
    result = compile_dict(tmp_path, ds_spec(**{"parallel.pp": 2, "parallel.tp": 2}))
    assert "TRC313" not in {d.rule.id for d in result.diagnostics}


def test_megatron_lm_entrypoint_on_cpu_is_a_compile_error(tmp_path: Path) -> None:
    """Bug: entrypoint: megatron-lm with device: cpu compiled but cannot run (pretrain_gpt.py
    needs CUDA). Now TRC325 with the fix (the trainc worker runs the layout on CPU)."""
    errs = errors(
        tmp_path,
        spec(
            **{
                "launch.entrypoint": "megatron-lm",
                "launch.megatron_lm_path": "/opt/Megatron-LM",
                "launch.device": "cpu",
                "launch.shrink": True,
            }
        ),
    )
    assert [d.rule.id for d in errs] == ["TRC325"]
    assert errs[0].key == "launch.device" and "launch.entrypoint=trainc" in (errs[0].fix or "")


def test_megatron_lm_entrypoint_with_deepspeed_is_a_compile_error(tmp_path: Path) -> None:
    """(same finding) pretrain_gpt.py does not run engine=deepspeed: TRC325 on the entrypoint."""
    errs = errors(
        tmp_path,
        ds_spec(
            **{"launch.entrypoint": "megatron-lm", "launch.megatron_lm_path": "/opt/Megatron-LM"}
        ),
    )
    assert [d.rule.id for d in errs] == ["TRC325"] and errs[0].key == "launch.entrypoint"


def test_wsd_schedule_with_deepspeed_is_a_compile_error(tmp_path: Path) -> None:
    """Bug (keys real jobs need, schedules): DeepSpeed has no WSD schedule; a spec asking for it
    must not silently get another one. TRC323 naming the styles DeepSpeed honours."""
    errs = errors(
        tmp_path, ds_spec(**{"training.lr_decay_style": "WSD", "training.lr_wsd_decay_iters": 100})
    )
    assert [d.rule.id for d in errs] == ["TRC323"]
    assert errs[0].key == "training.lr_decay_style" and "cosine" in errs[0].message


def test_wsd_schedule_reaches_megatron(tmp_path: Path) -> None:
    m = ok(
        tmp_path,
        spec(
            **{
                "training.lr_decay_style": "WSD",
                "training.lr_wsd_decay_iters": 100,
                "training.lr_wsd_decay_style": "linear",
                "training.lr_warmup_iters": 10,
            }
        ),
    )
    a, sched = flags(m), core(m)["OptimizerParamScheduler"]
    assert (
        a["--lr-decay-style"],
        a["--lr-wsd-decay-iters"],
        a["--lr-wsd-decay-style"],
        a["--lr-warmup-iters"],
    ) == ("WSD", "100", "linear", "10")
    assert (
        sched["lr_decay_style"],
        sched["wsd_decay_steps"],
        sched["lr_wsd_decay_style"],
        sched["lr_warmup_steps"],
    ) == ("WSD", 100, "linear", 10)


# --- Megatron-LM's parser: vocabulary, shared experts, --split -------------------------------


@pytest.mark.parametrize(
    "vocab,tp,padded",
    [
        (32001, 1, 32128),  # the finding: 32001 % 128 == 1 gave 32000 (last id outside the table)
        (32001, 2, 32256),
        (257, 2, 512),  # 257 % 256 == 1
        (50257, 1, 50304),
        (32000, 1, 32000),
        (128, 2, 256),
        (129, 1, 256),
    ],
)
def test_vocab_size_is_the_tokenizers_and_padding_matches_megatron(
    tmp_path: Path, vocab: int, tp: int, padded: int
) -> None:
    """Bug: --vocab-size was written as vocab_size - 1, but since core_v0.18.0 the
    NullTokenizer no longer adds a token, so the tokenizer was one short and the padded vocab
    differed whenever vocab_size % (divisor x tp) == 1 (32001 -> 32000, not 32128)."""
    m = ok(tmp_path, spec(**{"model.vocab_size": vocab, "parallel.tp": tp}))
    a = flags(m)
    assert int(a["--vocab-size"]) == vocab
    div = int(a["--make-vocab-size-divisible-by"])
    assert -(-int(a["--vocab-size"]) // (div * tp)) * div * tp == padded  # Megatron-LM's padding
    assert core(m)["GPTModel"]["vocab_size"] == padded
    assert json.loads(m["plan.json"])["derived"]["padded_vocab_size"] == padded


def test_shared_expert_width_not_a_multiple_of_tp_is_an_error(tmp_path: Path) -> None:
    """Bug: moe_shared_expert_intermediate_size must be a multiple of tp (Megatron-Core fails
    at model build: "2730 is not divisible by 4") and no rule checked it. Now TRC327 with the
    two nearest multiples as the fix."""
    cfg = spec(
        **{
            "parallel.tp": 4,
            "parallel.sequence_parallel": True,
            **{f"model.{k}": v for k, v in MOE.items()},
            "model.moe_shared_expert_intermediate_size": 2730,
        }
    )
    errs = errors(tmp_path, cfg)
    assert [d.rule.id for d in errs] == ["TRC327"]
    assert errs[0].key == "model.moe_shared_expert_intermediate_size"
    assert "2728 or 2732" in (errs[0].fix or "") and "2730 is not divisible by 4" in errs[0].message
    cfg["model"]["moe_shared_expert_intermediate_size"] = 2732
    m = ok(tmp_path, cfg)
    assert flags(m)["--moe-shared-expert-intermediate-size"] == "2732"


def test_split_is_written_with_a_data_path(tmp_path: Path) -> None:
    """Bug: with a data path no --split was written, so Megatron-LM silently held out 3 % of
    the data (its default 969,30,1). Now launch.data_split, default 100,0,0."""
    m = ok(tmp_path, spec(**{"launch.data_path": "/data/corpus_text_document"}))
    assert flags(m)["--split"] == "100,0,0"
    assert flags(m)["--data-path"] == "/data/corpus_text_document"
    m = ok(
        tmp_path,
        spec(**{"launch.data_path": "/data/corpus_text_document", "launch.data_split": "98,1,1"}),
    )
    assert flags(m)["--split"] == "98,1,1"
    assert "--split" not in flags(ok(tmp_path, spec()))  # mock data: nothing to split


@pytest.mark.parametrize("bad", ["98,2", "0,0,0", "a,b,c", "98 1 1", "-1,1,100"])
def test_a_bad_split_is_an_error(tmp_path: Path, bad: str) -> None:
    errs = errors(tmp_path, spec(**{"launch.data_path": "/data/x", "launch.data_split": bad}))
    assert [d.rule.id for d in errs] == ["TRC512"] and errs[0].key == "launch.data_split"
    assert "100,0,0" in (errs[0].fix or "")


# --- keys real jobs set ----------------------------------------------------------------------


def test_keys_real_jobs_set_reach_megatron(tmp_path: Path) -> None:
    """Bug: keys every real job sets had no spec key (init std, QKV bias, RoPE base and
    scaling, MoE aux-loss and z-loss coefficients, router settings, dropouts, norm epsilon).
    Each is now a spec key, written under Megatron's names in both Megatron artifacts."""
    cfg = spec(
        **{
            "model.init_method_std": 0.008,
            "model.add_qkv_bias": True,
            "model.rotary_base": 500000,
            "model.rotary_percent": 0.5,
            "model.rope_scaling_factor": 8.0,
            "model.norm_epsilon": 1e-6,
            "model.hidden_dropout": 0.0,
            "model.attention_dropout": 0.0,
            "parallel.sequence_parallel": True,
            **{f"model.{k}": v for k, v in MOE.items()},
            "model.moe_router_load_balancing_type": "seq_aux_loss",
            "model.moe_aux_loss_coeff": 0.01,
            "model.moe_z_loss_coeff": 0.001,
            "model.moe_router_score_function": "sigmoid",
            "model.moe_router_topk_scaling_factor": 2.5,
            "model.moe_expert_capacity_factor": 1.25,
            "model.moe_router_pre_softmax": False,
        }
    )
    m = ok(tmp_path, cfg)
    a, tc, gpt = flags(m), core(m)["TransformerConfig"], core(m)["GPTModel"]
    want_flags = {
        "--init-method-std": "0.008",
        "--add-qkv-bias": True,
        "--rotary-base": "500000",
        "--rotary-percent": "0.5",
        "--use-rope-scaling": True,
        "--rope-scaling-factor": "8.0",
        "--norm-epsilon": "1e-06",
        "--hidden-dropout": "0.0",
        "--attention-dropout": "0.0",
        "--moe-router-load-balancing-type": "seq_aux_loss",
        "--moe-aux-loss-coeff": "0.01",
        "--moe-z-loss-coeff": "0.001",
        "--moe-router-score-function": "sigmoid",
        "--moe-router-topk-scaling-factor": "2.5",
        "--moe-expert-capacity-factor": "1.25",
    }
    assert {k: a.get(k) for k in want_flags} == want_flags
    assert "--moe-router-pre-softmax" not in a
    assert (
        tc["init_method_std"],
        tc["add_qkv_bias"],
        tc["layernorm_epsilon"],
        tc["hidden_dropout"],
        tc["attention_dropout"],
    ) == (0.008, True, 1e-6, 0.0, 0.0)
    assert (
        tc["moe_router_load_balancing_type"],
        tc["moe_aux_loss_coeff"],
        tc["moe_z_loss_coeff"],
        tc["moe_router_score_function"],
        tc["moe_router_topk_scaling_factor"],
        tc["moe_expert_capacity_factor"],
        tc["moe_router_pre_softmax"],
    ) == ("seq_aux_loss", 0.01, 0.001, "sigmoid", 2.5, 1.25, False)
    assert (
        gpt["rotary_base"],
        gpt["rotary_percent"],
        gpt["rope_scaling"],
        gpt["rope_scaling_factor"],
    ) == (500000, 0.5, True, 8.0)


# --- the worker builds from the plan ---------------------------------------------------------


def test_worker_builds_bias_reduce_dtype_and_optimizer_from_the_plan(tmp_path: Path) -> None:
    """Bug: the worker built its own TransformerConfig / DDP / optimizer settings, so bias,
    gradient-reduce dtype and optimizer differed from the emitted ones while its cross-check
    (nine layout keys) said "all agree". GPT-3 (biases, fp16: no fp32 reduce) with SGD: the
    worker's objects say so."""
    pytest.importorskip("megatron.core")
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig

    from trainc.launch.shrink import full_dims
    from trainc.launch.worker import model as mb
    from trainc.launch.worker.runtime import read_settings
    from trainc.launch.worker_args import parse_args

    _, files = compile_case("gpt3-175b", ("training.optimizer=sgd",))
    path = tmp_path / "plan.json"
    path.write_text(files["plan.json"])
    s = read_settings(json.loads(files["plan.json"]), parse_args(["--plan", str(path)]), str(path))
    config, _, changes = mb.transformer_config(
        s.plan, full_dims(s.plan), s.layout, cpu=False, precision=s.precision
    )
    assert changes == []
    assert config.add_bias_linear is True and config.normalization == "LayerNorm"
    assert config.gated_linear_unit is False and config.fp16 is True
    c = core(files)
    ddp = DistributedDataParallelConfig(**c["DistributedDataParallelConfig"])
    assert ddp.grad_reduce_in_fp32 is False
    opt = OptimizerConfig(**{**c["OptimizerConfig"], "params_dtype": config.params_dtype})
    assert opt.optimizer == "sgd" and opt.fp16 is True


def _fake_settings(plan: dict[str, Any]) -> Any:
    return types.SimpleNamespace(plan=plan)


def _objects(plan: dict[str, Any]) -> dict[str, tuple[Any, dict[str, Any], set[str]]]:
    """Stand-ins of the built objects: attributes equal to the plan's values."""
    out = {}
    for group in (
        "TransformerConfig",
        "DistributedDataParallelConfig",
        "OptimizerConfig",
        "OptimizerParamScheduler",
    ):
        kw = dict(plan["engines"]["megatron_core"][group])
        out[group] = (types.SimpleNamespace(**kw), dict(kw), set())
    return out


@pytest.mark.parametrize(
    "group,key,value",
    [
        ("TransformerConfig", "add_bias_linear", True),
        ("TransformerConfig", "normalization", "LayerNorm"),
        ("TransformerConfig", "init_method_std", 0.5),
        ("TransformerConfig", "hidden_dropout", 0.3),
        ("DistributedDataParallelConfig", "grad_reduce_in_fp32", False),
        ("DistributedDataParallelConfig", "overlap_grad_reduce", False),
        ("OptimizerConfig", "optimizer", "sgd"),
        ("OptimizerConfig", "adam_beta2", 0.95),
        ("OptimizerParamScheduler", "lr_decay_style", "linear"),
        ("OptimizerParamScheduler", "lr_warmup_steps", 7),
    ],
)
def test_cross_check_compares_every_key(
    group: str, key: str, value: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bug: the worker's cross-check compared nine layout keys. Now every key of the four
    groups: one attribute of a built object changed (not announced) stops the worker."""
    pytest.importorskip("torch")
    from trainc.launch.worker.engines import megatron as train

    plan, _ = compile_case("llama3-8b-pp2-vpp2")
    built = _objects(plan)
    train.cross_check(_fake_settings(plan), built)  # as planned: agrees
    assert "all agree" in capsys.readouterr().out
    assert getattr(built[group][0], key) != value
    setattr(built[group][0], key, value)
    with pytest.raises(SystemExit, match=rf"{group}\.{key}"):
        train.cross_check(_fake_settings(plan), built)


def test_cross_check_stops_on_a_passed_value_that_is_not_announced() -> None:
    """... and a value passed differently from the plan without an override line, too."""
    pytest.importorskip("torch")
    from trainc.launch.worker.engines import megatron as train

    plan, _ = compile_case("llama3-8b-pp2-vpp2")
    built = _objects(plan)
    obj, passed, _ = built["OptimizerConfig"]
    passed["weight_decay"] = obj.weight_decay = 0.0
    with pytest.raises(SystemExit, match=r"OptimizerConfig\.weight_decay"):
        train.cross_check(_fake_settings(plan), built)
    built["OptimizerConfig"] = (obj, passed, {"weight_decay"})  # announced: accepted
    train.cross_check(_fake_settings(plan), built)


def test_cross_check_stops_on_a_missing_attribute() -> None:
    pytest.importorskip("torch")
    from trainc.launch.worker.engines import megatron as train

    plan, _ = compile_case("llama3-8b-pp2-vpp2")
    built = _objects(plan)
    del built["OptimizerParamScheduler"][0].wsd_decay_steps
    with pytest.raises(SystemExit):
        train.cross_check(_fake_settings(plan), built)


# --- found while writing these tests (not in issue 11's list) --------------------------------


def lr_curves(plan: dict[str, Any], steps: int) -> tuple[list[float], list[float]]:
    """The learning rate of each optimizer step on the two engines for one plan: Megatron-Core's
    OptimizerParamScheduler as the trainc worker drives it (``num_steps = step; step(0)``
    before each step), and the DeepSpeed scheduler of ds_config.json as DeepSpeed's engine
    drives it (built by deepspeed.initialize, ``step()`` after each optimizer step)."""
    import logging
    import warnings

    import torch
    from deepspeed.runtime import lr_schedules
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    group = {"params": [], "lr": 0.0, "weight_decay": 0.0}
    core_sched = OptimizerParamScheduler(
        types.SimpleNamespace(param_groups=[group]),
        **plan["engines"]["megatron_core"]["OptimizerParamScheduler"],
    )
    megatron = []
    for step in range(steps):
        core_sched.num_steps = step
        core_sched.step(0)
        megatron.append(group["lr"])
    cfg = plan["engines"]["deepspeed"]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg["optimizer"]["params"]["lr"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds_sched = getattr(lr_schedules, cfg["scheduler"]["type"])(
            opt, **cfg["scheduler"]["params"]
        )
    deepspeed = []
    for _ in range(steps):
        deepspeed.append(opt.param_groups[0]["lr"])
        ds_sched.step()
    return megatron, deepspeed


def _curve_mismatch(overrides: tuple[str, ...]) -> list[tuple[int, float, float]]:
    import math

    pytest.importorskip("deepspeed")
    pytest.importorskip("megatron.core")
    plan, _ = compile_case(
        "llama2-7b-deepspeed-zero3-offload", ("training.train_iters=200", *overrides)
    )
    megatron, deepspeed = lr_curves(plan, 200)
    return [
        (k, m, d)
        for k, (m, d) in enumerate(zip(megatron, deepspeed, strict=True))
        if not math.isclose(m, d, rel_tol=1e-9, abs_tol=1e-12)
    ]


def test_constant_lr_without_warmup_is_the_same_on_both_engines() -> None:
    """The comparison below is live: the one schedule both engines run alike."""
    assert _curve_mismatch(("training.lr_warmup_iters=0", "training.lr_decay_style=constant")) == []


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason=(
        "DeepSpeed's schedules are not Megatron-Core's for the same spec: deepspeed 0.19.8 "
        "lr_schedules.py sets the lr of iteration -1 at construction and warmup_num_steps = "
        "max(2, n), so (a) every warm-up lags one step (step 1 at lr 0, the peak at step W+1), "
        "(b) cosine without warm-up runs its first step at lr 0 (get_lr before start) and decays "
        "over total-2 steps, (c) linear without warm-up starts at min_lr for two steps instead of "
        "the peak (WarmupDecayLR warms up from warmup_min_lr), (d) lr_warmup_iters=1 warms up "
        "over 2 steps "
        "(c and d are refused by TRC323; docs/divergences.md)"
    ),
)
@pytest.mark.parametrize(
    "overrides",
    [
        (),  # cosine, warm-up 50
        ("training.lr_warmup_iters=0",),  # cosine, none
        ("training.lr_warmup_iters=0", "training.lr_decay_style=linear"),  # linear, none
        ("training.lr_decay_style=linear", "training.min_lr=0"),  # linear, warm-up 50
        ("training.lr_decay_style=constant",),  # constant, warm-up
        ("training.lr_warmup_iters=1",),  # one-step warm-up
    ],
    ids=[
        "cosine-warmup",
        "cosine-no-warmup",
        "linear-no-warmup",
        "linear-warmup",
        "constant-warmup",
        "warmup-1",
    ],
)
def test_deepspeed_lr_schedule_equals_megatron_cores(overrides: tuple[str, ...]) -> None:
    """The same spec trains with the same learning rate at every step on both engines."""
    assert _curve_mismatch(overrides) == []


@pytest.mark.parametrize(
    ("overrides", "claim"),
    [
        ((), "the peak lr"),
        (("training.lr_warmup_iters=0",), "2 steps short"),
        (("training.lr_decay_style=linear", "training.min_lr=0"), "one step earlier"),
    ],
)
def test_trc317_warns_of_what_deepspeeds_scheduler_really_does(overrides, claim) -> None:
    """The divergence above is not silent: TRC317 (a warning) says what DeepSpeed's scheduler
    does with the spec, and what it says holds on DeepSpeed's own scheduler class (trial 13:
    with a warm-up the cosine never reaches the peak, which the docs did not say)."""
    pytest.importorskip("deepspeed")
    pytest.importorskip("megatron.core")
    plan, _ = compile_case(
        "llama2-7b-deepspeed-zero3-offload", ("training.train_iters=200", *overrides)
    )
    [d] = [d for d in plan["diagnostics"] if d["rule"] == "TRC317"]
    assert d["severity"] == "warning" and claim in d["message"]
    megatron, deepspeed = lr_curves(plan, 200)
    assert deepspeed[0] == 0.0
    if claim == "the peak lr":
        assert max(megatron) == plan["spec"]["training"]["lr"] > max(deepspeed)
    elif claim == "2 steps short":
        assert megatron[0] > 0 and deepspeed[1] == megatron[0]
    else:
        assert deepspeed[1:] == pytest.approx(megatron[:-1], rel=1e-9, abs=1e-12)


# ds_config.json's scheduler cannot express lr_warmup_iters=1 (DeepSpeed warms up over
# max(2, warmup_num_steps) steps) nor linear decay to a min_lr > 0: TRC323 refuses both.
@pytest.mark.parametrize(
    "changes",
    [
        {"training.lr_warmup_iters": 1},
        {"training.lr_warmup_iters": 0, "training.lr_decay_style": "linear"},
    ],
    ids=["warmup-1", "linear-no-warmup"],
)
def test_deepspeed_schedules_it_cannot_run_are_refused(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    errs = errors(tmp_path, ds_spec(**changes))
    assert "TRC323" in {d.rule.id for d in errs}


# was a bug: with bf16, megatron_core.yaml says grad_reduce_in_fp32 but ds_config.json set no
# communication_data_type, so DeepSpeed reduced in bf16
def test_deepspeed_reduces_gradients_in_the_dtype_megatron_core_yaml_states() -> None:
    _, files = compile_case("llama2-7b-deepspeed-zero3-offload")
    cfg = ds(files)
    # DeepSpeed's choice when the config names none (DeepSpeedEngine.communication_data_type)
    reduce_dtype = cfg.get("communication_data_type") or (
        "fp16"
        if cfg.get("fp16", {}).get("enabled")
        else "bf16"
        if cfg.get("bf16", {}).get("enabled")
        else "fp32"
    )
    fp32 = core(files)["DistributedDataParallelConfig"]["grad_reduce_in_fp32"]
    assert (reduce_dtype == "fp32") == fp32


_DS_INIT = r"""
import json, os, sys, warnings
os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2],
                  RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", CUDA_VISIBLE_DEVICES="")
warnings.simplefilter("ignore")
import torch
import torch.distributed as dist
import deepspeed
sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # no JIT build (as the worker)
dist.init_process_group("gloo")
model = torch.nn.Linear(8, 8)
cfg = json.loads(sys.argv[1])
try:
    deepspeed.initialize(model=model, model_parameters=list(model.parameters()), config=cfg)
except Exception as e:
    print("REFUSED", type(e).__name__, e)
    sys.exit(1)
print("INITIALIZED")
"""


@pytest.mark.parametrize(
    "optimizer",
    [
        "adam",
        # torch.optim.SGD is not in DeepSpeed 0.19.8's ZERO_SUPPORTED_OPTIMIZERS: ds_config.json
        # says zero_allow_untested_optimizer (was: 'You are using an untested ZeRO Optimizer')
        "sgd",
    ],
)
def test_deepspeed_initializes_what_compile_accepts(tmp_path: Path, optimizer: str) -> None:
    """What compile accepts, the worker runs: deepspeed.initialize (one CPU process, gloo) on
    the worker's DeepSpeed config (ds_engine.load_config with --device cpu) of a ZeRO-1 spec."""
    pytest.importorskip("deepspeed")
    import os
    import subprocess
    import sys

    from trainc.launch.worker.engines.deepspeed import load_config
    from trainc.launch.worker.runtime import read_settings
    from trainc.launch.worker_args import parse_args

    files = ok(tmp_path, ds_spec(**{"training.optimizer": optimizer}))
    path = tmp_path / "plan.json"
    path.write_text(files["plan.json"])
    s = read_settings(
        json.loads(files["plan.json"]),
        parse_args(["--plan", str(path), "--device", "cpu", "--reference"]),
        str(path),
    )
    cfg = load_config(s)
    port = str(29000 + os.getpid() % 1000)
    run = subprocess.run(
        [sys.executable, "-c", _DS_INIT, json.dumps(cfg), port],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and "INITIALIZED" in run.stdout, (run.stdout + run.stderr)[-2000:]


@pytest.mark.parametrize(
    "changes",
    [
        {"training.train_iters": 10, "training.lr_warmup_iters": 10},
        {"training.lr_decay_iters": 5, "training.lr_warmup_iters": 8},
    ],
    ids=["warmup-equals-decay", "warmup-over-decay"],
)
def test_constant_schedule_compile_accepts_megatron_core_builds(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    """What compile accepts, the worker runs: the OptimizerParamScheduler of megatron_core.yaml
    builds (the worker passes that group as keyword arguments)."""
    pytest.importorskip("megatron.core")
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    result = compile_dict(tmp_path, spec(**{"training.lr_decay_style": "constant", **changes}))
    if not result.ok:  # refused at compile time: the fix
        assert "TRC323" in {d.rule.id for d in result.diagnostics if d.is_error}
        return
    stand_in = types.SimpleNamespace(param_groups=[{"params": [], "lr": 0.0, "weight_decay": 0.0}])
    OptimizerParamScheduler(stand_in, **core(result.files)["OptimizerParamScheduler"])
