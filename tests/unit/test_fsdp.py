"""engine=fsdp: the settings the engine builder decides (plan.json engines.fsdp), the torchtitan
0.3.0 overrides, normalization of the fsdp: section, and the worker's learning-rate schedule
against Megatron-Core's OptimizerParamScheduler."""

from __future__ import annotations

import types

import pytest
from specs.kit import make

from trainc.compiler.derive import derive
from trainc.compiler.engines.fsdp import fsdp_config
from trainc.compiler.pipeline import plan_and_estimate
from trainc.launch.engines.fsdp import lr_at

FSDP = {"engine": "fsdp", "parallel.pp": 1}  # kit BASE: 8 GPUs, tp2 -> dp 4

#: Field names of torchtitan 0.3.0's config dataclasses (torchtitan/config/configs.py
#: TrainingConfig, ParallelismConfig, CompileConfig, DebugConfig;
#: components/optimizer/lr_scheduler.py LRSchedulersContainer.Config;
#: components/checkpointer/base.py CheckpointManager config), read from the 0.3.0 wheel: the
#: flags trainc writes must name one of them.
TORCHTITAN_FIELDS = {
    "training": {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "disable_cuda_graphs", "dtype", "mixed_precision_param",
                 "mixed_precision_reduce", "gc_freq", "gc_debug"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem",
                    "tensor_parallel_degree", "enable_sequence_parallel", "spmd_backend",
                    "pipeline_parallel_degree", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                    "context_parallel_degree", "context_parallel_load_balancer",
                    "context_parallel_ptrr_mask_key", "expert_parallel_degree"},
    "compile": {"enable", "enable_async_tensor_parallel", "components", "backend"},
    "lr_scheduler": {"warmup_steps", "total_steps", "decay_ratio", "decay_type",
                     "min_lr_factor"},
    "checkpoint": {"enable", "interval"},
    "debug": {"seed"},
}


def cfg(**changes):
    spec = make(**{**FSDP, **changes})
    return spec, fsdp_config(spec, derive(spec))


def test_mesh_is_torchtitans_order_and_covers_the_world() -> None:
    spec, c = cfg()
    assert spec.fsdp.dp_shard == 4 and spec.fsdp.param_dtype.value == "bf16"
    assert c["mesh"] == {"device_type": "cuda",
                         "dim_names": ["pp", "dp_replicate", "dp_shard", "cp", "tp"],
                         "shape": [1, 1, 4, 1, 2]}
    assert c["fully_shard"] == {
        "mesh_dims": ["dp_shard"], "reshard_after_forward": True,
        "root_reshard_after_forward": False,
        "mp_policy": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
        "offload_policy": {"cpu": False, "pin_memory": True}}
    assert c["tensor_parallel"] == {"degree": 2, "sequence_parallel": True}
    assert c["batch"] == {"micro_batch_size": 1, "gradient_accumulation_steps": 4,
                          "global_batch_size": 16}


def test_hsdp_shards_over_both_dims_and_fp32_precision_gathers_fp32() -> None:
    spec, c = cfg(**{"fsdp.dp_replicate": 2, "training.precision": "fp32",
                     "fsdp.reshard_after_forward": False})
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
        ["--parallelism.pipeline_parallel_degree", "1"]]
    assert ["--training.local_batch_size", "1"] in args
    assert ["--training.global_batch_size", "16"] in args
    assert ["--training.enable_cpu_offload"] in args
    for item in args:
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
    assert c["pipeline"] == {"degree": 2, "stages_per_rank": 1, "schedule": "Schedule1F1B"}


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


@pytest.mark.parametrize("style,warmup", [("cosine", 0), ("cosine", 50), ("linear", 0),
                                          ("linear", 50), ("constant", 10)])
