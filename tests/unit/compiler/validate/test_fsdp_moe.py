"""engine=fsdp with experts: FSDP2 + expert parallelism as torchtitan 0.3.0 builds it.

Rules (trainc/compiler/validate/fsdp.py ``_experts``): EP borrows the ``dp_shard x cp x tp``
ranks (``ParallelDims.build_mesh``: ``efsdp = dp_shard * cp * tp // ep``), there is no expert
tensor-parallel degree, the MoE block has no auxiliary / z-loss, capacity or all-gather
dispatcher, and the trainc FSDP2 worker builds no experts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.kit import errors, find, lint_cfg, make
from trainc.compiler.derive import derive

#: 8 GPUs, an 8-expert top-2 MoE on torchtitan, tp 1 x pp 1 (dp 8), ep 4
TT_MOE: dict[str, Any] = {
    "engine": "fsdp",
    "launch.entrypoint": "torchtitan",
    "model.num_experts": 8,
    "model.moe_router_topk": 2,
    "model.moe_router_enable_expert_bias": True,
    "parallel.tp": 1,
    "parallel.pp": 1,
    "parallel.ep": 4,
}


def test_fsdp2_ep_on_torchtitan_lints_clean() -> None:
    assert errors(lint_cfg(**TT_MOE)) == []


def test_etp_defaults_to_one_with_ep_and_to_tp_without() -> None:
    """torchtitan's experts are not tensor-parallel with EP (EP borrows the tp ranks) and split
    over tp without it; Megatron-Core's default (etp = tp) is kept for engine=megatron."""
    assert derive(make(**{**TT_MOE, "parallel.tp": 2})).etp == 1
    assert derive(make(**{**TT_MOE, "parallel.tp": 2, "parallel.ep": 1})).etp == 2
    assert (
        derive(
            make(
                **{
                    **TT_MOE,
                    "engine": "megatron",
                    "launch.entrypoint": "trainc",
                    "parallel.tp": 2,
                    "parallel.sequence_parallel": True,
                    "model.moe_router_score_function": "sigmoid",
                }
            )
        ).etp
        == 2
    )


def test_ep_must_divide_dp_shard_cp_tp() -> None:
    """dp_replicate 2 x dp_shard 2 x tp 2 = 8 GPUs: EP borrows dp_shard x tp = 4 ranks, so ep 8
    (which divides the world and the experts: neither TRC104 nor TRC205) cannot unflatten."""
    cfg = {**TT_MOE, "parallel.tp": 2, "fsdp.dp_replicate": 2, "fsdp.dp_shard": 2, "parallel.ep": 8}
    hits = find(lint_cfg(**cfg), "TRC348")
    assert [(d.key, d.fix) for d in hits] == [
        (
            "parallel.ep",
            "set parallel.ep to one of 1, 2, 4 (divisors of 4 that divide the 8 experts)",
        )
    ]
    assert hits[0].edits == {"parallel.ep": 4}
    assert "2 x 1 x 2 = 4" in hits[0].message
    assert {d.rule.id for d in errors(lint_cfg(**cfg))} == {"TRC348"}
    assert errors(lint_cfg(**{**cfg, "parallel.ep": 4})) == []


def test_a_written_etp_torchtitan_cannot_build_is_an_error() -> None:
    diags = lint_cfg(**{**TT_MOE, "parallel.tp": 2, "parallel.etp": 2})
    hits = [d for d in find(diags, "TRC344") if d.key == "parallel.etp"]
    assert len(hits) == 1 and "it is 1 here" in hits[0].fix
    assert errors(lint_cfg(**{**TT_MOE, "parallel.tp": 2, "parallel.etp": 1})) == []


def test_the_trainc_worker_builds_no_experts() -> None:
    diags = lint_cfg(**{**TT_MOE, "launch.entrypoint": "trainc", "parallel.ep": 1})
    hits = find(diags, "TRC344")
    assert [d.key for d in hits] == ["model.num_experts"]
    assert hits[0].edits == {"launch.entrypoint": "torchtitan"}


