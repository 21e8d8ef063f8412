"""megatron_args.txt (Megatron-LM core_v0.19.0 flags) and megatron_core.yaml (megatron-core
0.16.1 field names), checked against data extracted from those releases (tests/data)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from tests.support.emit import CASE_NAMES, compile_case, parse_args_file
from trainc.compiler.emit.megatron import megatron_flags

DATA = Path(__file__).resolve().parents[3] / "data"


#: golden cases that write megatron_args.txt (engine=megatron)
MEGATRON_CASES = [n for n in CASE_NAMES if "deepspeed" not in n and "fsdp" not in n]


def _flags_019() -> set[str]:
    with open(DATA / "megatron_cli_flags.tsv", encoding="utf-8") as f:
        rows = csv.DictReader((ln for ln in f if not ln.startswith("#")), delimiter="\t")
        return {r["flag"] for r in rows if r["in_core_v0.19.0"] == "Y"}


FLAGS_019 = _flags_019()
FIELDS = json.loads((DATA / "megatron_core_0.16.1_fields.json").read_text())["classes"]


def args_of(name: str, *overrides: str) -> dict[str, str | None]:
    _, files = compile_case(name, tuple(overrides))
    items = parse_args_file(files["megatron_args.txt"])
    flags = [i[0] for i in items]
    assert len(flags) == len(set(flags)), "a flag appears twice"
    return {i[0]: (i[1] if len(i) > 1 else None) for i in items}


def core_of(name: str, *overrides: str) -> dict:
    _, files = compile_case(name, tuple(overrides))
    return yaml.safe_load(files["megatron_core.yaml"])


def test_no_flag_of_another_release_or_the_unsafe_p2p_switch() -> None:
    for name in MEGATRON_CASES:
        args = args_of(name)
        assert "--virtual-pipeline-model-parallel-size" not in args
        assert "--no-overlap-p2p-communication" not in args


@pytest.mark.parametrize("name", MEGATRON_CASES)
def test_every_emitted_flag_exists_in_megatron_lm_0_19(name: str) -> None:
    args = args_of(name)
    assert sorted(set(args) - FLAGS_019) == []
    assert "--expert-tensor-parallel-size" in args  # always emitted
    assert ("--group-query-attention" in args) == ("--num-query-groups" in args)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_megatron_core_yaml_uses_real_0_16_1_field_names(name: str) -> None:
    core = core_of(name)
    assert set(core) == {
        "initialize_model_parallel",
        "TransformerConfig",
        "GPTModel",
        "DistributedDataParallelConfig",
        "OptimizerConfig",
        "OptimizerParamScheduler",
        "forward_backward_func",
        "callables",
    }
    for group, kwargs in core.items():
        if group == "callables":
            for cls, fields in kwargs.items():
                assert sorted(set(fields) - set(FIELDS[cls]["fields"])) == []
            continue
        assert sorted(set(kwargs) - set(FIELDS[group]["fields"])) == [], group
    tc = core["TransformerConfig"]
    assert tc["params_dtype"] in ("bfloat16", "float16", "float32")
    assert tc["pipeline_dtype"] == tc["params_dtype"] == core["OptimizerConfig"]["params_dtype"]
    assert not (tc["bf16"] and tc["fp16"])


@pytest.mark.parametrize("name", MEGATRON_CASES)
def test_args_and_core_yaml_agree(name: str) -> None:
    plan, _ = compile_case(name)
    a, c = args_of(name), core_of(name)
    tc, imp = c["TransformerConfig"], c["initialize_model_parallel"]
    pairs = {
        "--num-layers": tc["num_layers"],
        "--hidden-size": tc["hidden_size"],
        "--num-attention-heads": tc["num_attention_heads"],
        "--ffn-hidden-size": tc["ffn_hidden_size"],
        "--kv-channels": tc["kv_channels"],
        "--tensor-model-parallel-size": imp["tensor_model_parallel_size"],
        "--pipeline-model-parallel-size": imp["pipeline_model_parallel_size"],
        "--context-parallel-size": imp["context_parallel_size"],
        "--expert-model-parallel-size": imp["expert_model_parallel_size"],
        "--expert-tensor-parallel-size": imp["expert_tensor_parallel_size"],
        "--micro-batch-size": c["forward_backward_func"]["micro_batch_size"],
        "--seq-length": c["forward_backward_func"]["seq_length"],
    }
    for flag, value in pairs.items():
        assert a[flag] == str(value), flag
    assert ("--sequence-parallel" in a) == tc["sequence_parallel"]
    assert ("--bf16" in a) == tc["bf16"] and ("--fp16" in a) == tc["fp16"]
    assert ("--disable-bias-linear" in a) == (not tc["add_bias_linear"])
    assert ("--swiglu" in a) == tc["gated_linear_unit"]
    assert a["--normalization"] == tc["normalization"]
    assert ("--use-distributed-optimizer" in a) == c["DistributedDataParallelConfig"][
        "use_distributed_optimizer"
    ]
    assert c["GPTModel"]["vocab_size"] == plan["derived"]["padded_vocab_size"]
    assert c["forward_backward_func"]["num_microbatches"] == plan["derived"]["num_microbatches"]
    d = plan["derived"]
    assert imp["virtual_pipeline_model_parallel_size"] == (d["vpp"] if d["vpp"] > 1 else None)
    assert tc["overlap_p2p_comm"] is (d["vpp"] > 1) and tc["batch_p2p_comm"] is (d["vpp"] == 1)


def test_pp2_vpp2_keeps_overlapped_unbatched_p2p() -> None:
    a, c = args_of("llama3-8b-pp2-vpp2"), core_of("llama3-8b-pp2-vpp2")
    assert a["--pipeline-model-parallel-size"] == "2"
    assert a["--num-layers-per-virtual-pipeline-stage"] == "8"  # 32 layers / (2 * 2)
    assert "--no-overlap-p2p-communication" not in a
    assert "--num-virtual-stages-per-pipeline-rank" not in a
    tc = c["TransformerConfig"]
    assert tc["overlap_p2p_comm"] is True and tc["batch_p2p_comm"] is False
    assert tc["virtual_pipeline_model_parallel_size"] == 2


def test_uneven_pipeline_with_vpp_uses_virtual_stages_per_rank() -> None:
    a = args_of(
        "megatron-lm-uneven-cp",
        "parallel.vpp=1",
        "parallel.pipeline_first_stage_layers=8",
        "parallel.pipeline_last_stage_layers=8",
        "parallel.cp=1",
        "training.global_batch_size=256",
    )
    assert a["--decoder-first-pipeline-num-layers"] == "8"
    assert a["--decoder-last-pipeline-num-layers"] == "8"
    a2 = args_of(
        "megatron-lm-uneven-cp",
        "parallel.vpp=2",
        "parallel.pipeline_first_stage_layers=8",
        "parallel.pipeline_last_stage_layers=8",
        "parallel.cp=1",
        "training.global_batch_size=256",
    )
    assert a2["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert "--num-layers-per-virtual-pipeline-stage" not in a2


def test_cp_and_data_and_checkpoint_flags() -> None:
    a = args_of("megatron-lm-uneven-cp")
    assert a["--context-parallel-size"] == "2" and a["--cp-comm-type"] == "all_gather"
    assert a["--data-path"] == "/data/llama3/text_document" and "--mock-data" not in a
    assert a["--save"] == a["--load"] == "/checkpoints/llama3-8b-mlm"
    base = args_of("llama2-70b-tp8pp4")
    assert "--mock-data" in base and base["--tokenizer-type"] == "NullTokenizer"
    assert "--save" not in base and "--cp-comm-type" not in base


def test_vocab_matches_megatron_null_tokenizer_padding() -> None:
    """Since Megatron-LM core_v0.18.0 ``NullTokenizer(n).vocab_size == n`` (it no longer appends
    an end-of-document id); Megatron pads that to a multiple of make_vocab_size_divisible_by * tp,
    which must equal plan.json's padded vocab. 32001 at tp 2 pads to 32256 (writing n - 1 gave
    32000 at tp 1: the last token id fell outside the embedding)."""
    for name, over in (
        ("llama2-70b-tp8pp4", ()),
        ("llama3-8b-pp2-vpp2", ()),
        ("gpt3-175b", ()),
        ("cpu-shrink-tiny", ()),
        ("llama3-8b-pp2-vpp2", ("model.vocab_size=32001",)),
        ("llama2-70b-tp8pp4", ("model.vocab_size=33793",)),
    ):
        plan, _ = compile_case(name, over)
        a, m, d = args_of(name, *over), plan["spec"]["model"], plan["derived"]
        tokens = int(a["--vocab-size"])
        assert tokens == m["vocab_size"]
        unit = int(a["--make-vocab-size-divisible-by"]) * d["tp"]
        assert -(-tokens // unit) * unit == d["padded_vocab_size"]
    plan, _ = compile_case("llama3-8b-pp2-vpp2", ("model.vocab_size=32001",))
    assert plan["derived"]["padded_vocab_size"] == 32256  # 126 x (128 x tp 2)


def test_moe_flags() -> None:
    a = args_of("mixtral-8x7b-ep8")
    assert a["--num-experts"] == "8" and a["--moe-router-topk"] == "2"
    assert a["--moe-token-dispatcher-type"] == "alltoall"
    assert a["--expert-model-parallel-size"] == "8" and a["--expert-tensor-parallel-size"] == "1"
    assert "--moe-router-pre-softmax" not in a
    top1 = args_of("mixtral-8x7b-ep8", "model.moe_router_topk=1")
    assert "--moe-router-pre-softmax" in top1  # Megatron rejects topk 1 + softmax without it
    tc = core_of("mixtral-8x7b-ep8", "model.moe_router_topk=1")["TransformerConfig"]
    assert tc["moe_router_pre_softmax"] is True and tc["num_moe_experts"] == 8


def test_full_recompute_fp16_gpt3() -> None:
    a, c = args_of("gpt3-175b"), core_of("gpt3-175b")
    assert a["--recompute-granularity"] == "full" and a["--recompute-method"] == "uniform"
    assert a["--recompute-num-layers"] == "1" and "--fp16" in a and "--bf16" not in a
    assert a["--position-embedding-type"] == "learned_absolute" and "--rotary-base" not in a
    assert "--disable-bias-linear" not in a and "--swiglu" not in a
    assert "--untie-embeddings-and-output-weights" not in a
    assert c["GPTModel"]["share_embeddings_and_output_weights"] is True
    assert c["TransformerConfig"]["params_dtype"] == "float16"
    assert c["callables"]["TransformerConfig"]["activation_func"] == "torch.nn.functional.gelu"


def test_flag_values_round_trip_through_argparse_types() -> None:
    plan, _ = compile_case("llama2-70b-tp8pp4")
    items = dict((i[0], i[1] if len(i) > 1 else None) for i in megatron_flags(plan))
    assert float(items["--lr"]) == plan["spec"]["training"]["lr"]
    assert float(items["--min-lr"]) == plan["spec"]["training"]["min_lr"]
    assert float(items["--adam-eps"]) == plan["spec"]["training"]["adam_eps"]
    assert float(items["--adam-beta2"]) == plan["spec"]["training"]["adam_beta2"]


def test_cpu_device_uses_local_impl_and_gloo() -> None:
    a, c = args_of("cpu-shrink-tiny"), core_of("cpu-shrink-tiny")
    assert a["--transformer-impl"] == "local" and a["--distributed-backend"] == "gloo"
    assert c["TransformerConfig"]["use_cpu_initialization"] is True


def test_no_megatron_args_for_deepspeed() -> None:
    _, files = compile_case("llama2-7b-deepspeed-zero3-offload")
    assert "megatron_args.txt" not in files and "megatron_core.yaml" in files


@pytest.mark.parametrize("name", CASE_NAMES)
def test_megatron_core_accepts_it(name: str) -> None:
    """Differential check: megatron-core's own dataclasses (``__post_init__`` checks) take the
    emitted kwargs, when megatron-core (worker extra) is installed."""
    pytest.importorskip("megatron.core")
    import importlib
    import warnings

    import torch
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.transformer.transformer_config import TransformerConfig

    core = core_of(name)
    tc = dict(core["TransformerConfig"])
    for key in ("params_dtype", "pipeline_dtype"):
        tc[key] = getattr(torch, tc[key])
    for key, path in core["callables"]["TransformerConfig"].items():
        module, _, attr = path.rpartition(".")
        tc[key] = getattr(importlib.import_module(module), attr)
    oc = dict(
        core["OptimizerConfig"],
        params_dtype=getattr(torch, core["OptimizerConfig"]["params_dtype"]),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = TransformerConfig(**tc)
        DistributedDataParallelConfig(**core["DistributedDataParallelConfig"])
        OptimizerConfig(**oc)
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    class _Opt:  # the scheduler only sets lr / weight_decay on the param groups
        param_groups: ClassVar[list[dict[str, list[object]]]] = [{"params": []}]

    OptimizerParamScheduler(_Opt(), **core["OptimizerParamScheduler"])
    assert config.num_query_groups == core["TransformerConfig"]["num_query_groups"]
