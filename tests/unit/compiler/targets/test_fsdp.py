"""engine=fsdp: the settings the engine builder decides (plan.json engines.fsdp), the torchtitan
0.3.0 overrides, normalization of the fsdp: section, and the worker's learning-rate schedule
against Megatron-Core's OptimizerParamScheduler."""

from __future__ import annotations

import types

import pytest

from tests.support.kit import make
from trainc.compiler.derive import derive
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.targets.fsdp import fsdp_config

FSDP = {"engine": "fsdp", "parallel.pp": 1}  # kit BASE: 8 GPUs, tp2 -> dp 4

#: Field names of torchtitan 0.3.0's config dataclasses (torchtitan/config/configs.py
#: TrainingConfig, ParallelismConfig, CompileConfig, DebugConfig;
#: components/optimizer/lr_scheduler.py LRSchedulersContainer.Config;
#: components/checkpointer/base.py CheckpointManager config), read from the 0.3.0 wheel: the
#: flags trainc writes must name one of them.
TORCHTITAN_FIELDS = {
    "training": {
        "local_batch_size",
        "global_batch_size",
        "seq_len",
        "max_norm",
        "steps",
        "enable_cpu_offload",
        "disable_cuda_graphs",
        "dtype",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "gc_freq",
        "gc_debug",
    },
    "parallelism": {
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "enable_fsdp_symm_mem",
        "tensor_parallel_degree",
        "enable_sequence_parallel",
        "spmd_backend",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_ptrr_mask_key",
        "expert_parallel_degree",
    },
    "compile": {"enable", "enable_async_tensor_parallel", "components", "backend"},
    "lr_scheduler": {"warmup_steps", "total_steps", "decay_ratio", "decay_type", "min_lr_factor"},
    "checkpoint": {"enable", "interval"},
    "debug": {"seed"},
}


def cfg(**changes):
    spec = make(**{**FSDP, **changes})
    return spec, fsdp_config(spec, derive(spec))


def test_mesh_is_torchtitans_order_and_covers_the_world() -> None:
    spec, c = cfg()
    assert spec.fsdp.dp_shard == 4 and spec.fsdp.param_dtype.value == "bf16"
    assert c["mesh"] == {
        "device_type": "cuda",
        "dim_names": ["pp", "dp_replicate", "dp_shard", "cp", "tp"],
        "shape": [1, 1, 4, 1, 2],
    }
    assert c["fully_shard"] == {
        "mesh_dims": ["dp_shard"],
        "reshard_after_forward": True,
        "root_reshard_after_forward": False,
        "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
        "offload_policy": {"cpu": False, "pin_memory": True},
    }
    assert c["tensor_parallel"] == {"degree": 2, "sequence_parallel": True}
    assert c["batch"] == {
        "micro_batch_size": 1,
        "gradient_accumulation_steps": 4,
        "global_batch_size": 16,
    }


def test_hsdp_shards_over_both_dims_and_fp32_precision_gathers_fp32() -> None:
    spec, c = cfg(
        **{
            "fsdp.dp_replicate": 2,
            "training.precision": "fp32",
            "fsdp.reshard_after_forward": False,
        }
    )
    assert spec.fsdp.dp_shard == 2
    assert c["mesh"]["shape"] == [1, 2, 2, 1, 2]
    assert c["fully_shard"]["mesh_dims"] == ["dp_replicate", "dp_shard"]
    assert c["fully_shard"]["reshard_after_forward"] is False
    assert c["fully_shard"]["mp_policy"]["param_dtype"] == "float32"