def test_moe_settings_torchtitan_lacks_are_errors() -> None:
    cases = {
        "model.moe_aux_loss_coeff": {"model.moe_aux_loss_coeff": 0.01},
        "model.moe_router_load_balancing_type": {
            "model.moe_router_load_balancing_type": "sinkhorn"
        },
        "model.moe_z_loss_coeff": {"model.moe_z_loss_coeff": 0.001},
        "model.moe_expert_capacity_factor": {"model.moe_expert_capacity_factor": 1.25},
        "model.moe_token_dispatcher_type": {"model.moe_token_dispatcher_type": "allgather"},
    }
    for key, change in cases.items():
        hits = [d for d in find(lint_cfg(**{**TT_MOE, **change}), "TRC344") if d.key == key]
        assert len(hits) == 1, key
        assert "torchtitan 0.3.0's MoE has no" in hits[0].message


def test_the_aux_loss_fix_balances_with_the_expert_bias() -> None:
    """TRC344's fix for an aux loss on torchtitan, applied as it says, leaves a clean lint: it
    also turns on the expert bias (removing the coefficient alone left TRC385: no balancing)."""
    spec = {
        **TT_MOE,
        "model.moe_router_enable_expert_bias": False,
        "model.moe_aux_loss_coeff": 0.01,
    }
    (hit,) = [d for d in find(lint_cfg(**spec), "TRC344") if d.key == "model.moe_aux_loss_coeff"]
    assert "model.moe_router_enable_expert_bias=true" in (hit.fix or "")
    fixed = lint_cfg(**{**spec, **hit.edits})
    assert errors(fixed) == [] and find(fixed, "TRC385") == []
    # without the bias edit the job would lint with TRC385
    no_bias = {k: v for k, v in hit.edits.items() if k != "model.moe_router_enable_expert_bias"}
    assert find(lint_cfg(**{**spec, **no_bias}), "TRC385")


def test_expert_bias_reaches_torchtitan_with_softmax_scores() -> None:
    """torchtitan's MoE balances with the expert bias (load_balance_coeff), softmax or sigmoid:
    neither TRC386 (Megatron-only key) nor TRC384 (sigmoid only) fires for it there."""
    diags = lint_cfg(**TT_MOE)
    assert not find(diags, "TRC386") and not find(diags, "TRC384")
    assert find(
        lint_cfg(
            **{**TT_MOE, "engine": "deepspeed", "launch.entrypoint": "trainc", "parallel.ep": 1}
        ),
        "TRC386",
    )


# --- emission: plan.json engines.fsdp and torchtitan_args.txt ---------------------------------

#: 16 GPUs: dp_replicate 2 x dp_shard 4 x tp 2, ep 4 -> efsdp = 4 * 1 * 2 / 4 = 2
HSDP_EP: dict[str, Any] = {
    **TT_MOE,
    "cluster.num_nodes": 2,
    "parallel.tp": 2,
    "fsdp.dp_replicate": 2,
    "model.num_experts": 16,
    "model.moe_shared_expert_intermediate_size": 1024,
    "model.moe_router_score_function": "sigmoid",
    "model.moe_router_topk_scaling_factor": 2.5,
}


def _fsdp(**changes: Any) -> dict[str, Any]:
    from trainc.compiler.targets.fsdp import fsdp_config

    spec = make(**changes)
    return fsdp_config(spec, derive(spec))


def test_expert_mesh_and_placement_are_torchtitans() -> None:
    c = _fsdp(**HSDP_EP)
    assert c["expert_parallel"] == {
        "degree": 4,
        "efsdp": 2,
        "etp": 1,
        "sparse_mesh": {"dim_names": ["pp", "dp_replicate", "efsdp", "ep"], "shape": [1, 2, 2, 4]},
        "expert_mesh_dims": ["dp_replicate", "efsdp"],
        "expert_shard_placement": "Shard(0)",  # efsdp x ep = 8 <= 16 experts
        "local_experts": 4,
    }
    # efsdp x ep is always dp_shard x cp x tp (8 here): 4 experts over efsdp 4 x ep 2 = 8 > 4
    assert (
        _fsdp(**{**HSDP_EP, "model.num_experts": 4, "parallel.ep": 2})["expert_parallel"][
            "expert_shard_placement"
        ]
        == "Shard(1)"
    )
    assert ["--parallelism.expert_parallel_degree", "4"] in c["torchtitan"]["args"]