def test_worker_lr_is_megatron_cores(style: str, warmup: int) -> None:
    """The FSDP2 worker's schedule equals Megatron-Core 0.16.1's OptimizerParamScheduler as the
    Megatron worker drives it (num_steps = step, step(0))."""
    pytest.importorskip("megatron.core")
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    spec, c = cfg(**{"training.lr_decay_style": style, "training.lr_warmup_iters": warmup,
                     "training.train_iters": 200})
    from trainc.compiler.engines.megatron import megatron_core_kwargs

    kw = megatron_core_kwargs(spec, derive(spec))["OptimizerParamScheduler"]
    group = {"params": [], "lr": 0.0, "weight_decay": 0.0}
    core = OptimizerParamScheduler(types.SimpleNamespace(param_groups=[group]), **kw)
    for step in range(200):
        core.num_steps = step
        core.step(0)
        assert lr_at(c["lr_schedule"], step) == pytest.approx(group["lr"], rel=1e-12,
                                                               abs=1e-15), step


def test_fsdp_memory_model_exact() -> None:
    """fp32 shards of params, grads, Adam over dp_shard x cp; gathered bf16 copies of two blocks
    (or the whole stage without reshard); unsharded fp32 grads of two blocks; offload moves the
    shards to the host."""
    from trainc.compiler.estimate.fsdp import fsdp_states
    from trainc.compiler.estimate.params import StageParams

    sp = StageParams(dense=1000.0, expert=0.0, largest_layer=100.0)
    spec = make(**FSDP)  # dp_shard 4, bf16, adam
    st = fsdp_states(spec, sp)
    assert (st.params, st.grads, st.optimizer) == (4 * 1000 / 4 + 2 * 200, 1000 + 4 * 200,
                                                   8 * 1000 / 4)
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
        "dp:hsdp grad all_reduce (replicate)": (2, 2, 2 * 1.0 * 1000, "fsdp_replicate")}
    assert fsdp_crossings(spec) == {"fsdp_shard": False, "fsdp_replicate": True}
    # the plan's estimates carry them and nothing of Megatron's DDP
    assert plan.estimates is not None
    names = {c.name for c in plan.estimates.comm_collectives if c.axis == "dp"}
    assert names == {"fsdp param all_gather (fwd+bwd)", "fsdp grad reduce_scatter",
                     "hsdp grad all_reduce (replicate)"}


GOLDEN = "tests/golden/cases/llama3-8b-fsdp-hsdp/spec.yaml"


def _compile(*overrides: str):
    from pathlib import Path

    from trainc.compiler.pipeline import compile_spec

    return compile_spec(str(Path(__file__).resolve().parents[2] / GOLDEN), list(overrides))


def test_torchtitan_entrypoint_runs_the_pipeline_torchtitan_can() -> None:
    """launch.entrypoint torchtitan: torchrun.sh runs torchtitan.train with the file's overrides
    (pp with the ZBV schedule, which the trainc worker cannot split, TRC313), valid bash."""
    import subprocess

    r = _compile("launch.entrypoint=torchtitan", "parallel.pp=2", "parallel.vpp=2",
                 "fsdp.pp_schedule=ZBVZeroBubble")
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


@pytest.mark.parametrize("overrides,key", [
    (("engine=megatron", "launch.entrypoint=torchtitan"), "launch.entrypoint"),
    (("launch.entrypoint=torchtitan", "launch.device=cpu"), "launch.device"),
])
def test_torchtitan_entrypoint_is_fsdp_on_cuda(overrides: tuple[str, ...], key: str) -> None:
    r = _compile(*overrides)
    found = [d for d in r.diagnostics if d.rule.id == "TRC325"]
    assert [d.key for d in found] == [key]
    assert found[0].fix


@pytest.mark.parametrize("key,value", [("model.untie_embeddings_and_output_weights", False),
                                       ("model.position_embedding", "learned")])
def test_worker_tp_plan_limits_are_compile_errors(key: str, value: object) -> None:
    """The trainc FSDP2 worker's TP plan has no tied or learned-position embedding with tp > 1
    (TRC344 with the fix); tp 1, or the torchtitan runner, is accepted."""
    from specs.kit import find, lint_cfg

    found = find(lint_cfg(**FSDP, **{key: value}), "TRC344")
    assert [d.key for d in found] == [key] and "parallel.tp=1" in (found[0].fix or "")
    assert not find(lint_cfg(**FSDP, **{key: value, "parallel.tp": 1}), "TRC344")
    assert not find(lint_cfg(**FSDP, **{key: value, "launch.entrypoint": "torchtitan"}),
                    "TRC344")