def test_torchtitan_args_exact_and_named_after_its_dataclasses() -> None:
    _, c = cfg(**{"fsdp.dp_replicate": 2, "fsdp.cpu_offload": True})
    args = c["torchtitan"]["args"]
    assert c["torchtitan"]["version"] == "0.3.0"
    assert args[:7] == [
        ["--parallelism.data_parallel_replicate_degree", "2"],
        ["--parallelism.data_parallel_shard_degree", "2"],
        ["--parallelism.fsdp_reshard_after_forward", "always"],
        ["--parallelism.tensor_parallel_degree", "2"],
        ["--parallelism.enable_sequence_parallel"],
        ["--parallelism.context_parallel_degree", "1"],
        ["--parallelism.pipeline_parallel_degree", "1"],
    ]
    assert ["--training.local_batch_size", "1"] in args
    assert ["--training.global_batch_size", "16"] in args
    assert ["--training.enable_cpu_offload"] in args
    assert args[-1] == ["activation-checkpoint:selective"]  # tyro subcommand: last
    for item in args[:-1]:
        section, _, name = item[0][2:].partition(".")
        name = name.removeprefix("no-").replace("-", "_")
        assert name in TORCHTITAN_FIELDS[section], item


def test_pipeline_batch_is_one_torchtitan_step_of_microbatches() -> None:
    """With pp, torchtitan's local batch is the pipeline's whole batch, split into microbatches
    of micro_batch_size (so no further accumulation)."""
    spec = make(**{"engine": "fsdp"})  # tp2 pp2 -> dp 2, 8 microbatches of 1
    c = fsdp_config(spec, derive(spec))
    args = dict((a[0], a[1] if len(a) > 1 else None) for a in c["torchtitan"]["args"])
    assert args["--training.local_batch_size"] == "8"
    assert args["--parallelism.pipeline_parallel_microbatch_size"] == "1"
    assert args["--parallelism.pipeline_parallel_schedule"] == "1F1B"
    assert c["pipeline"] == {
        "degree": 2,
        "stages_per_rank": 1,
        "schedule": "Schedule1F1B",
        "layers_per_stage": 4,
        "first_stage_less_layers": 0,
        "last_stage_less_layers": 0,
    }  # 8 layers, 4 per stage
    assert args["--parallelism.pipeline_parallel_layers_per_stage"] == "4"
    assert args["--parallelism.pipeline_parallel_first_stage_less_layers"] == "0"
    assert args["--parallelism.pipeline_parallel_last_stage_less_layers"] == "0"


def test_fsdp_keys_with_another_engine_are_inert() -> None:
    _, diags, _ = plan_and_estimate(make(**{"fsdp.dp_replicate": 2}))
    found = [d for d in diags if d.rule.id == "TRC329"]
    assert [d.key for d in found] == ["fsdp.dp_replicate"]


def test_fsdp_plan_has_no_megatron_lm_or_deepspeed_settings() -> None:
    _, diags, plan = plan_and_estimate(make(**FSDP))
    assert plan is not None, [d.to_json() for d in diags if d.is_error]
    assert plan.engines.fsdp is not None and plan.engines.deepspeed is None
    assert plan.engines.megatron_lm is None
    assert plan.target_versions["torchtitan"] == "0.3.0"


@pytest.mark.parametrize(
    "style,warmup", [("cosine", 0), ("cosine", 50), ("linear", 0), ("linear", 50), ("constant", 10)]
)
def test_worker_lr_is_megatron_cores(style: str, warmup: int) -> None:
    """The FSDP2 worker's schedule equals Megatron-Core 0.16.1's OptimizerParamScheduler as the
    Megatron worker drives it (num_steps = step, step(0))."""
    pytest.importorskip("megatron.core")
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from trainc.launch.worker.engines.fsdp import lr_at  # the rank side imports torch

    spec, c = cfg(
        **{
            "training.lr_decay_style": style,
            "training.lr_warmup_iters": warmup,
            "training.train_iters": 200,
        }
    )
    from trainc.compiler.targets.megatron import megatron_core_kwargs

    kw = megatron_core_kwargs(spec, derive(spec))["OptimizerParamScheduler"]
    group = {"params": [], "lr": 0.0, "weight_decay": 0.0}
    core = OptimizerParamScheduler(types.SimpleNamespace(param_groups=[group]), **kw)
    for step in range(200):
        core.num_steps = step
        core.step(0)
        assert lr_at(c["lr_schedule"], step) == pytest.approx(group["lr"], rel=1e-12, abs=1e-15), (
            step
        )