def test_dense_models_get_no_expert_keys() -> None:
    c = _fsdp(engine="fsdp", **{"parallel.pp": 1})
    assert "expert_parallel" not in c and "moe" not in c["torchtitan"]["registry"]
    assert not [a for a in c["torchtitan"]["args"] if "expert" in a[0]]


def test_router_reaches_torchtitan_as_megatron_core_computes_it() -> None:
    """sigmoid top-2: Megatron-Core renormalises the 2 weights (route_norm), then scales by 2.5;
    the expert bias is torchtitan's load_balance_coeff 1e-3; softmax without pre-softmax is the
    full softmax renormalised over the top k, a pre-softmax is not."""
    moe = _fsdp(**HSDP_EP)["torchtitan"]["registry"]["moe"]
    assert moe == {
        "num_experts": 16,
        "top_k": 2,
        "score_func": "sigmoid",
        "route_norm": True,
        "route_scale": 2.5,
        "load_balance_coeff": 0.001,
        "hidden_dim": 2048,
        "shared_experts_hidden_dim": 1024,
        "comm_backend": "standard",
        "moe_layers": [0, 1, 2, 3, 4, 5, 6, 7],
    }
    soft = {**TT_MOE, "model.moe_router_enable_expert_bias": False}
    assert _fsdp(**soft)["torchtitan"]["registry"]["moe"]["route_norm"] is True
    assert _fsdp(**soft)["torchtitan"]["registry"]["moe"]["load_balance_coeff"] is None
    pre = {**soft, "model.moe_router_pre_softmax": True}
    assert _fsdp(**pre)["torchtitan"]["registry"]["moe"]["route_norm"] is False
    flex = {
        **TT_MOE,
        "model.moe_token_dispatcher_type": "flex",
        "model.moe_flex_dispatcher_backend": "hybridep",
    }
    assert _fsdp(**flex)["torchtitan"]["registry"]["moe"]["comm_backend"] == "hybridep"


def test_emitted_names_are_torchtitan_030s() -> None:
    """The flag is a ParallelismConfig field and the registry keys are arguments of the 0.3.0
    config builders (read from the installed wheel)."""
    import dataclasses

    import pytest

    configs = pytest.importorskip("torchtitan.config.configs")
    # config_utils imports triton (absent on CPU): its builders' signatures are read, not run
    import ast
    import importlib.util

    where = importlib.util.find_spec("torchtitan")
    assert where is not None and where.submodule_search_locations
    src = Path(next(iter(where.submodule_search_locations))) / "models/common/config_utils.py"
    builders = {
        n.name: n for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.FunctionDef)
    }
    fields = {f.name for f in dataclasses.fields(configs.ParallelismConfig)}
    args = _fsdp(**HSDP_EP)["torchtitan"]["args"]
    flags = [a[0].removeprefix("--parallelism.") for a in args if "expert" in a[0]]
    assert flags == ["expert_parallel_degree"] and set(flags) <= fields
    assert "expert_tensor_parallel_degree" not in fields  # 0.3.0 has none: nothing to write
    names = set()
    for fn in ("make_moe_config", "make_router_config", "make_routed_experts_config"):
        a = builders[fn].args
        names |= {x.arg for x in a.args + a.kwonlyargs}
    moe = _fsdp(**HSDP_EP)["torchtitan"]["registry"]["moe"]
    assert set(moe) - names == {"shared_experts_hidden_dim", "moe_layers"}


