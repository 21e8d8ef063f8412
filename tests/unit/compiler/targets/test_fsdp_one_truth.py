"""engine=fsdp, one truth: every key the spec sets reaches the FSDP2 worker or torchtitan as
written, or is an error (TRC344) / a TRC329 warning where nothing reads it on any engine.

The torchtitan layer split is checked against a count-only model of torchtitan 0.3.0's
``pipeline_llm`` and ``generate_llm_fqn_per_model_part`` (``torchtitan/distributed/
pipeline_parallel.py``): ``ceil((L + first + last) / layers_per_stage)`` virtual stages (two
per rank for a looped schedule, one otherwise, without ``layers_per_stage``), each with
``(L + first + last) // stages`` layer slots (the remainder to the first stages), the first stage
giving ``first`` of them to the embedding and the last ``last`` to the norm and output; both
``*_less_layers`` default to 1.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support.kit import find, lint_cfg, make
from trainc.compiler.derive import derive, stage_chunk_sizes
from trainc.compiler.targets.fsdp import fsdp_config, torchtitan_stage_split

TITAN = {
    "engine": "fsdp",
    "launch.entrypoint": "torchtitan",
    "launch.device": "cuda",
    "parallel.tp": 1,
    "cluster.num_nodes": 1,
}


def torchtitan_layers(num_layers: int, pp: int, looped: bool, args: dict[str, str]) -> list[int]:
    """Transformer layers of each virtual stage as torchtitan 0.3.0 builds them from these
    ``--parallelism.*`` overrides (its defaults for the absent ones)."""
    per = args.get("--parallelism.pipeline_parallel_layers_per_stage")
    first = int(args.get("--parallelism.pipeline_parallel_first_stage_less_layers", 1))
    last = int(args.get("--parallelism.pipeline_parallel_last_stage_less_layers", 1))
    eff = num_layers + first + last
    stages = math.ceil(eff / int(per)) if per is not None else pp * (2 if looped else 1)
    base, extra = divmod(eff, stages)
    out, done = [], 0
    for i in range(stages):
        slots = base + (i < extra) - (first if i == 0 else last if i == stages - 1 else 0)
        take = min(max(slots, 0), num_layers - done)
        out.append(take)
        done += take
    return out


def megatron_layers(changes: dict[str, Any]) -> tuple[list[int], dict[str, str], int, bool]:
    """(layers per virtual stage as Megatron-Core chunks the plan's split, the torchtitan
    overrides, num_layers, looped schedule)."""
    spec = make(**{**TITAN, **changes})
    d = derive(spec)
    p = spec.parallel
    assert d.layers_per_stage is not None
    chunks = stage_chunk_sizes(
        list(d.layers_per_stage),
        p.vpp,
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
    )
    virtual = [chunks[r][j] for j in range(p.vpp) for r in range(p.pp)]
    args = {a[0]: a[1] if len(a) > 1 else "" for a in fsdp_config(spec, d)["torchtitan"]["args"]}
    return virtual, args, spec.model.num_layers, p.vpp > 1


SPLITS = {
    # torchtitan's defaults would give 2/3/2/1 (embedding and loss slots) and, with vpp 4,
    # two stages per rank
    "even-pp4": {"model.num_layers": 8, "parallel.pp": 4},
    "vpp4": {"model.num_layers": 32, "parallel.pp": 4, "parallel.vpp": 4},
    "vpp2-zbv": {
        "model.num_layers": 16,
        "parallel.pp": 2,
        "parallel.vpp": 2,
        "fsdp.pp_schedule": "ZBVZeroBubble",
    },
    "account-both": {
        "model.num_layers": 30,
        "parallel.pp": 4,
        "parallel.account_for_embedding_in_pipeline_split": True,
        "parallel.account_for_loss_in_pipeline_split": True,
    },
    "account-loss-vpp2": {
        "model.num_layers": 15,
        "parallel.pp": 2,
        "parallel.vpp": 2,
        "parallel.account_for_loss_in_pipeline_split": True,
    },
    "uneven": {
        "model.num_layers": 30,
        "parallel.pp": 4,
        "parallel.pipeline_first_stage_layers": 6,
        "parallel.pipeline_last_stage_layers": 6,
    },
    "uneven-pp2": {
        "model.num_layers": 8,
        "parallel.pp": 2,
        "parallel.pipeline_first_stage_layers": 3,
        "parallel.pipeline_last_stage_layers": 5,
    },
}


@pytest.mark.parametrize("name", list(SPLITS))
def test_torchtitan_builds_the_plans_layer_split(name: str) -> None:
    changes = SPLITS[name]
    assert not [d for d in lint_cfg(**TITAN, **changes) if d.is_error]
    virtual, args, layers, looped = megatron_layers(changes)
    assert torchtitan_layers(layers, changes["parallel.pp"], looped, args) == virtual, args


def test_torchtitans_defaults_would_change_the_split() -> None:
    """Why the three flags are always written with pp > 1."""
    for name in ("even-pp4", "vpp4"):
        virtual, args, layers, looped = megatron_layers(SPLITS[name])
        bare = {k: v for k, v in args.items() if "stage" not in k}
        assert torchtitan_layers(layers, SPLITS[name]["parallel.pp"], looped, bare) != virtual


def test_stage_split_values() -> None:
    def split(**changes: Any) -> tuple[int, int, int] | None:
        spec = make(**{**TITAN, **changes})
        return torchtitan_stage_split(spec, derive(spec))

    assert split(**{"model.num_layers": 32, "parallel.pp": 4, "parallel.vpp": 2}) == (4, 0, 0)
    assert split(
        **{
            "model.num_layers": 126,
            "parallel.pp": 16,
            "parallel.vpp": 8,
            "parallel.account_for_embedding_in_pipeline_split": True,
            "parallel.account_for_loss_in_pipeline_split": True,
            "cluster.num_nodes": 2,
            "training.global_batch_size": 32,
        }
    ) == (1, 1, 1)
    assert split(**SPLITS["uneven"]) == (9, 3, 3)
    assert split(**{"parallel.pp": 1}) is None


#: (spec changes, the key TRC344 names): values engine=fsdp would not read
IGNORED = {
    "cp_comm_type a2a": (
        {"parallel.cp": 2, "parallel.cp_comm_type": "a2a"},
        "parallel.cp_comm_type",
    ),
    "cp_comm_type all_gather, cp 1": (
        {"parallel.cp_comm_type": "all_gather"},
        "parallel.cp_comm_type",
    ),
    "recompute block": (
        {
            "training.recompute": "full",
            "training.recompute_method": "block",
            "training.recompute_num_layers": 1,
        },
        "training.recompute_method",
    ),
    "recompute 2 layers": (
        {"training.recompute": "full", "training.recompute_num_layers": 2},
        "training.recompute_num_layers",
    ),
    "uneven with vpp": (
        {
            "model.num_layers": 16,
            "parallel.pp": 2,
            "parallel.vpp": 2,
            "parallel.pipeline_first_stage_layers": 4,
            "parallel.pipeline_last_stage_layers": 12,
        },
        "parallel.pipeline_first_stage_layers",
    ),
    "end stage heavier": (
        {
            "model.num_layers": 24,
            "parallel.pp": 4,
            "parallel.pipeline_first_stage_layers": 10,
            "parallel.pipeline_last_stage_layers": 6,
        },
        "parallel.pipeline_first_stage_layers",
    ),
}


@pytest.mark.parametrize("name", list(IGNORED))
def test_a_setting_fsdp_would_ignore_is_an_error(name: str) -> None:
    changes, key = IGNORED[name]
    base = {**TITAN, "model.num_layers": 8, "parallel.pp": 2, **changes}
    found = [d for d in find(lint_cfg(**base), "TRC344") if d.key == key]
    assert len(found) == 1, [(d.rule.id, d.key, d.message) for d in lint_cfg(**base)]
    d = found[0]
    assert d.is_error and d.fix and d.edits and "engine=fsdp" in d.message
    fixed = {**base, **d.edits}
    assert not [x for x in find(lint_cfg(**fixed), "TRC344") if x.key == key]
    # another engine reads it: no TRC344 there
    assert not find(
        lint_cfg(**{**base, "engine": "megatron", "launch.entrypoint": "trainc"}), "TRC344"
    )


def test_the_defaults_and_a_uniform_recompute_are_accepted() -> None:
    ok = {
        **TITAN,
        "model.num_layers": 8,
        "parallel.pp": 2,
        "parallel.cp_comm_type": "p2p",
        "training.recompute": "full",
        "training.recompute_method": "uniform",
        "training.recompute_num_layers": 1,
    }
    assert not find(lint_cfg(**ok), "TRC344")


@pytest.mark.parametrize(
    "key,value",
    [
        ("model.moe_token_dispatcher_type", "flex"),
        ("model.moe_router_topk", 4),
        ("model.moe_ffn_hidden_size", 1024),
        ("model.moe_layer_freq", 2),
        ("model.moe_pad_expert_input_to_capacity", True),
        ("model.moe_router_pre_softmax", True),
        ("model.moe_shared_expert_intermediate_size", 1024),
        ("model.moe_router_padding_for_quantization", True),
        ("model.moe_flex_dispatcher_backend", "hybridep"),
        ("training.nvme_path", "/nvme"),
    ],
)
@pytest.mark.parametrize("engine", ["fsdp", "megatron"])
def test_keys_no_engine_reads_on_this_spec_are_trc329(key: str, value: Any, engine: str) -> None:
    """MoE keys on a dense model, nvme_path without nvme offload: inert on every engine."""
    base = {"engine": engine, "parallel.pp": 1, key: value}
    found = [d for d in find(lint_cfg(**base), "TRC329") if d.key == key]
    assert len(found) == 1 and found[0].severity.value == "warning"


def test_planner_offers_fsdp_no_setting_it_would_refuse() -> None:
    """The layout search does not propose what TRC344 refuses: one cp_comm_type, per-block
    full recompute, no uneven split with vpp > 1."""
    from trainc.planner.fast import _recompute_variants

    fx = {"training.recompute_method": None, "training.recompute_num_layers": None}
    assert _recompute_variants(["full"], 8, fx, fsdp=True) == [("full", "uniform", 1)]
    assert len(_recompute_variants(["full"], 8, fx)) > 1


def test_worker_builds_qkv_bias() -> None:
    """model.add_qkv_bias reaches the FSDP2 worker's model (q/k/v biases, none on the output
    projection), as Megatron-Core's linear_qkv."""
    pytest.importorskip("torch", reason="the FSDP2 worker's model needs the [worker] extra")
    from trainc.compiler.pipeline import plan_and_estimate
    from trainc.launch.shrink import shrink
    from trainc.launch.worker import torch_gpt

    _, diags, plan = plan_and_estimate(
        make(**{"engine": "fsdp", "parallel.pp": 1, "model.add_qkv_bias": True})
    )
    assert plan is not None, [d.message for d in diags if d.is_error]
    j = plan.to_json()
    opts = torch_gpt.options(j)
    assert opts["qkv_bias"] and not opts["bias"]
    attn = torch_gpt.GPT(shrink(j), opts).layers["0"].attention
    assert attn.wq.bias is not None and attn.wk.bias is not None and attn.wv.bias is not None
    assert attn.wo.bias is None