def test_fsdp_memory_model_exact() -> None:
    """fp32 shards of params, grads, Adam over dp_shard x cp; gathered bf16 copies of two blocks
    (or the whole stage without reshard); unsharded fp32 grads of two blocks; offload moves the
    shards to the host."""
    from trainc.compiler.estimate.fsdp import fsdp_states
    from trainc.compiler.estimate.params import StageParams

    sp = StageParams(dense=1000.0, expert=0.0, largest_layer=100.0)
    spec = make(**FSDP)  # dp_shard 4, bf16, adam
    st = fsdp_states(spec, sp)
    assert (st.params, st.grads, st.optimizer) == (
        4 * 1000 / 4 + 2 * 200,
        1000 + 4 * 200,
        8 * 1000 / 4,
    )
    st = fsdp_states(make(**FSDP, **{"fsdp.reshard_after_forward": False}), sp)
    assert st.params == 1000 + 2 * 1100
    st = fsdp_states(make(**FSDP, **{"fsdp.cpu_offload": True, "training.optimizer": "sgd"}), sp)
    assert (st.params, st.grads, st.optimizer) == (400, 800, 0)


def test_fsdp_comm_model_exact() -> None:
    """Per micro-batch: all-gather fwd + bwd (bf16), reduce-scatter (fp32) over the shard group,
    HSDP all-reduce of the fp32 shard over the replicas; the shard group of 4 x tp 2 fits a node,
    the replicate group does not."""
    from trainc.compiler.estimate.comm import StageComm
    from trainc.compiler.estimate.fsdp import add_fsdp_comm, fsdp_crossings
    from trainc.compiler.estimate.params import StageParams

    spec = make(**FSDP, **{"cluster.num_nodes": 2, "fsdp.dp_replicate": 2})  # dp 8 = 2 x 4
    _, _, plan = plan_and_estimate(spec, normalized=True)
    assert plan is not None and plan.derived.num_microbatches == 2
    sc = StageComm()
    add_fsdp_comm(spec, plan, sc, StageParams(dense=1000.0, expert=0.0, largest_layer=100.0))
    got = {k: (c.group_size, c.count, c.sent_bytes, c.group) for k, c in sc.collectives.items()}
    assert got == {
        "dp:fsdp param all_gather (fwd+bwd)": (4, 4, 4 * 0.75 * 2000, "fsdp_shard"),
        "dp:fsdp grad reduce_scatter": (4, 2, 2 * 0.75 * 4000, "fsdp_shard"),
        "dp:hsdp grad all_reduce (replicate)": (2, 2, 2 * 1.0 * 1000, "fsdp_replicate"),
    }
    assert fsdp_crossings(spec) == {"fsdp_shard": False, "fsdp_replicate": True}
    # the plan's estimates carry them and nothing of Megatron's DDP
    assert plan.estimates is not None
    names = {c.name for c in plan.estimates.comm_collectives if c.axis == "dp"}
    assert names == {
        "fsdp param all_gather (fwd+bwd)",
        "fsdp grad reduce_scatter",
        "hsdp grad all_reduce (replicate)",
    }