def test_torchtitan_args_txt_carries_the_moe_registry_line(tmp_path) -> None:
    import json

    import yaml

    from tests.support.kit import BASE, apply
    from trainc.compiler.pipeline import compile_spec

    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(apply(BASE, HSDP_EP)))
    r = compile_spec(str(path), [], emit_files=True)
    text = r.files["torchtitan_args.txt"]
    lines = [x for x in text.splitlines() if x.startswith("#registry model.moe ")]
    assert len(lines) == 1
    assert (
        json.loads(lines[0].split(" ", 2)[2])
        == r.plan["engines"]["fsdp"]["torchtitan"]["registry"]["moe"]
    )
    assert "--parallelism.expert_parallel_degree 4" in text.splitlines()
    assert "(1, 2, 2, 4), 4 experts per EP rank" in text


def test_torchrun_sh_defaults_to_the_moe_module(tmp_path) -> None:
    """An MoE plan runs torchtitan's qwen3 module (llama3 has no experts, and an MoE
    config_registry function is not found there); a dense plan keeps llama3."""
    import yaml

    from tests.support.kit import BASE, apply
    from trainc.compiler.pipeline import compile_spec

    def script(overrides: dict[str, Any]) -> str:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(apply(BASE, overrides)))
        return compile_spec(str(path), [], emit_files=True).files["torchrun.sh"]

    moe = script(HSDP_EP)
    assert '--module "${TORCHTITAN_MODULE:-qwen3}"' in moe
    assert "#   TORCHTITAN_MODULE (qwen3)," in moe
    dense = {k: v for k, v in HSDP_EP.items() if not k.startswith(("model.", "parallel.ep"))}
    assert '--module "${TORCHTITAN_MODULE:-llama3}"' in script(dense)


# --- estimates: bytes per GPU, FSDP2 collectives, the EP all-to-all ---------------------------


def test_states_shard_dense_over_dp_shard_cp_and_experts_over_efsdp() -> None:
    """HSDP_EP: dp_shard 4 x cp 1 = 4 ranks shard the dense parameters, efsdp = 4 x 1 x 2 / 4 =
    2 the experts. A GPU with D = 1000 dense and E = 800 expert parameters (after TP / EP),
    largest block 100: shard = 1000/4 + 800/2 = 650; bf16 params gathered for 2 blocks, fp32
    gradients of 2 blocks, AdamW:
    params 4 x 650 + 2 x 2 x 100 = 3000, grads 4 x 650 + 4 x 2 x 100 = 3400, optimizer
    8 x 650 = 5200 bytes."""
    from trainc.compiler.estimate.fsdp import expert_shard_group, fsdp_states, shard_group
    from trainc.compiler.estimate.params import StageParams

    spec = make(**HSDP_EP)
    assert (shard_group(spec), expert_shard_group(spec)) == (4, 2)
    st = fsdp_states(spec, StageParams(dense=1000.0, expert=800.0, largest_layer=100.0))
    assert (st.params, st.grads, st.optimizer) == (3000.0, 3400.0, 5200.0)
    # without EP the experts (tensor-parallel over tp) are sharded with the dense group
    dense_ep = make(**{**HSDP_EP, "parallel.ep": 1})
    assert expert_shard_group(dense_ep) == 4
    st1 = fsdp_states(dense_ep, StageParams(dense=1000.0, expert=800.0, largest_layer=100.0))
    assert st1.optimizer == 8 * (1800 / 4)