def test_fsdp_collectives_hide_behind_the_compute_and_use_the_rails() -> None:
    """FSDP2 prefetches: together the shard group's collectives are exposed only beyond the
    stage's compute, plus the first block's share; a shard group of 16 across 2 nodes rides 8
    NICs per node (min(NVLink, 8 x NIC)), not one."""
    from trainc.compiler.estimate.comm import StageComm
    from trainc.compiler.estimate.time import _fsdp_exposed

    sc = StageComm()
    for name, sec in (("fsdp param all_gather (fwd+bwd)", 2.0), ("fsdp grad reduce_scatter", 1.0)):
        c = sc.get("dp", name, 16)
        c.seconds = sec
    _fsdp_exposed(sc, compute_step=2.5, n_layers=10)
    exposed = {c.name: c.exposed_seconds for c in sc.collectives.values()}
    # (3.0 - 2.5) + 3.0 / 10 = 0.8, split 2 : 1
    assert exposed == pytest.approx(
        {"fsdp param all_gather (fwd+bwd)": 0.8 * 2 / 3, "fsdp grad reduce_scatter": 0.8 / 3}
    )
    _fsdp_exposed(sc, compute_step=100.0, n_layers=10)
    assert sum(c.exposed_seconds for c in sc.collectives.values()) == pytest.approx(0.3)
    spec = make(**FSDP, **{"cluster.num_nodes": 2, "parallel.tp": 1})  # shard over 16
    _, _, plan = plan_and_estimate(spec, normalized=True)
    assert plan is not None and plan.estimates is not None
    [ag] = [c for c in plan.estimates.comm_collectives if c.name.startswith("fsdp param")]
    nic = spec.cluster.inter_node_bandwidth_gbps
    nvl = spec.cluster.intra_node_bandwidth_gbps
    assert ag.crosses_nodes and ag.bandwidth_gbps == pytest.approx(min(nvl, 8 * nic))
    # the step pays the exposed part and the slowdown the hidden part causes the compute it runs
    # under (18.9 % on average, arXiv 2507.03114): with_interference of the exposed seconds
    from trainc.compiler.estimate.time import OVERLAP_SLOWDOWN, _dp_exposed, with_interference

    sc2 = StageComm()
    for name, sec in (("fsdp param all_gather (fwd+bwd)", 2.0), ("fsdp grad reduce_scatter", 1.0)):
        sc2.get("dp", name, 16).seconds = sec
    _dp_exposed(plan.spec, plan, sc2, 0, 0.0, 0.0, 0.0, 2.5, 10)
    pre = {"fsdp param all_gather (fwd+bwd)": 0.8 * 2 / 3, "fsdp grad reduce_scatter": 0.8 / 3}
    for c in sc2.collectives.values():
        hidden = c.seconds - pre[c.name]
        assert c.exposed_seconds == pytest.approx(
            pre[c.name] + hidden * OVERLAP_SLOWDOWN / (1 - OVERLAP_SLOWDOWN)
        )
        assert c.exposed_seconds == pytest.approx(with_interference(c.seconds, pre[c.name]))


GOLDEN = "tests/golden/cases/llama3-8b-fsdp-hsdp/spec.yaml"


def _compile(*overrides: str):
    from pathlib import Path

    from trainc.compiler.pipeline import compile_spec

    return compile_spec(str(Path(__file__).resolve().parents[4] / GOLDEN), list(overrides))


def test_torchtitan_entrypoint_runs_the_pipeline_torchtitan_can() -> None:
    """launch.entrypoint torchtitan: torchrun.sh runs torchtitan.train with the file's overrides
    (pp with the ZBV schedule, which the trainc worker cannot split, TRC313), valid bash."""
    import subprocess

    r = _compile(
        "launch.entrypoint=torchtitan",
        "parallel.pp=2",
        "parallel.vpp=2",
        "fsdp.pp_schedule=ZBVZeroBubble",
    )
    assert r.ok, [d.to_json() for d in r.diagnostics if d.is_error]
    sh = r.files["torchrun.sh"]
    assert "-m torchtitan.train --module" in sh and "torchtitan_args.txt" in sh
    assert "trainc.launch.worker" not in sh and "pytorchjob.yaml" not in r.files
    assert subprocess.run(["bash", "-n"], input=sh, text=True).returncode == 0
    args = r.files["torchtitan_args.txt"].splitlines()
    assert "--parallelism.pipeline_parallel_schedule ZBVZeroBubble" in args
    assert "--training.local_batch_size 16" in args  # 16 micro-batches of 1 per pipeline step
    worker = _compile("parallel.pp=2", "parallel.vpp=2", "fsdp.pp_schedule=ZBVZeroBubble")
    assert {d.rule.id for d in worker.diagnostics if d.is_error} == {"TRC313"}


@pytest.mark.parametrize(
    "overrides,key",
    [
        (("engine=megatron", "launch.entrypoint=torchtitan"), "launch.entrypoint"),
        (("launch.entrypoint=torchtitan", "launch.device=cpu"), "launch.device"),
    ],
)
def test_torchtitan_entrypoint_is_fsdp_on_cuda(overrides: tuple[str, ...], key: str) -> None:
    r = _compile(*overrides)
    found = [d for d in r.diagnostics if d.rule.id == "TRC325"]
    assert [d.key for d in found] == [key]
    assert found[0].fix


@pytest.mark.parametrize(
    "key,value",
    [("model.untie_embeddings_and_output_weights", False), ("model.position_embedding", "learned")],
)
def test_worker_tp_plan_limits_are_compile_errors(key: str, value: object) -> None:
    """The trainc FSDP2 worker's TP plan has no tied or learned-position embedding with tp > 1
    (TRC344 with the fix); tp 1, or the torchtitan runner, is accepted."""
    from tests.support.kit import find, lint_cfg

    found = find(lint_cfg(**FSDP, **{key: value}), "TRC344")
    assert [d.key for d in found] == [key] and "parallel.tp=1" in (found[0].fix or "")
    assert not find(lint_cfg(**FSDP, **{key: value, "parallel.tp": 1}), "TRC344")
    assert not find(lint_cfg(**FSDP, **{key: value, "launch.entrypoint": "torchtitan"}), "TRC344")


# --- red-team findings (specs in tests/specs/fsdp/) ------------------------------------------

MESH_SPEC = "tests/specs/fsdp/fsdp-mesh-mismatch.yaml"  # 2 x 8 GPUs: dp 16; 3 x 4 given


def _lint_file(*overrides: str):
    from pathlib import Path

    from trainc.compiler.pipeline import compile_spec

    return compile_spec(str(Path(__file__).resolve().parents[4] / MESH_SPEC), list(overrides))


@pytest.mark.parametrize(
    "overrides,keys",
    [
        (("fsdp.dp_replicate=0",), ["fsdp.dp_replicate"]),
        (("fsdp.dp_replicate=-2", "fsdp.dp_shard=-8"), ["fsdp.dp_replicate", "fsdp.dp_shard"]),
        (("fsdp.dp_replicate=2", "fsdp.dp_shard=0"), ["fsdp.dp_shard"]),
    ],
)
def test_mesh_sizes_below_one_are_range_errors(overrides: tuple[str, ...], keys: list[str]) -> None:
    """dp_replicate 0 used to reach an AssertionError in the engine builder, and -2 x -8 = 16
    compiled with negative memory: both are TRC006, nothing is planned or written."""
    r = _lint_file(*overrides)
    assert not r.ok and not r.files
    assert sorted(d.key for d in r.diagnostics if d.rule.id == "TRC006") == keys
    assert [d.rule.id for d in r.diagnostics if d.is_error] == ["TRC006"] * len(keys)


def test_mesh_fix_keeps_the_other_given_key() -> None:
    """TRC340 with dp_shard 4 given: dp_replicate = 16 / 4 = 4 (applied, it lints clean); without
    a dividing dp_shard both keys are set."""
    from tests.support.kit import find, lint_cfg

    r = _lint_file()
    [d] = [d for d in r.diagnostics if d.rule.id == "TRC340"]
    assert d.edits == {"fsdp.dp_replicate": 4}
    assert d.fix == "set fsdp.dp_replicate=4 (dp 16 / fsdp.dp_shard 4)"
    assert _lint_file("fsdp.dp_replicate=4").ok
    base = {**FSDP, "cluster.num_nodes": 2}  # tp 2: dp 8
    [d] = find(lint_cfg(**base, **{"fsdp.dp_replicate": 3, "fsdp.dp_shard": 3}), "TRC340")
    assert d.edits == {"fsdp.dp_replicate": 2, "fsdp.dp_shard": 4}
    assert not find(lint_cfg(**base, **d.edits), "TRC340")
    [d] = find(lint_cfg(**base, **{"fsdp.dp_replicate": 3}), "TRC340")
    assert d.edits == {"fsdp.dp_replicate": 2}
    assert not find(lint_cfg(**base, **d.edits), "TRC340")