def test_fsdp2_collectives_with_ep_exact() -> None:
    """M = 16 / (1 x dp 8) = 2 micro-batches, reshard after forward (2 gathers each):
    dense all-gather over 4: 1000 x 2 B x 3/4 = 1500 per call, 4 calls = 6000; dense
    reduce-scatter 1000 x 4 B x 3/4 x 2 = 6000; expert all-gather over efsdp 2:
    800 x 2 x 1/2 x 4 = 3200; expert reduce-scatter 800 x 4 x 1/2 x 2 = 3200; HSDP all-reduce of
    the 650-parameter fp32 shard over 2 replicas: 2 x 1/2 x 2600 x 2 = 5200. On 2 nodes of 8:
    the dense and expert groups span dp_shard x cp x tp = 8 ranks (one node), the replicas
    cross; members per domain: shard 8 / tp 2 = 4, experts 8 / ep 4 = 2, replicas 1."""
    from trainc.compiler.estimate.comm import StageComm
    from trainc.compiler.estimate.fsdp import add_fsdp_comm, fsdp_crossings, fsdp_members
    from trainc.compiler.estimate.params import StageParams
    from trainc.compiler.pipeline import plan_and_estimate

    spec = make(**HSDP_EP)
    _, _, plan = plan_and_estimate(spec, normalized=True)
    assert plan is not None and plan.derived.num_microbatches == 2
    sc = StageComm()
    add_fsdp_comm(spec, plan, sc, StageParams(dense=1000.0, expert=800.0, largest_layer=100.0))
    got = {k: (c.group_size, c.count, c.sent_bytes, c.group) for k, c in sc.collectives.items()}
    assert got == {
        "dp:fsdp param all_gather (fwd+bwd)": (4, 4, 6000.0, "fsdp_shard"),
        "dp:fsdp grad reduce_scatter": (4, 2, 6000.0, "fsdp_shard"),
        "dp:fsdp expert param all_gather (fwd+bwd)": (2, 4, 3200.0, "fsdp_expert"),
        "dp:fsdp expert grad reduce_scatter": (2, 2, 3200.0, "fsdp_expert"),
        "dp:hsdp grad all_reduce (replicate)": (2, 2, 5200.0, "fsdp_replicate"),
    }
    assert fsdp_crossings(spec) == {
        "fsdp_shard": False,
        "fsdp_replicate": True,
        "fsdp_expert": False,
    }
    assert fsdp_members(spec) == {"fsdp_shard": 4, "fsdp_replicate": 1, "fsdp_expert": 2}


def test_ep_all_to_all_and_expert_params_in_the_plan() -> None:
    """The dispatch + combine all-to-all over ep 4 (alltoall: each token goes to its top 2
    experts, 3/4 of the copies to other ranks): tokens per GPU and micro-batch b x s / tp (SP)
    = 1024 / 2 = 512 of h 512 bf16 = 524288 B; one dispatch sends 2 x 3/4 x 524288 = 786432 B;
    dispatch and combine in forward and backward of 8 MoE layers over M = 2 micro-batches =
    2 x 2 x 2 x 8 = 64 transfers: 50331648 B. Each EP rank holds 16 / ep experts per layer, not
    tensor-parallel (etp 1): ep 2 holds twice the expert parameters of ep 4."""
    from trainc.compiler.estimate.params import stage_params
    from trainc.compiler.pipeline import plan_and_estimate

    spec = make(**HSDP_EP)
    _, _, plan = plan_and_estimate(spec, normalized=True)
    assert plan is not None and plan.estimates is not None
    a2a = [c for c in plan.estimates.comm_collectives if c.axis == "ep"]
    assert [(c.name, c.group_size, c.sent_bytes) for c in a2a] == [
        ("dispatch+combine all_to_all", 4, 50331648)
    ]
    spec2 = make(**{**HSDP_EP, "parallel.ep": 2})
    _, _, plan2 = plan_and_estimate(spec2, normalized=True)
    assert plan2 is not None
    e4, e2 = stage_params(spec, plan)[0].expert, stage_params(spec2, plan2)[0].expert
    assert e4 > 0 and e2 == 2 * e4


def test_explain_names_the_experts_fsdp_group() -> None:
    from trainc.compiler.estimate.explain import fsdp_sharding
    from trainc.compiler.pipeline import plan_and_estimate

    _, _, plan = plan_and_estimate(make(**HSDP_EP), normalized=True)
    assert plan is not None
    text = fsdp_sharding(plan.to_json()["spec"])
    assert text == (
        "FSDP2 over dp_shard 4, HSDP x 2 replicas, experts over efsdp 2 x ep 4, "
        "reshard after forward"
    )