def test_pp_schedule_without_pipeline_is_inert() -> None:
    """fsdp.pp_schedule with pp 1: TRC329 (it used to be silently filled and ignored); with
    pp 2 it is read; left unset with pp 1 it stays null in the plan."""
    from tests.support.kit import find, lint_cfg

    [d] = find(lint_cfg(**FSDP, **{"fsdp.pp_schedule": "Interleaved1F1B"}), "TRC329")
    assert d.key == "fsdp.pp_schedule" and d.severity.value == "warning"
    assert "parallel.pp is 1" in d.message
    assert not find(lint_cfg(**FSDP), "TRC329")
    assert make(**FSDP).fsdp.pp_schedule is None
    assert make(**{**FSDP, "parallel.pp": 2}).fsdp.pp_schedule.value == "1F1B"


@pytest.mark.parametrize(
    "schedule,vpp,want",
    [("ZBVZeroBubble", 4, 2), ("ZBVZeroBubble", 1, 2), ("1F1B", 2, 1), ("Interleaved1F1B", 1, 2)],
)
def test_schedule_fix_is_the_vpp_the_schedule_needs(schedule: str, vpp: int, want: int) -> None:
    """TRC343 names the concrete vpp (and the other schedule) and its edit sets parallel.vpp;
    applied, TRC343 is gone."""
    from tests.support.kit import find, lint_cfg

    base = {
        "engine": "fsdp",
        "parallel.pp": 2,
        "launch.entrypoint": "torchtitan",
        "launch.device": "cuda",
        "model.num_layers": 8,
        "training.global_batch_size": 16,
    }
    [d] = find(lint_cfg(**base, **{"parallel.vpp": vpp, "fsdp.pp_schedule": schedule}), "TRC343")
    assert d.edits == {"parallel.vpp": want}
    assert d.fix.startswith(f"set parallel.vpp={want} (keeps {schedule}), or fsdp.pp_schedule=")
    assert not find(
        lint_cfg(**base, **{"parallel.vpp": want, "fsdp.pp_schedule": schedule}), "TRC343"
    )


def test_wsd_on_fsdp_is_one_finding() -> None:
    """WSD with engine=fsdp: the unsupported schedule only, not also lr_wsd_decay_iters."""
    from tests.support.kit import find, lint_cfg

    diags = find(lint_cfg(**FSDP, **{"training.lr_decay_style": "WSD"}), "TRC323")
    assert [d.key for d in diags] == ["training.lr_decay_style"]
    meg = find(lint_cfg(**{"training.lr_decay_style": "WSD"}), "TRC323")
    assert [d.key for d in meg] == ["training.lr_wsd_decay_iters"]


def test_torchtitan_registry_line_carries_every_optimizer_value() -> None:
    """torchtitan 0.3.0 has no optimizer flags (OptimizersContainer.Config.param_groups is a list
    of ParamGroupConfig with a kwargs dict): the #registry line states every value as written."""
    import json

    r = _compile(
        "training.adam_beta2=0.95",
        "training.weight_decay=0.05",
        "training.adam_eps=1e-5",
        "training.adam_beta1=0.85",
        "training.lr=2e-4",
    )
    assert r.ok
    [line] = [x for x in r.files["torchtitan_args.txt"].splitlines() if x.startswith("#registry ")]
    _, field, value = line.split(" ", 2)
    assert field == "optimizer.param_groups"
    assert json.loads(value) == [
        {
            "pattern": ".*",
            "optimizer_name": "AdamW",
            "optimizer_kwargs": {
                "lr": 2e-4,
                "betas": [0.85, 0.95],
                "eps": 1e-5,
                "weight_decay": 0.05,
            },
        }
    ]
    sgd = _compile("training.optimizer=sgd", "training.sgd_momentum=0.5")
    text = sgd.files["torchtitan_args.txt"]
    assert '"optimizer_name": "SGD"' in text and '"momentum": 0.5' in text
    assert "builds Adam, AdamW, DistMuon only: SGD needs a custom optimizer factory" in text


def test_sgd_with_the_torchtitan_entrypoint_is_refused() -> None:
    from tests.support.kit import find, lint_cfg

    base = {**FSDP, "launch.entrypoint": "torchtitan", "launch.device": "cuda"}
    [d] = [
        d
        for d in find(lint_cfg(**base, **{"training.optimizer": "sgd"}), "TRC344")
        if d.key == "training.optimizer"
    ]
    assert d.is_error and d.edits == {"training.optimizer": "adam"}
    assert not [d for d in find(lint_cfg(**base), "TRC344") if d.key == "training.optimizer"]


def test_checkpoint_layout_differences() -> None:
    """The FSDP2 worker's resume check: model dimensions and the optimizer, not the mesh (DCP
    reshards)."""
    pytest.importorskip("torch", reason="the FSDP2 worker needs the [worker] extra")
    from trainc.launch.worker.engines.fsdp import check_checkpoint, layout_differences

    saved = {
        "model": {"hidden_size": 64, "num_layers": 2},
        "optimizer": "AdamW",
        "mesh": {"dp_shard": 2},
    }
    now = {
        "model": {"hidden_size": 128, "num_layers": 2},
        "optimizer": "SGD",
        "mesh": {"dp_shard": 4},
    }
    assert layout_differences(saved, now) == ["hidden_size 64 -> 128", "optimizer AdamW -> SGD"]
    assert layout_differences(saved, {**saved, "mesh": {"dp_shard": 4}}) == []
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        check_checkpoint(d, now)  # no layout file (older checkpoint): loaded as is
        (Path(d) / "trainc_layout.json").write_text(json.dumps(saved))
        with pytest.raises(SystemExit) as e:
            check_checkpoint(d, now)
        assert str(e.value).startswith(
            f"trainc-worker: checkpoint {d} was written for another "
            "model than this run's (checkpoint -> this run: "
            "hidden_size 64 -> 128; optimizer AdamW -> SGD)"
        )
        # the other ranks stop too, silently: the job prints the line once, not once per rank
        with pytest.raises(SystemExit) as e:
            check_checkpoint(d, now, rank=1)
        assert e.value.code == 1
        check_checkpoint(d, {**saved, "mesh": {"dp_shard": 4}}, rank=1)  # same model: loads


def test_lint_of_dp_replicate_zero_exits_2_without_traceback() -> None:
    """The red-team command: ``trainc lint fsdp-mesh-mismatch.yaml fsdp.dp_replicate=0`` was an
    internal error (AssertionError in the engine builder); it is a TRC006 user error, exit 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[4]
    r = subprocess.run(
        [sys.executable, "-m", "trainc", "lint", str(root / MESH_SPEC), "fsdp.dp_replicate=0"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRAINC_NO_CACHE": "1"},
    )
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out and "AssertionError" not in out
    assert "error[TRC006 value-out-of-range]: fsdp.dp_replicate must be a positive number" in out


@pytest.mark.parametrize(
    ("stage", "reshard", "refused"),
    [(1, True, False), (3, True, False), (3, False, True), (2, True, True), (0, True, True)],
)
def test_zero_stage_with_fsdp_is_accepted_where_it_states_what_fsdp2_does(
    stage: int, reshard: bool, refused: bool
) -> None:
    """zero_stage 3 is what FSDP2 with reshard_after_forward does (trial 13: it was an error);
    with reshard_after_forward false (ZeRO-2-like) or another stage it would not reach the
    engine as written: TRC344."""
    from tests.support.kit import find, lint_cfg

    found = [
        d
        for d in find(
            lint_cfg(
                **FSDP, **{"parallel.zero_stage": stage, "fsdp.reshard_after_forward": reshard}
            ),
            "TRC344",
        )
        if d.key == "parallel.zero_stage"
    ]
    assert bool(found) == refused
